"""Starting ``launcher.py`` (the sandbox of one process): its JSON config and its process."""

from __future__ import annotations

import functools
import glob
import json
import os
import signal
import stat
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
# a writable root's environment: its programs run as root, so the sbin folders are on the PATH (as in a container)
WRITABLE_ROOT_ENV = {**SAFE_ENV, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
ROOT_IDS = 65536  # host uids (and gids) of one writable root: uid_base .. uid_base + 65535


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev")
# package folders of the system's Pythons (Debian's dist-packages, a python:3.x image's /usr/local, Fedora's lib64):
# hidden under an empty read-only tmpfs in every sandbox, so that no installed package (a dataset's files, a
# benchmark's solutions) is readable, whatever interpreter or shell runs there
SYSTEM_SITE_GLOBS = tuple(
    f"{base}/{lib}/python3*/{folder}"
    for base in ("/usr", "/usr/local")
    for lib in ("lib", "lib64")
    for folder in ("site-packages", "dist-packages")
)
_QUERY = (
    "import json, os, site, sys, sysconfig; p = sysconfig.get_paths(); print(json.dumps({"
    "'exe': os.path.realpath(sys.executable), 'libdir': sysconfig.get_config_var('LIBDIR'), "
    "'stdlib': [p['stdlib'], p['platstdlib']], 'site': site.getsitepackages() + [p['purelib'], p['platlib']]}))"
)


@functools.lru_cache(maxsize=None)
def _interpreter_folders(python: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(visible, hidden)`` folders of the interpreter ``python`` (real paths): its binary's folder,
    its library folder and standard library; its package folders (``site.getsitepackages()``,
    ``purelib``, ``platlib``, and every ``lib*/python3*/{site,dist}-packages`` of its prefix).
    Asked of the interpreter itself (``-I -S``); where it does not answer, the binary's folder and
    ``<prefix>/lib`` are shown and the package folders under the prefix are found by name."""
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    visible, hidden = [os.path.dirname(real), os.path.join(prefix, "lib")], []
    try:
        answer = subprocess.run(
            [real, "-I", "-S", "-c", _QUERY], env=SAFE_ENV, capture_output=True, text=True, timeout=60, check=True
        )
        info = json.loads(answer.stdout)
        visible += [p for p in (info["libdir"], *info["stdlib"]) if isinstance(p, str) and p]
        hidden += [p for p in info["site"] if isinstance(p, str) and p]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        pass
    hidden += [p for pattern in ("lib*/python3*/site-packages", "lib*/python3*/dist-packages") for p in glob.glob(
        os.path.join(glob.escape(prefix), pattern))]  # fmt: skip
    real_paths = lambda paths: tuple(dict.fromkeys(os.path.realpath(p) for p in paths))  # noqa: E731
    return real_paths(visible), real_paths(hidden)


def _outside(paths, folders) -> list[str]:
    """The ``paths`` not inside any of ``folders`` (nor inside an earlier path of the list)."""
    kept: list[str] = []
    for path in paths:
        if path not in ("", "/") and not any(path == f or path.startswith(f + "/") for f in (*folders, *kept)):
            kept.append(path)
    return kept


def visible_paths(python: str | None = None) -> list[str]:
    """The host paths a sandbox sees (read-only): :data:`SYSTEM_PATHS` (commands, libraries,
    ``/etc``, devices) and, for a ``python`` installed outside them (pyenv, conda, a relocated
    build), its binary's folder, library folder and standard library (real paths): not the rest of
    its prefix (``share``, ``include``, conda's ``pkgs``). Its package folders are hidden again
    (:func:`hidden_paths`)."""
    if not python:
        return list(SYSTEM_PATHS)
    return list(SYSTEM_PATHS) + _outside(_interpreter_folders(python)[0], SYSTEM_PATHS)


def hidden_paths(python: str | None = None) -> list[str]:
    """Folders under the visible paths that a sandbox sees empty (an empty read-only tmpfs over
    each): every installed package's folder of the system's Pythons (:data:`SYSTEM_SITE_GLOBS`) and
    of ``python`` (its ``site.getsitepackages()``, ``purelib``, ``platlib``, and the
    ``{site,dist}-packages`` under its prefix, real paths), whether it is a venv, conda, pyenv or a
    system Python under ``/usr`` or ``/usr/local``. Only the standard library stays readable."""
    paths = [os.path.realpath(p) for pattern in SYSTEM_SITE_GLOBS for p in sorted(glob.glob(pattern))]
    if python:
        paths += _interpreter_folders(python)[1]
    return [p for p in dict.fromkeys(paths) if os.path.isdir(p)]


def _private_entries(folder: str) -> list[str]:
    """The files under ``folder`` that a user with no privilege and no group cannot read (regular
    files without the read bit for others) and the folders it cannot list or enter (without ``r``
    or ``x`` for others), not following symlinks, not descending into such folders nor into
    another file system (an overlay of ``folder`` shows its own file system only)."""
    device, found, stack = os.stat(folder).st_dev, [], [folder]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_mode & 0o005 != 0o005:
                    found.append(entry.path)
                elif info.st_dev == device:
                    stack.append(entry.path)
            elif stat.S_ISREG(info.st_mode) and not info.st_mode & 0o004:
                found.append(entry.path)
    return found


@functools.lru_cache(maxsize=None)
def private_paths(folders: tuple[str, ...]) -> tuple[str, ...]:
    """What a writable root hides of the host's ``folders`` (host paths, the same inside): the files
    and folders under them that the default sandbox uid, a user with no privilege and no group,
    cannot read or list (:func:`_private_entries`: ``/etc/shadow``, ``/etc/ssl/private``, a
    service's 0600 configuration...). A writable root's root owns the host's files, so each of these
    is emptied in its copy (the password files scrubbed instead). Scanned once per process and
    folder list (about 0.5 s for a ``/usr`` of 140k entries); :func:`launcher_config` scans ``/etc``
    again for each sandbox."""
    return tuple(path for folder in folders if os.path.isdir(folder) for path in _private_entries(folder))


# what a state check sees as the host has it, whatever the agent left there (launcher.py's check view): the
# folders of programs, libraries, interpreters' modules and the configuration of how programs load and run
CHECK_PRISTINE_FOLDERS = (
    "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32", "/usr/libexec",
    "/usr/local/lib", "/usr/share/perl", "/usr/share/perl5", "/usr/local/share/perl", "/bin", "/sbin", "/lib",
    "/lib32", "/lib64", "/libx32", "/etc/alternatives", "/etc/ld.so.conf.d", "/etc/perl", "/etc/pam.d",
    "/etc/security", "/etc/profile.d",
)  # fmt: skip
# files of the same kind (an empty file where the host has none)
CHECK_PRISTINE_FILES = (
    "/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/environment", "/etc/pam.conf",
    "/etc/profile", "/etc/bash.bashrc",
)  # fmt: skip


@functools.lru_cache(maxsize=None)
def link_targets(folders: tuple[str, ...]) -> tuple[str, ...]:
    """Where the symlinks under the host's ``folders`` lead outside them (real paths, existing, not
    under ``/dev`` or ``/proc``, none inside another of the list): Debian's
    ``/usr/lib/python3.X/sitecustomize.py -> /etc/python3.X/sitecustomize.py``, ``/usr/bin/pg_ctl ->
    /usr/share/postgresql-common/pg_wrapper``, ``/usr/lib/ssl/openssl.cnf -> /etc/ssl/openssl.cnf``:
    code and configuration the host's programs reach through a link, which a state check must see
    as the host has it too. Scanned once per process and folder list (about 0.4 s for a ``/usr/lib``
    of 140k entries)."""
    real = [f for f in folders if os.path.isdir(f) and not os.path.islink(f)]
    inside = lambda p, roots: any(p == r or p.startswith(r + "/") for r in roots)  # noqa: E731
    found = set()
    for folder in real:
        for parent, dirs, files in os.walk(folder):
            for name in (*dirs, *files):
                path = os.path.join(parent, name)
                if os.path.islink(path):
                    target = os.path.realpath(path)
                    if os.path.exists(target) and not inside(target, (*real, "/dev", "/proc")):
                        found.add(target)
    kept: list[str] = []
    for target in sorted(found):  # a folder sorts before what it holds
        if not inside(target, kept):
            kept.append(target)
    return tuple(kept)


def launcher_config(
    run_dir: str,
    uid: int,
    limits: dict,
    tmp_bytes: int,
    harness: str | Sequence[str] | None = None,
    argv: Sequence[str] | None = None,
    tmpfs_dirs: Sequence[str] = (),
    python: str | None = None,
    writable_root_uid: int | None = None,
) -> dict:
    """The JSON config of one ``launcher.py`` run (see its docstring), in harness or program mode.

    Args:
        run_dir: a fresh folder only this process writes: the launcher's status file
            (``status.json``) and, where no private ``/tmp`` can be mounted, the working directory
            (``work``, which must exist) go there.
        uid: the sandbox uid (and gid) the program runs as (used only as root).
        limits: ``wall_s`` (seconds), ``cpu_s`` (seconds), ``address_space_bytes``,
            ``file_size_bytes`` (bytes), ``processes``, ``open_files`` (counts), optionally
            ``memory_total_bytes`` (bytes, the whole sandbox) and ``cpu_cores`` (CPU time per
            wall-clock second of the whole sandbox, in cores; default 1.0).
        tmp_bytes: size of each private tmpfs (bytes).
        harness: path of the harness script, or paths whose texts run as one (harness mode), or None.
        argv: the program and its arguments to exec (program mode), or None.
        tmpfs_dirs: more folders hidden under a private writable tmpfs (absolute paths).
        python: the interpreter that runs the harness (harness mode; ``cfg["python"]``); its
            installation's binary, library and standard-library folders are made visible with the
            system folders (:func:`visible_paths`), its package folders hidden (:func:`hidden_paths`).
        writable_root_uid: None (default): the read-only root below, the program runs as ``uid``.
            Otherwise a writable root (launcher run as root only): the program runs as root
            (uid 0, a container's capabilities) of a user namespace whose uids and gids 0..65535 are
            the host's ``writable_root_uid`` .. ``writable_root_uid + 65535`` (a range of host ids
            that nothing else uses, none below 65536; ``uid`` is then unused), every visible folder
            is an overlay whose writes land on a private tmpfs of ``tmp_bytes``, the root itself a
            writable tmpfs of ``tmp_bytes``, what others cannot read on the host emptied
            (:func:`private_paths`, the password files' hashes replaced by ``*``), and ``PATH``
            holds the sbin folders (:data:`WRITABLE_ROOT_ENV`). Everything written vanishes with
            the sandbox. A state check (``ShellSession.run_checks``) sees :data:`CHECK_PRISTINE_FOLDERS`,
            :data:`CHECK_PRISTINE_FILES` and their :func:`link_targets` as the host has them.

    The sandbox sees only :func:`visible_paths` of the host (read-only, or copy-on-write with a
    writable root) less :func:`hidden_paths` (every installed package's folder: empty), its private
    tmpfs folders and a fresh ``/proc``: task files, the project, installed packages and every other
    folder stay out of reach.

    Raises:
        ValueError: neither or both of ``harness`` and ``argv``; a ``writable_root_uid`` range that
            is not within [65536, 2**32 - 1).
    """
    if (harness is None) == (argv is None):
        raise ValueError("launcher_config needs exactly one of harness and argv")
    if writable_root_uid is not None and not ROOT_IDS <= int(writable_root_uid) <= 2**32 - 1 - ROOT_IDS:
        raise ValueError(f"writable_root_uid {writable_root_uid} is not in [65536, 2**32 - 65537]")
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
        "hidden": hidden_paths(python),
    }
    if writable_root_uid is not None:
        folders = tuple(p for p in cfg["visible"] if p != "/dev" and not os.path.islink(p))
        cfg["writable_root"] = {
            "uid_base": int(writable_root_uid),
            # /etc scanned again for each sandbox: a file made private there since the cached scan is hidden too
            "private": list(dict.fromkeys([*private_paths(folders), *_private_entries("/etc")])),
            "pristine": {
                "folders": list(CHECK_PRISTINE_FOLDERS),
                "files": list(CHECK_PRISTINE_FILES),
                "links": list(link_targets(CHECK_PRISTINE_FOLDERS)),
            },
        }
        cfg["env"] = WRITABLE_ROOT_ENV
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
