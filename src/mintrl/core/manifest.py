"""The run manifest: where a run came from (the commit of the code it imported, the machine, the
command line).

``mintrl-train`` writes :func:`manifest` to ``<output_dir>/manifest.json`` before it builds anything
(:func:`write_manifest`), so a result can always be traced to the tree that produced it, also when the
report is written later from another checkout (``mintrl-reproduce`` reads these files, see
:mod:`mintrl.analysis`). The commit is read from the git checkout holding the imported ``mintrl``
package (``src/mintrl`` of an editable install or a ``PYTHONPATH`` worktree); an installed wheel has none
and records ``unknown``.
"""

from __future__ import annotations

import calendar
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from lightning.fabric.utilities.rank_zero import rank_zero_only

MANIFEST_FILE = "manifest.json"
LEGACY_MANIFEST_FILE = "provenance.json"  # the same record, as runs before the rename wrote it
UNKNOWN = "unknown"
DIRTY = " (uncommitted changes)"


def git_commit(repo_dir: str | Path = ".") -> str:
    """``git rev-parse HEAD`` in ``repo_dir``, with `` (uncommitted changes)`` appended when ``git status
    --porcelain`` lists changes to tracked files; ``unknown`` when git or the repository is unavailable
    (each git call may take at most 30 s)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo_dir, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo_dir,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return f"{head}{DIRTY}" if dirty and head else head or UNKNOWN


def machine() -> dict:
    """This machine: ``platform``, ``processor``, ``cpu_count`` (logical CPUs), ``python`` and ``torch``
    versions (``not installed`` without torch)."""
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch_version,
    }


def source_dir() -> Path:
    """The folder of the imported ``mintrl`` package (``.../src/mintrl`` in a checkout)."""
    import mintrl

    return Path(mintrl.__file__).resolve().parent


def manifest(argv: list[str] | None = None) -> dict:
    """What :func:`write_manifest` records: ``commit`` (:func:`git_commit` of the checkout holding the
    imported package), ``source`` (that package's folder), ``argv`` (the command line; default
    ``sys.argv``), ``started_utc`` (ISO 8601, seconds) and ``machine`` (:func:`machine`)."""
    src = source_dir()
    return {
        "commit": git_commit(src),
        "source": str(src),
        "argv": list(sys.argv if argv is None else argv),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
    }


@rank_zero_only
def write_manifest(output_dir: str | Path, argv: list[str] | None = None) -> Path:
    """Write :func:`manifest` as ``<output_dir>/manifest.json`` (global rank 0 only; other ranks
    return None). A resumed run overwrites it: the file names the code of the run's last start.

    Returns:
        The file's path.

    Raises:
        OSError: the folder cannot be created or written.
    """
    path = Path(output_dir) / MANIFEST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest(argv), indent=2) + "\n")
    return path


def manifest_path(run_dir: str | Path) -> Path:
    """``<run_dir>/manifest.json``, or the ``provenance.json`` that runs before the rename wrote
    (documented fallback) when only that file exists."""
    path = Path(run_dir) / MANIFEST_FILE
    legacy = Path(run_dir) / LEGACY_MANIFEST_FILE
    return legacy if not path.is_file() and legacy.is_file() else path


def read_started(run_dir: str | Path) -> float | None:
    """The ``started_utc`` of the run manifest (:func:`manifest_path`) in seconds since the epoch; None when the
    file or the field is missing or the file is not valid JSON."""
    path = manifest_path(run_dir)
    try:
        started = json.loads(path.read_text()).get("started_utc")
        return calendar.timegm(time.strptime(started, "%Y-%m-%dT%H:%M:%SZ"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def read_commit(run_dir: str | Path) -> str | None:
    """The ``commit`` recorded in the run manifest (:func:`manifest_path`); None when the file is missing or holds
    no commit (runs written before the file existed).

    Raises:
        ValueError: the file is not valid JSON (names the file).
    """
    path = manifest_path(run_dir)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    commit = data.get("commit") if isinstance(data, dict) else None
    return str(commit) if commit else None
