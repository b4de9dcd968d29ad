"""Run untrusted programs against their tests in isolated, resource-limited processes.

Threat model (the policy that wrote the program is an adversary of its reward). A program's code can
do anything inside its own process and sandbox: print anything (to any of its file descriptors, the
channel to this process included), exit or raise at any moment (``SystemExit``, ``KeyboardInterrupt``,
``os._exit``), return any object, walk its own frames and memory (``sys._getframe``, ``gc``), patch
its own builtins and modules, define any names, read the files the sandbox shows, start processes
and use all its CPU time, within the limits. It cannot: see the tests or their expected values
(with tests, :func:`~mintrl.sandbox.relay.run_checked` runs them in a second sandbox, and only
call arguments cross to the candidate); reach that process (its own PID, mount and IPC namespaces);
state the verdict (the pass count is the tests' process's own, read from its channel alone; the
candidate's answers cross as plain values decoded there: no ``__eq__`` of its own, no ``str``
subclass); replace what the tests call (a name that is a builtin or the problem's own helper never
becomes the candidate's); end the tests' loops early (its ``StopIteration`` arrives as an error);
make "no assert ran" count as a pass; or outlive its run (PID namespace, wall-clock kill of the tree).
A run that passes its time limit is a TIMEOUT whatever was counted so far. A program without tests
(``harness.py``, one process) gets no verdict at all: PASSED there only means it ran to the end.
Where the OS refuses a namespace (:meth:`Sandbox.isolation`) these guarantees weaken as listed below;
the verdict's weakest case is a machine with neither a PID namespace nor root: the candidate and the
tests' process then run as one user who sees the other, and a candidate fast enough to open the tests'
pipes through ``/proc`` before they make themselves undumpable could forge the verdict (logged as a
warning at the self-check). As root the two run as different users and cannot reach each other.

Each program runs in its own process tree (``launcher.py`` -> ``harness.py``): new network, PID,
mount and IPC namespaces where the OS allows them, an unprivileged user per worker slot (when this
process is root), resource limits, a scrubbed environment, a private size-capped ``/tmp`` holding a
fresh working directory, and a wall-clock limit after which the whole process tree is killed. A
bounded thread pool runs up to ``workers`` programs at once.

What happens where the OS refuses an isolation is reported by :meth:`Sandbox.isolation` (and
logged once): without a network namespace the program can open connections; without a PID
namespace a program that leaves its process group can outlive the wall-clock limit; without a
mount namespace there is no private ``/tmp`` or read-only filesystem, and the working directory is
a fresh folder in the system temporary directory. Without root the program runs as the calling user
(inside a user namespace when the kernel allows one, with the caller's home directory hidden).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from mintrl.core.checks import check_range
from mintrl.sandbox.launch import SAFE_ENV, head, kill_group, launcher_config, start_launcher
from mintrl.sandbox.program import Outcome, Program, ProgramResult
from mintrl.sandbox.relay import run_checked

__all__ = ["Outcome", "Program", "ProgramResult", "Sandbox", "launcher_config", "start_launcher"]

log = logging.getLogger(__name__)

HARNESS = str(Path(__file__).resolve().parent / "harness.py")  # a program without tests, in one process


class Sandbox:
    """Bounded, isolated runner of untrusted Python programs.

    Args:
        workers: programs run at once (default: the CPU count); each slot has its own sandbox uids,
            so the process limit of one program does not starve another.
        timeout_s: wall-clock limit per program (seconds).
        cpu_s: CPU-time limit per process (seconds; SIGXCPU, then SIGKILL one second later).
        cpu_cores: CPU share of each sandbox (cores: CPU time per wall-clock second, over all of
            its processes, whatever session they move to; a cpu cgroup, root only). Without a cpu
            cgroup (not root, no cpu controller) the bound is ``cpu_s`` per process and the wall clock.
        memory_mb: address-space limit per process (MiB).
        file_size_mb: largest file a program may write, stdout and stderr included (MiB).
        processes: process/thread limit per sandbox uid (counts all of that slot's processes).
        open_files: file-descriptor limit per process.
        tmp_mb: size of the private ``/tmp`` (and ``/var/tmp``, ``/dev/shm``) tmpfs (MiB).
        max_output_bytes: bytes of stdout/stderr read back per program (bytes).
        uid_base: first sandbox uid (used only as root): slot ``k`` of local data-parallel rank ``r``
            (``LOCAL_RANK``) runs its program (the candidate) as ``u = uid_base + 2 * (r * workers +
            k)`` and its tests' process as ``u + 1``, so that the candidate cannot reach the tests'
            process through ``/proc`` or signals even where no PID namespace hides it.
        python: interpreter that runs the harness; it must be executable by the sandbox uid. Default:
            the first of this interpreter, its real path, its base interpreter and ``python3`` on
            the system ``PATH`` that passes the self-check (only the standard library is needed).
        require_network_isolation: raise at the first run when no network namespace can be made,
            instead of logging a warning and running anyway.
        tmp_dir: where the per-program folders (status, stdout, stderr; removed after each run)
            are made (default: the system temporary directory).

    Raises:
        ValueError: a non-positive limit (field named).
        RuntimeError: (first run) the self-check program did not pass, i.e. the sandbox cannot run
            programs here (message says why), or network isolation was required but unavailable.
    """

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: float = 10.0,
        cpu_s: int = 10,
        cpu_cores: float = 1.0,
        memory_mb: int = 1024,
        file_size_mb: int = 16,
        processes: int = 32,
        open_files: int = 64,
        tmp_mb: int = 64,
        max_output_bytes: int = 65536,
        uid_base: int = 61000,
        python: str | None = None,
        require_network_isolation: bool = False,
        tmp_dir: str | None = None,
    ):
        workers = workers or os.cpu_count() or 1
        for name, value in (
            ("workers", workers),
            ("timeout_s", timeout_s),
            ("cpu_s", cpu_s),
            ("cpu_cores", cpu_cores),
            ("memory_mb", memory_mb),
            ("file_size_mb", file_size_mb),
            ("processes", processes),
            ("open_files", open_files),
            ("tmp_mb", tmp_mb),
            ("max_output_bytes", max_output_bytes),
        ):
            check_range(f"sandbox.{name}", value, 0, low_open=True)
        self.workers, self.timeout_s, self.max_output_bytes = int(workers), float(timeout_s), int(max_output_bytes)
        self.limits = {
            "wall_s": float(timeout_s),
            "cpu_s": int(cpu_s),
            "cpu_cores": float(cpu_cores),
            "address_space_bytes": int(memory_mb) << 20,
            "file_size_bytes": int(file_size_mb) << 20,
            "processes": int(processes),
            "open_files": int(open_files),
        }
        self.tmp_bytes, self.uid_base = int(tmp_mb) << 20, int(uid_base)
        # the first interpreter the sandbox uid can run (a venv under /root is not readable by it)
        self._pythons = (
            [python]
            if python
            else list(
                dict.fromkeys(
                    p
                    for p in (
                        sys.executable,
                        os.path.realpath(sys.executable),
                        getattr(sys, "_base_executable", None),
                        shutil.which("python3", path=SAFE_ENV["PATH"]),
                    )
                    if p
                )
            )
        )
        self.python = self._pythons[0]
        self.require_network_isolation, self.tmp_dir = require_network_isolation, tmp_dir
        self._slots: queue.Queue[int] = queue.Queue()
        for k in range(self.workers):
            self._slots.put(k)
        self._isolation: dict | None = None

    # ------------------------------------------------------------------ public
    def run(self, programs: Sequence[Program]) -> list[ProgramResult]:
        """Run ``programs`` (in parallel, up to ``workers`` at once); results in input order."""
        self._self_check()
        if not programs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.workers, len(programs))) as pool:
            return list(pool.map(self._run_in_slot, programs))

    def isolation(self) -> dict:
        """Which isolations this machine granted, from the self-check run (bools): ``network``,
        ``pid``, ``mount`` namespaces, ``read_only`` (every mount but the private tmpfs remounted
        read-only), ``separate_user`` (root: programs run as per-slot uids), ``user_namespace``
        (not root: the namespaces were made inside a user namespace)."""
        self._self_check()
        return dict(self._isolation)

    # ----------------------------------------------------------------- private
    def _self_check(self) -> None:
        if self._isolation is not None:
            return
        # data-parallel ranks on one machine get disjoint slot uids (their process limits are per uid)
        self._first_uid = self.uid_base + 2 * int(os.environ.get("LOCAL_RANK", 0)) * self.workers
        probe = Program("def f():\n    return 1\n", "assert f() == 1\n")
        errors = []
        for python in self._pythons:
            self.python = python
            result, isolation = self._run_one(probe, slot=0)
            if result.outcome is Outcome.PASSED:
                break
            errors.append(f"{python}: {result.outcome.value}: {result.stderr.strip()[-300:]!r}")
        else:
            raise RuntimeError(
                f"code sandbox self-check failed for every interpreter tried (they must be executable by "
                f"uid {self._first_uid}; set sandbox.python): " + "; ".join(errors)
            )
        log.info("code sandbox: interpreter %s, isolation %s", self.python, isolation)
        missing = [k for k in ("network", "pid", "mount", "read_only") if not isolation.get(k)]
        if missing:
            if self.require_network_isolation and not isolation.get("network"):
                raise RuntimeError("sandbox.require_network_isolation=true but this OS refused a network namespace")
            log.warning("code sandbox: no %s isolation on this machine (see mintrl.sandbox docs)", ", ".join(missing))
        if not isolation.get("pid") and not isolation.get("separate_user"):
            log.warning(
                "code sandbox: no PID namespace and not root: a program's process and its tests' process run as "
                "one user who can see the other; a hostile program could forge the code verdict here"
            )
        self._isolation = isolation

    def _run_in_slot(self, program: Program) -> ProgramResult:
        slot = self._slots.get()
        try:
            return self._run_one(program, slot)[0]
        except OSError as exc:  # e.g. a full disk or no free process: the program did not run
            log.warning("code sandbox could not run a program: %s", exc)
            return ProgramResult(Outcome.CRASHED, sandbox_error=f"{type(exc).__name__}: {exc}")
        finally:
            self._slots.put(slot)

    def _run_one(self, program: Program, slot: int) -> tuple[ProgramResult, dict]:
        if program.has_checks:
            uid = self._first_uid + 2 * slot
            return run_checked(program, (uid, uid + 1), self.limits, self.tmp_bytes, self.python,
                               self.timeout_s, self.max_output_bytes, self.tmp_dir)  # fmt: skip
        return self._run_whole(program, slot)

    def _run_whole(self, program: Program, slot: int) -> tuple[ProgramResult, dict]:
        """A program without tests, in one process (``harness.py``): PASSED means it ran to the end
        (``passed`` and ``total`` stay 0). The end line is written by code the program could reach,
        so no verdict may rest on it."""
        if program.has_checks:
            raise ValueError("a program with tests runs in two sandboxes (run_checked), never in one")
        nonce = secrets.token_hex(16)
        tmp = tempfile.mkdtemp(prefix="mintrl-sandbox-", dir=self.tmp_dir)
        try:
            work = os.path.join(tmp, "work")  # used only where no private /tmp can be mounted
            os.mkdir(work, 0o700)
            cfg = launcher_config(
                tmp, self._first_uid + 2 * slot, self.limits, self.tmp_bytes, harness=HARNESS, python=self.python
            )
            job = json.dumps({**dataclasses.asdict(program), "nonce": nonce}).encode()
            with open(os.path.join(tmp, "stdout"), "w+b") as out, open(os.path.join(tmp, "stderr"), "w+b") as err:
                proc = start_launcher(cfg, stdin=subprocess.PIPE, stdout=out, stderr=err)
                try:
                    proc.communicate(job, timeout=self.timeout_s + 10.0)
                except subprocess.TimeoutExpired:  # the launcher's own timer failed: kill its whole group
                    kill_group(proc)
                except BaseException:
                    kill_group(proc)
                    raise
                stdout, stderr = head(out, self.max_output_bytes), head(err, self.max_output_bytes)
            try:
                with open(cfg["status_path"]) as f:
                    status = json.load(f)
            except (OSError, ValueError):
                error = f"the launcher left no status (exit {proc.returncode})"
                return ProgramResult(Outcome.CRASHED, stderr=stderr, sandbox_error=error), {}
            return _result(status, stdout, stderr, nonce, self.limits["cpu_s"]), status["isolation"]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _result(status: dict, stdout: str, stderr: str, nonce: str, cpu_limit: float) -> ProgramResult:
    """Outcome of a program without tests from the launcher's wait status and the harness's end
    line (PASSED: exit 0 and the line; it counts nothing)."""
    wall, code, cpu = status["wall_s"], status["status"], status["cpu_s"]
    lines = stdout.rstrip("\n").split("\n")
    ended = lines[-1] == nonce
    if ended:
        stdout = "\n".join(lines[:-1]).rstrip("\n")
    signalled = os.WTERMSIG(code) if os.WIFSIGNALED(code) else None
    if status["timed_out"] or signalled == signal.SIGXCPU or (signalled == signal.SIGKILL and cpu >= cpu_limit):
        return ProgramResult(Outcome.TIMEOUT, stdout=stdout, stderr=stderr, wall_s=wall)
    if os.WIFSIGNALED(code):
        return ProgramResult(Outcome.CRASHED, stdout=stdout, stderr=stderr, wall_s=wall)
    exit_code = os.WEXITSTATUS(code)
    if exit_code == 0 and ended:
        return ProgramResult(Outcome.PASSED, 0, 0, stdout, stderr, wall)
    outcome = Outcome.CRASHED if exit_code in (2, 125) else Outcome.FAILED  # 2: resource limit, 125: launcher
    return ProgramResult(outcome, stdout=stdout, stderr=stderr, wall_s=wall)
