"""`make` targets run from a test: the venv running the tests (STAMP= : no set-up), the caller's make state
removed (under `make test`, MAKEFLAGS and MAKELEVEL would make every target print "Entering directory" lines)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_make(target: str, *args: str, dry: bool = False, timeout: float | None = None):
    """Run `make <target>` in the repository with this interpreter's venv as BIN; args are extra
    VAR=value settings. dry: `make -n` (print the commands, run nothing). Returns the CompletedProcess
    (text stdout/stderr); raises CalledProcessError for a dry run that fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env["TOKENIZERS_PARALLELISM"] = "false"
    cmd = ["make", "--no-print-directory", *(["-n"] if dry else []), target, "STAMP="]
    cmd += [f"BIN={Path(sys.executable).parent}", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=dry, timeout=timeout)
