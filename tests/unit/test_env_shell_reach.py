"""What a shell's commands can read of the host's Python installations: the system Python runs with
its standard library, and every folder of installed packages (Debian's dist-packages, /usr/local's
site-packages) is empty, so no package's files (a dataset, a benchmark's solutions) are in reach."""

from __future__ import annotations

import glob
import os

from shell_helpers import UID_BASE, sandbox_processes

from mintrl.env.shell.session import ShellLimits, ShellSession
from mintrl.sandbox.launch import SYSTEM_SITE_GLOBS

LIST = 'for d in {folders}; do printf \'%s %s\\n\' "$d" "$(ls -A "$d" 2>/dev/null | wc -l)"; done'
PYTHON = (
    "python3 -c 'import json, sys; print(len(sys.path) > 0, json.dumps([1]))'; python3 -c 'import yaml' 2>&1 | tail -1"
)


def test_the_shell_sees_no_installed_package_of_the_system_python():
    folders = sorted(p for pattern in SYSTEM_SITE_GLOBS for p in glob.glob(pattern) if os.listdir(p))
    assert folders, "premise: this machine's system Python has packages installed"
    assert any(os.path.isdir(f"{f}/yaml") for f in folders), "premise: PyYAML is installed for the system Python"
    with ShellSession(UID_BASE + 2, ShellLimits(wall_s=30.0, memory_mb=256, processes=16), 65536) as shell:
        listed = shell.run(LIST.format(folders=" ".join(folders)), 10.0)
        ran = shell.run(PYTHON, 10.0)
    assert listed.output.splitlines() == [f"{f} 0" for f in folders]
    assert ran.output.splitlines() == ["True [1]", "ModuleNotFoundError: No module named 'yaml'"]
    assert sandbox_processes() == []
