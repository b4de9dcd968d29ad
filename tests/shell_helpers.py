"""Shared by the env=shell and sandbox tests: a small environment with test uids, hand-made tasks, a
scan of /proc for processes left behind by a sandbox uid, and a program that tries to open a new
user namespace through every syscall convention."""

from __future__ import annotations

import os

from mintrl.data.base import PromptItem
from mintrl.env.shell.environment import ShellEnvironment
from mintrl.env.shell.protocol import OUTPUT_HINT
from mintrl.env.shell.tasks import reference_action

UID_BASE = 65000  # not the default: a training run elsewhere on this machine uses 64000+
SLOTS = 4
JUDGE_UID, LOADER_UID = 65100, 65200
TEST_UIDS = (*range(UID_BASE, UID_BASE + SLOTS), JUDGE_UID, LOADER_UID)
# writable-root sandboxes: each a range of 65536 host uids (and gids) from its base; no other test's uids
WRITABLE_ROOT_BASES = tuple(3_000_000_000 + k * 65536 for k in range(4))
WRITABLE_ROOT_UIDS = range(WRITABLE_ROOT_BASES[0], WRITABLE_ROOT_BASES[-1] + 65536)
# the state-check tests' writable roots (tests/unit/test_state_checks.py): ranges 8..11 from the same start
STATE_CHECK_BASES = tuple(3_000_000_000 + k * 65536 for k in range(8, 12))
WRITABLE_ROOT_UIDS = range(WRITABLE_ROOT_BASES[0], STATE_CHECK_BASES[-1] + 65536)  # every range above


def task(question: str, init: str, label: str, check: str = "exact", reference: str = "") -> dict:
    entry = {"question": question, "init": init, "reference": reference, "label": label, "check": check}
    entry |= {"kind": "hand", "source": "test", "index": 0}
    entry["reference_action"] = reference_action(entry)
    return entry


# ~/data/a.txt ("one\ntwo\n"), ~/data/b.log ("x\n"), ~/data/sub/c.txt ("deep\n")
FILES = task(
    "How many .txt files are under ~/data?",
    "mkdir -p ~/data/sub && printf 'one\\ntwo\\n' > ~/data/a.txt && echo x > ~/data/b.log && echo deep > ~/data/sub/c.txt",
    "2",
    "integer",
    "find ~/data -name '*.txt' | wc -l",
)


def item(entry: dict, index: int = 0) -> PromptItem:
    return PromptItem(index, entry.get("question", ""), entry.get("reference_action", ""), [1], entry, "shell")


def make(tmp_dir: str | None = None, **kwargs) -> ShellEnvironment:
    """A small shell environment for tests (tight limits, the test uids)."""
    limits = dict(command_timeout_s=1.0, episode_timeout_s=20.0, max_shells=SLOTS, uid_base=UID_BASE)
    limits |= dict(memory_mb=256, processes=16, file_size_mb=2, tmp_mb=16, cpu_s=10, tmp_dir=tmp_dir)
    return ShellEnvironment(**{**limits, **kwargs})


def out(text: str, note: str = "", exit_code: int = 0) -> str:
    """The observation of a command's output (as :func:`output_observation` writes it)."""
    parts = [f"Output:\n{text}"]
    if exit_code:
        parts.append(f"(exit code {exit_code})")
    if note:
        parts.append(note)
    return "\n".join([*parts, OUTPUT_HINT])


def bash(command: str) -> str:
    return f"```bash\n{command}\n```"


def sandbox_processes(uids=TEST_UIDS) -> list[int]:
    """PIDs of live processes owned by one of ``uids`` (there must be none after a close)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if uid in uids:
                pids.append(int(entry))
    return pids


# a new user namespace through each syscall ABI: the x86_64 libc call, x32 and i386 (int 0x80, as
# machine code); prints "<call> <result> <whether this process's user namespace changed>"
USERNS_ATTEMPTS = r"""
import ctypes, mmap, os, platform
libc = ctypes.CDLL(None, use_errno=True)
before = os.readlink("/proc/self/ns/user")
print("unshare", libc.unshare(0x10000000), os.readlink("/proc/self/ns/user") != before)
if platform.machine() == "x86_64":
    print("x32", libc.syscall(0x40000000 | 272, 0x10000000), os.readlink("/proc/self/ns/user") != before)
    code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(bytes.fromhex("b836010000" "bb00000010" "cd80" "c3"))  # eax=310 (unshare), ebx=flags, int 0x80
    call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(code)))
    print("int80", call(), os.readlink("/proc/self/ns/user") != before)
"""
