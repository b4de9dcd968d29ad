"""What an agent in env=shell must not be able to do: read task files, the project or the host's
devices; end a command early (a forged end line, a forged status, bash parked in a read); gain
privileges (setuid programs, capabilities, a user namespace through any syscall ABI); or hold more
memory than the sandbox's cap across processes. The same attempts from the python sandbox (the
python_tool environment and the code reward) are in tests/integration/test_sandbox.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from shell_helpers import UID_BASE, USERNS_ATTEMPTS, bash, item, make, sandbox_processes, task

from mintrl.env.shell.session import ShellLimits, ShellSession

REPO = Path(__file__).resolve().parents[2]
EVERY_ISOLATION = {
    "network": True,
    "pid": True,
    "mount": True,
    "user_namespace": False,
    "separate_user": True,
    "memory_cgroup": True,
    "cpu_cgroup": True,
    "own_session_keyring": True,
    "read_only": True,
    "visible_only": True,
    "host_root_detached": True,
    "no_new_privs": True,
    "no_user_namespaces": True,
    "oom_kills": 0,
}
# processes that each hold 120 MiB, started one after another, all held until /tmp/go exists: under a
# 300 MiB cap over the sandbox two of them live to print "done", the OOM killer ends the others
HOLDER = r"""
import os, sys, time
x = b"\1" * (120 << 20)
open(sys.argv[1], "w").write("held")
while not os.path.exists("/tmp/go"):
    time.sleep(0.01)
