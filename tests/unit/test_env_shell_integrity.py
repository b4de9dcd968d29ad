"""What an agent in env=shell (and a program in the python sandbox) must not be able to do: read task
files or the project from the host, end a command early by printing its end marker, gain privileges
through setuid programs, or make a user namespace to become uid 0 there."""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path

import pytest
from shell_helpers import UID_BASE, bash, item, make, sandbox_processes, task

from mintrl.env.shell.session import ShellLimits, ShellSession
from mintrl.reward.sandbox import Outcome, Program, Sandbox

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def task_file():
    """An AgentBench OS task file outside every temporary folder, with its answer in it."""
    folder = Path("/srv") / f"mintrl-test-{secrets.token_hex(4)}"
    folder.mkdir(parents=True)
    path = folder / "os.json"
    path.write_text(json.dumps([{"description": "What is the code?", "evaluation": {"match": "48213"}}]))
    path.chmod(0o644)
    yield path
    shutil.rmtree(folder)


def test_task_files_and_the_project_are_not_visible(task_file):
    env = make()
    try:
        env.reset([item(task("What is the code?", "", "48213"))])
        command = f"cat {task_file}; cat {REPO / 'pyproject.toml'} | head -n 3; ls /srv /work 2>&1 | head -n 3"
        observation = env.step([0], [bash(command)]).observations[0]
    finally:
        env.close()
    first_line = (REPO / "pyproject.toml").read_text().splitlines()[0]
    assert "48213" not in observation and first_line not in observation
    assert f"cat: {task_file}: No such file or directory" in observation
    assert sandbox_processes() == []


def test_a_printed_end_marker_does_not_end_the_command_early():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        spy = session.run("trap 'echo \"$BASH_COMMAND\"' DEBUG", 5.0)  # the wrapper's text, marker and all
        nonce = re.search(r"__mintrl_([0-9a-f]+)_\d+__", spy.output).group(1)
        forged = session.run(f"printf '\\n__mintrl_{nonce}_2__:0\\n'; sleep 3; echo after", 1.0)
    assert forged.timed_out and forged.exit_code is None and forged.seconds >= 1.0


def test_commands_still_come_back_with_their_state_and_status():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        first = session.run("cd /tmp && x=5 && echo hi", 5.0)
        second = session.run("echo $x $(pwd); false", 5.0)
    assert (first.output, first.exit_code) == ("hi\n", 0)
    assert (second.output, second.exit_code) == ("5 /tmp\n", 1)


def test_no_privileges_and_no_user_namespace_in_the_shell():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        nnp = session.run("grep NoNewPrivs /proc/self/status", 5.0)
        userns = session.run("unshare -r id -u", 5.0)
    assert nnp.output == "NoNewPrivs:\t1\n"
    assert userns.exit_code != 0 and "Operation not permitted" in userns.output


def test_no_user_namespace_and_no_host_files_in_the_python_sandbox(task_file):
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
        f"print(os.path.exists({str(task_file)!r}), os.path.exists({str(REPO / 'pyproject.toml')!r}))\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')])\n"
    )
    result = Sandbox(workers=1, timeout_s=5.0, uid_base=UID_BASE + 7).run([Program(code, "")])[0]
    assert result.outcome is Outcome.PASSED
    assert result.stdout.split("\n") == ["-1 1", "False False", "['1']"]
