"""A command's end cannot be impersonated by a program exec'd in place of the shell: the full attack
(learn where bash waits for a command from /proc/1/syscall, forge the status line, exec a program
that maps code and stack at bash's calibrated instruction and stack pointers and blocks there in
read(2) of the command pipe) still runs into the time limit, because the end check is bound to the
calibrated bash (its executable and its per-exec randomised code and stack addresses); and a new
exec of bash itself gets other addresses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest
from shell_helpers import UID_BASE

from mintrl.env.shell.session import ShellLimits, ShellSession, _syscall, exec_randomised, process_identity

# The impersonator (x86_64): argv[1] is /proc/1/syscall as bash showed it while waiting for a command
# ("0 <fd> <buf> <count> ... <sp> <ip>"). It maps a stack page at bash's stack pointer and a code page
# whose `syscall` instruction ends at bash's instruction pointer (MAP_FIXED_NOREPLACE), then loops on
# read(fd, buf, count) from there: /proc/<pid>/syscall then shows exactly bash's top-level wait.
IMPERSONATE = r"""
import ctypes, struct, sys
fields = sys.argv[1].split()
fd, count, sp, ip = int(fields[1], 16), int(fields[3], 16), int(fields[7], 16), int(fields[8], 16)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
PAGE = 4096
def fixed(start, size, prot):
    if libc.mmap(start, size, prot, 0x02 | 0x20 | 0x100000, -1, 0) != start:
        sys.exit(f"no mapping at {start:#x}: errno {ctypes.get_errno()}")
stack = (sp & ~(PAGE - 1)) - PAGE
fixed(stack, 3 * PAGE, 3)
read = b"\x31\xc0\xbf" + struct.pack("<I", fd) + b"\x48\xbe" + struct.pack("<Q", stack)
read += b"\xba" + struct.pack("<I", count) + b"\x0f\x05"
code = b"\x48\xbc" + struct.pack("<Q", sp) + read + b"\xeb" + struct.pack("<b", -len(read) - 2)
entry = ip - len(code) + 2
fixed(entry & ~(PAGE - 1), 2 * PAGE, 7)
ctypes.memmove(entry, code, len(code))
ctypes.CFUNCTYPE(None)(entry)()
"""


def _next_status(session: ShellSession) -> int:
    """The number the wrapper gives the third command after this call's two (spied with a DEBUG trap)."""
    spy = session.run("trap 'echo \"$BASH_COMMAND\"' DEBUG", 5.0).output
    session.run("trap - DEBUG", 5.0)
    return int(re.search(r"printf '(\d+):%d", spy).group(1)) + 4


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the impersonator is x86_64 machine code")
def test_a_program_execd_in_place_of_bash_cannot_impersonate_its_wait():
    with ShellSession(UID_BASE, ShellLimits(), 65536) as session:
        assert (session.end_check, session.identity_check) == ("prompt", "randomised")
        number = _next_status(session)
        setup = f"cat > /tmp/i.py <<'EOF'\n{IMPERSONATE}EOF\n(sleep 0.3; cat /proc/1/syscall > /tmp/wait) &"
        session.run(setup, 5.0)
        time.sleep(0.6)  # bash waits for the next command meanwhile; the background job reads where
        wait = session.run("cat /tmp/wait", 5.0).output.split()
        pid, seen = session._bash_pid(), []
        looker = threading.Timer(1.0, lambda: seen.append((os.readlink(f"/proc/{pid}/exe"), _syscall(pid))))
        looker.start()
        # the status line forged through bash's saved copy of the status channel (fd 11), then the
        # impersonator exec'd in bash's place with the command pipe (bash's saved copy, fd 10) as stdin
        attack = f"printf '{number}:0\\n' >&11; exec python3 /tmp/i.py \"$(cat /tmp/wait)\" <&10"
        result = session.run(attack, 2.0)
        looker.join()
    sp, ip = int(wait[7], 16), int(wait[8], 16)
    # the impersonator sat in read(2) of the command pipe at bash's calibrated stack and instruction pointers
    assert seen[0][0].startswith("/usr/bin/python3") and (seen[0][1][0], seen[0][1][1], seen[0][1][3]) == (0, 0, 1)
    assert seen[0][1][7:9] == (sp, ip) and (0, 0, 1, sp, ip) == session._prompt
    assert (result.exit_code, result.timed_out, result.seconds >= 2.0) == (None, True, True), result


def _maps(pid: int) -> list[tuple[int, int, str, str]]:
    """``(low, high, permissions, path)`` of each mapping of the process."""
    rows = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            low, high = (int(x, 16) for x in fields[0].split("-"))
            rows.append((low, high, fields[1], fields[5].strip() if len(fields) > 5 else ""))
    return rows


def _wait_for(check, timeout_s: float = 5.0):
    """Poll ``check()`` until it gives something true (returned) or the time is up (AssertionError)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError("timed out waiting")


def _blocked_in_read(pid: int) -> bool:
    state = _syscall(pid)
    return state is not None and state[0] == 0


@pytest.mark.skipif(not exec_randomised(os.getpid()), reason="this machine does not randomise addresses per exec")
def test_a_new_exec_of_bash_has_another_identity():
    script = "read x; exec /bin/bash --noprofile --norc -c 'read y'"
    proc = subprocess.Popen(["/bin/bash", "--noprofile", "--norc", "-c", script], stdin=subprocess.PIPE)
    try:
        _wait_for(lambda: _blocked_in_read(proc.pid))
        before, maps = process_identity(proc.pid), _maps(proc.pid)
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        _wait_for(lambda: process_identity(proc.pid) not in (before, None) and _blocked_in_read(proc.pid))
        after = process_identity(proc.pid)  # the new bash, waiting in its own read
    finally:
        proc.stdin.close()
        proc.wait(timeout=5)
    exe = os.path.realpath("/bin/bash")
    assert before[:3] == after[:3] == (exe, os.stat(exe).st_dev, os.stat(exe).st_ino)  # the same executable
    # start_code..end_code is bash's executable mapping, start_stack lies in its [stack]
    code = [(low, high) for low, high, perms, path in maps if path == exe and "x" in perms]
    stack = [(low, high) for low, high, _, path in maps if path == "[stack]"]
    assert code[0][0] == before[3] and before[3] < before[4] <= code[0][1] and stack[0][0] < before[5] < stack[0][1]
    # a new exec: the same code size, other (random) addresses
    assert after[4] - after[3] == before[4] - before[3] and after[3] != before[3] and after[5] != before[5]


def test_a_shell_without_aslr_says_its_identity_check_is_fixed():
    program = (
        "from mintrl.env.shell.session import ShellLimits, ShellSession\n"
        f"with ShellSession({UID_BASE}, ShellLimits(), 100) as s:\n"
        "    print(s.end_check, s.identity_check, s.run('echo hi', 5.0).output.strip())\n"
    )
    command = ["setarch", os.uname().machine, "--addr-no-randomize", sys.executable, "-c", program]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (done.stdout, done.returncode) == ("prompt fixed hi\n", 0), done.stderr