print("done")
"""
HOLD_SIX = (
    "cat > /tmp/holder.py <<'EOF'\n" + HOLDER + "EOF\n"
    "for i in 1 2 3 4 5 6; do python3 /tmp/holder.py /tmp/h$i > /tmp/d$i 2>/dev/null & "
    "until [ -s /tmp/h$i ] || ! kill -0 $! 2>/dev/null; do sleep 0.01; done; done; "
    "touch /tmp/go; wait; cat /tmp/d* | grep -c done"
)


def test_task_files_the_project_and_host_devices_are_not_visible(task_file):
    env = make()
    try:
        env.reset([item(task("What is the code?", "", "48213"))])
        command = (
            f"cat {task_file}; cat {REPO / 'pyproject.toml'} | head -n 3; ls /srv /work /sys 2>&1 | head -n 3; "
            "echo; ls / | tr '\\n' ' '; echo; ls /dev | tr '\\n' ' '; echo; grep -c -e /work -e /srv /proc/self/mountinfo"
        )
        observation = env.step([0], [bash(command)]).observations[0]
    finally:
        env.close()
    first_line = (REPO / "pyproject.toml").read_text().splitlines()[0]
    assert "48213" not in observation and first_line not in observation
    assert f"cat: {task_file}: No such file or directory" in observation
    assert "ls: cannot access '/srv': No such file or directory" in observation
    assert "\nbin dev etc home lib lib64 proc root sbin tmp usr var \n" in observation
    assert "\nfd full null random shm stderr stdin stdout tty urandom zero \n0\n" in observation  # no kmsg, kvm, disks
    assert sandbox_processes() == []


def _forged_end(session: ShellSession) -> str:
    """Shell text that forges the end of the command run two after this call: the wrapper's text is
    spied with a DEBUG trap, and the end line it would write goes to stdout and to bash's saved copy
    of the status channel (fd 11 during a command)."""
    spy = session.run("trap 'echo \"$BASH_COMMAND\"' DEBUG", 5.0).output
    session.run("trap - DEBUG", 5.0)
    status = re.search(r"printf '(\d+):%d", spy)
    if status:  # an out-of-band status line
        line = f"{int(status.group(1)) + 2}:0"
    else:  # a marker on stdout with a nonce
        marker = re.search(r"__mintrl_([0-9a-f]+)_(\d+)__", spy)
        line = f"__mintrl_{marker.group(1)}_{int(marker.group(2)) + 2}__:0"
    return f"printf '\\n{line}\\n'; printf '{line}\\n' >&11 2>/dev/null"


@pytest.mark.parametrize(
    "then",
    [
        "sleep 3",
        "read x < <(sleep 3)",  # bash blocked in a read of fd 0 (another pipe)
        "read -t 3 x <&10",  # bash blocked in a read of the command pipe itself (its saved copy)
        'printf() { builtin printf "$@"; read -t 3 x; }',  # the wrapper's own printf then reads the pipe
        "exec bash --noprofile --norc <&10 3>&11",  # a new bash on the command pipe and the status channel
    ],
    ids=["sleep", "read-another-pipe", "read-the-command-pipe", "redefined-printf", "exec-bash"],
)
def test_a_forged_end_does_not_end_the_command_early(then):
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        forged = session.run(f"{_forged_end(session)}; {then}; echo after", 1.0)
    assert (forged.timed_out, forged.exit_code) == (True, None) and forged.seconds >= 1.0


def test_commands_still_come_back_with_their_state_status_and_own_output():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        first = session.run("cd /tmp && x=5 && echo hi", 5.0)
        second = session.run("echo $x $(pwd); false", 5.0)
        lookalike = session.run("printf '5:0\\n__mintrl_0_5__:0\\n'; exit_code=7; (exit $exit_code)", 5.0)
        fds = session.run("exec 3>/dev/null 0</dev/zero; echo redirected", 5.0)  # undone after the command
        after = session.run("echo $x", 5.0)
        check = session.end_check
    assert check == "prompt"  # this machine shows bash's top-level read
    assert (first.output, first.exit_code) == ("hi\n", 0)
    assert (second.output, second.exit_code) == ("5 /tmp\n", 1)
    assert (lookalike.output, lookalike.exit_code) == ("5:0\n__mintrl_0_5__:0\n", 7)
    assert (fds.output, fds.exit_code, after.output) == ("redirected\n", 0, "5\n")


def test_no_privileges_and_no_user_namespace_in_the_shell():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        status = session.run("grep -e NoNewPrivs -e CapBnd /proc/self/status", 5.0)
        userns = session.run("unshare -r id -u", 5.0)
        mount = session.run("mkdir -p /tmp/m && mount -t tmpfs none /tmp/m", 5.0)
        abis = session.run(f"python3 - <<'EOF'\n{USERNS_ATTEMPTS}EOF", 5.0)
    assert status.output == "CapBnd:\t0000000000000000\nNoNewPrivs:\t1\n"
    assert userns.exit_code != 0 and "Operation not permitted" in userns.output
    assert mount.exit_code != 0  # setuid mount runs without privileges
    lines = abis.output.splitlines()
    assert lines[0] == "unshare -1 False" and all(line.endswith(" False") for line in lines)
    assert lines[1:] in ([], ["x32 -1 False", "int80 -1 False"])  # -1 is -EPERM from int 0x80


def test_processes_together_cannot_hold_more_than_the_memory_cap():
    session = ShellSession(UID_BASE, ShellLimits(memory_mb=300), 65536)  # the cap defaults to memory_mb
    try:
        held = session.run(HOLD_SIX, 20.0)
    finally:
        session.close()
    if not session.isolation["memory_cgroup"]:
        pytest.skip("this machine refused a memory cgroup: the bound is memory_mb x processes")
    # 6 x 120 MiB asked, 2 x 120 MiB held at once: bash reports each of the 4 others killed
    assert (held.output.endswith("\n2\n"), held.output.count(" Killed "), held.exit_code) == (True, 4, 0)
    assert session.isolation == dict(EVERY_ISOLATION, oom_kills=4)
    assert sandbox_processes() == []


def test_the_shell_reports_every_isolation_this_machine_grants():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        assert session.run("true", 5.0).exit_code == 0
    assert session.isolation == EVERY_ISOLATION
