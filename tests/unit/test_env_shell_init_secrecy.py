"""A task's init script is hidden from the agent: it runs in a process of its own that exits before
the agent's first command, so the agent's commands find none of its text, its variables or a file it
deleted anywhere they can read (the memory of every process they see through /proc/<pid>/mem, every
environment and command line), in the episode's first shell and in one rebuilt by replay, while the
files it made are there."""

from __future__ import annotations

import secrets

import pytest
from shell_helpers import UID_BASE, bash, item, make, out, sandbox_processes, task

from mintrl.env.shell.environment import timeout_note
from mintrl.env.shell.session import ShellLimits, ShellSession

PREFIX = "MINTRLSECRET"  # the agent's commands name only this; the secret is PREFIX + 16 random hex digits
# every readable mapping of every process in /proc (memory, environment, command line), searched for
# PREFIX followed by 16 hex digits; says whether PID 1's (the shell's) memory could be read at all
SCAN = r"""
import os, re
pattern = re.compile(rb"MINTRLSECRET[0-9a-f]{16}")
found, shell_bytes = set(), 0
for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                found |= {(pid, name, m) for m in pattern.findall(f.read())}
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = [line.split() for line in f]
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
    except OSError:
        continue
    with mem:
        for fields in maps:
            if fields[1][0] != "r":
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(low)
                data = mem.read(high - low)
            except (OSError, ValueError, OverflowError):
                continue
            found |= {(pid, "mem", m) for m in pattern.findall(data)}
            shell_bytes += len(data) if pid == "1" else 0
print("shell memory read:", shell_bytes > 100000)
print("found:", sorted(found))
"""
LOOK = f"cat ~/data/f; ls -a ~; echo \"var=${PREFIX}\"; env | grep -c {PREFIX}; python3 - <<'EOF'\n{SCAN}EOF"
SEEN = "visible\n.\n..\ndata\nvar=\n0\nshell memory read: True\nfound: []"


def test_the_agent_cannot_read_the_init_script_its_variables_or_what_it_deleted():
    secret = PREFIX + secrets.token_hex(8)
    init = (  # a program left running (started before the export: it would inherit the variable)
        f"sleep 60 >/dev/null 2>&1 & {PREFIX}={secret}; export {PREFIX}; echo ${PREFIX} > ~/.secret; "
        "rm ~/.secret; mkdir -p ~/data && echo visible > ~/data/f"
    )
    env = make(max_output_chars=2000, max_action_chars=4000)
    try:
        env.reset([item(task("q", init, "x"))])
        first = env.step([0], [bash(LOOK)]).observations[0]
        stopped = env.step([0], [bash("sleep 30")]).observations[0]  # the shell is killed and rebuilt by replay
        rebuilt = env.step([0], [bash(LOOK)]).observations[0]
        restarts = env.metrics()["env/restarts"]
    finally:
        env.close()
    assert (first, stopped, rebuilt, restarts) == (out(SEEN), out("(no output)", timeout_note(1.0)), out(SEEN), 1.0)
    assert secret not in first + rebuilt
    assert sandbox_processes() == []


def test_a_long_init_runs_whole_in_its_own_process_and_leaves_no_shell_state():
    # ~108 KB of script (more than a pipe's 64 KiB buffer): files d/0..d/9 hold the last i written to each
    lines = "".join(f"echo {i} > d/{i % 10}\n" for i in range(8000))
    init = f"cd ~ && mkdir d\n{lines}cd d; X=5; export Y=6; echo made; exit 3"
    with ShellSession(UID_BASE, ShellLimits(), 65536, init=init, init_timeout_s=10.0) as session:
        made = session.init_result
        # ls writes to a file, not a pipe: bash holds a pipeline's pipe ends (fds 3, 4) until it has forked both sides
        after = session.run('cat d/9 d/0; pwd; echo "x$X y$Y"; ls /proc/1/fd > fds; tr "\\n" " " < fds', 5.0)
    assert len(init.encode()) > 100_000
    assert (made.output, made.exit_code) == ("made\n", 3)  # the init's own output and exit status
    # its files stay; its working folder and variables do not; the shell no longer holds the init pipe (fd 4)
    assert (after.output, after.exit_code) == ("7999\n7990\n/tmp/work\nx y\n0 1 10 11 2 ", 0)


def test_an_init_with_a_nul_character_is_refused():
    with pytest.raises(ValueError, match="NUL"):
        ShellSession(UID_BASE, ShellLimits(), 100, init="echo a\0b")
