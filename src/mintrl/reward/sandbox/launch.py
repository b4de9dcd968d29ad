"""Starting ``launcher.py`` (the sandbox of one process): its JSON config and its process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

LAUNCHER = str(Path(__file__).resolve().parent / "launcher.py")
SAFE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev")


def visible_paths(python: str | None = None) -> list[str]:
    """The host paths a sandbox sees (read-only): :data:`SYSTEM_PATHS` (commands, libraries,
    ``/etc``, devices) and, for a ``python`` outside them, its installation's folder (the real path
    of ``<prefix>``, found from ``<prefix>/bin/python``), which holds its standard library."""
    paths = list(SYSTEM_PATHS)
    if python:
        real = os.path.realpath(python)
        prefix = os.path.dirname(os.path.dirname(real))
        if not any(real.startswith(p + "/") for p in SYSTEM_PATHS) and prefix not in ("", "/"):
            paths.append(prefix)
    return paths


def launcher_config(
    run_dir: str,
    uid: int,
    limits: dict,
    tmp_bytes: int,
    harness: str | Sequence[str] | None = None,
    argv: Sequence[str] | None = None,
    tmpfs_dirs: Sequence[str] = (),
    python: str | None = None,
) -> dict:
    """The JSON config of one ``launcher.py`` run (see its docstring), in harness or program mode.

    Args:
        run_dir: a fresh folder only this process writes: the launcher's status file
            (``status.json``) and, where no private ``/tmp`` can be mounted, the working directory
            (``work``, which must exist) go there.
        uid: the sandbox uid (and gid) the program runs as (used only as root).
        limits: ``wall_s`` (seconds), ``cpu_s`` (seconds), ``address_space_bytes``,
            ``file_size_bytes`` (bytes), ``processes``, ``open_files`` (counts).
        tmp_bytes: size of each private tmpfs (bytes).
        harness: path of the harness script, or paths whose texts run as one (harness mode), or None.
        argv: the program and its arguments to exec (program mode), or None.
        tmpfs_dirs: more folders hidden under a private writable tmpfs (absolute paths).
        python: the interpreter that runs the harness (harness mode; ``cfg["python"]``); its
            installation's folder is made visible with the system folders (:func:`visible_paths`).

    The sandbox sees only :func:`visible_paths` of the host (read-only), its private tmpfs folders
    and a fresh ``/proc``: task files, the project and every other folder stay out of reach.

    Raises:
        ValueError: neither or both of ``harness`` and ``argv``.
    """
    if (harness is None) == (argv is None):
        raise ValueError("launcher_config needs exactly one of harness and argv")
    cfg = {
        "workdir": os.path.join(run_dir, "work"),
        "uid": int(uid),
        "gid": int(uid),
        "limits": dict(limits),
        "tmp_bytes": int(tmp_bytes),
        "env": SAFE_ENV,
        "status_path": os.path.join(run_dir, "status.json"),
        "caller_home": os.path.expanduser("~"),
        "tmpfs_dirs": list(tmpfs_dirs),
        "new_root": os.path.join(run_dir, "root"),
        "visible": visible_paths(python),
    }
    if harness is not None:
        cfg["harness"] = harness if isinstance(harness, str) else list(harness)
        if python is not None:
            cfg["python"] = python
    else:
        cfg["argv"] = list(argv)
    return cfg


def start_launcher(cfg: dict, **popen_kwargs) -> subprocess.Popen:
    """Start ``launcher.py`` with ``cfg`` (:func:`launcher_config`) in a new session, with a
    scrubbed environment and no inherited descriptors; ``popen_kwargs`` set its stdin, stdout and
    stderr.

    Raises:
        OSError: the process could not be started.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", LAUNCHER, json.dumps(cfg)],
        env=SAFE_ENV,
        start_new_session=True,
        close_fds=True,
        **popen_kwargs,
    )


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def head(f, n: int) -> str:
    f.seek(0)
    return f.read(n).decode("utf-8", "replace")
