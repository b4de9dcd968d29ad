"""A program with tests runs as two sandboxes: the candidate's and the checks'.

The candidate's process (``candidate.py``) runs the untrusted solution and answers calls to its
functions with plain values; the checks' process (``checks.py``) runs the problem's trusted tests,
whose calls to the candidate come here as requests. :func:`run_checked` relays each request to the
candidate and its answer back, one line each way, and reads the verdict (``passed``, ``total``) from
the checks' process alone. Each process is its own sandbox (``launcher.py``: its own PID, mount,
network and IPC namespaces), so the candidate's code can neither see the tests and their expected
values nor reach the process, the memory or the channel that states the verdict: whatever it
prints, returns, raises or does to its own process only decides the values the tests compare.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from mintrl.sandbox.launch import head, kill_group, launcher_config, start_launcher
from mintrl.sandbox.program import Outcome, Program, ProgramResult

_HERE = Path(__file__).resolve().parent
CANDIDATE = [str(_HERE / "codec.py"), str(_HERE / "candidate.py")]  # the candidate's process
CHECKS = [str(_HERE / "codec.py"), str(_HERE / "checks.py")]  # the tests' process
MAX_MESSAGE_BYTES = 8 << 20  # one protocol line between the two processes (bytes)


class _Sandboxed:
    """One launcher run in harness mode whose stdin and stdout are this process's pipes."""

    def __init__(self, tmp: str, name: str, uid: int, limits: dict, tmp_bytes: int, python: str, harness: list):
        run_dir = os.path.join(tmp, name)
        os.mkdir(run_dir, 0o700)
        os.mkdir(os.path.join(run_dir, "work"), 0o700)  # used only where no private /tmp can be mounted
        self.cfg = launcher_config(run_dir, uid, limits, tmp_bytes, harness=harness, python=python)
        self.err = open(os.path.join(run_dir, "stderr"), "w+b")
        self.proc = start_launcher(self.cfg, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.pending = b""
        self.ended = False  # its output ended before this side finished it
        self.status: dict | None = None

    def send(self, line: bytes) -> bool:
        """Write one line (ending in a newline); False when the process no longer reads."""
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, ValueError, OSError):
            return False

    def receive(self, deadline: float) -> bytes | None:
        """The next line (without its newline), or None at the deadline (``time.monotonic()``
        seconds), at the end of its output (:attr:`ended`) or past :data:`MAX_MESSAGE_BYTES`."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            if len(self.pending) > MAX_MESSAGE_BYTES:
                return None
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.ended = True
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def finish(self) -> dict:
        """End the run (SIGTERM: the launcher kills the sandbox and reports) and return its status
        (``launcher.py``'s report; ``{}`` when it left none)."""
        if self.status is not None:
            return self.status
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.proc.poll() is None and not self.ended:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
        try:
            with open(self.cfg["status_path"]) as f:
                self.status = json.load(f)
        except (OSError, ValueError):
            self.status = {}
        return self.status

    def stderr(self, n: int) -> str:
        """The first ``n`` bytes of its stderr, decoded."""
        return head(self.err, n)

    def close(self) -> None:
        self.finish()
        self.err.close()


def _ended_outcome(status: dict, cpu_limit: float) -> Outcome | None:
    """How a process that ended by itself ended, when that decides the run: TIMEOUT (wall clock or
    CPU limit), CRASHED (a signal, or exit code 2: a resource limit; 125: the launcher failed), or
    None (it exited with 0 or 1)."""
    if not status:
        return Outcome.CRASHED
    code = status["status"]
    signalled = os.WTERMSIG(code) if os.WIFSIGNALED(code) else None
    if (
        status["timed_out"]
        or signalled == signal.SIGXCPU
        or (signalled == signal.SIGKILL and status["cpu_s"] >= cpu_limit)
    ):
        return Outcome.TIMEOUT
    if signalled is not None or os.WEXITSTATUS(code) in (2, 125):
        return Outcome.CRASHED
    return None


def run_checked(
    program: Program,
    uids: tuple[int, int],
    limits: dict,
    tmp_bytes: int,
    python: str,
    timeout_s: float,
    max_output_bytes: int,
    tmp_dir: str | None = None,
) -> tuple[ProgramResult, dict]:
    """Run ``program`` (which has tests) as the candidate's and the checks' sandboxes (see the
    module docstring), the candidate as ``uids[0]`` and the tests as ``uids[1]`` (as root: two users,
    so that neither can open the other's ``/proc`` files or signal it even without a PID namespace),
    both with ``limits`` (``launcher_config``'s), within ``timeout_s``
    seconds of wall clock for the whole run.

    Returns:
        The :class:`ProgramResult` (``stdout`` empty: the candidate's prints are in ``stderr``,
        followed by the checks' stderr) and the candidate sandbox's isolation report.
        PASSED / FAILED come only from the checks' own count (PASSED: every assert that ran passed,
        and at least one ran; tests whose asserts all loop over an empty answer did not pass); TIMEOUT when the run passed
        ``timeout_s`` or the candidate hit its CPU limit; CRASHED when either process hit a resource
        limit or a signal, or a sandbox could not start.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    cpu_limit = limits["cpu_s"]
    with tempfile.TemporaryDirectory(prefix="mintrl-sandbox-", dir=tmp_dir) as tmp:
        candidate = _Sandboxed(tmp, "candidate", uids[0], limits, tmp_bytes, python, CANDIDATE)
        checks = None
        try:
            candidate.send((json.dumps({"solution": program.solution}) + "\n").encode())
            ready = _message(candidate.receive(deadline))
            counts, trivial, gone = None, 0, False
            if ready is not None and isinstance(ready.get("ready"), list):
                checks = _Sandboxed(tmp, "checks", uids[1], limits, tmp_bytes, python, CHECKS)
                names = [n for n in ready["ready"] if isinstance(n, str)]
                job = {"tests": program.tests, "context": program.context, "entry_point": program.entry_point}
                checks.send((json.dumps({**job, "names": names}) + "\n").encode())
                while True:
                    request = _message(checks.receive(deadline))
                    if request is None or "call" not in request:
                        done = request.get("done") if request else None
                        if isinstance(done, list) and len(done) == 2 and all(type(x) is int for x in done):
                            counts = done
                            count = request.get("trivial", 0)
                            trivial = count if type(count) is int and 0 <= count <= min(done) else 0
                        break
                    answer = candidate.receive(deadline) if candidate.send(_line(request)) else None
                    if answer is None:
                        if time.monotonic() >= deadline:
                            break
                        gone = True  # the candidate's process ended, or answered past the size limit
                        answer = b'{"gone":true}'
                    checks.send(answer + b"\n")
            timed_out = time.monotonic() >= deadline
            candidate_status = candidate.finish()
            checks_status = checks.finish() if checks is not None else {}
            stderr = candidate.stderr(max_output_bytes)
            if checks is not None:
                stderr += checks.stderr(max_output_bytes)
            wall = time.monotonic() - start
            outcome = None
            if timed_out:
                outcome = Outcome.TIMEOUT
            elif checks is None or gone or candidate.ended:  # the candidate's end decides when it ended early
                outcome = _ended_outcome(candidate_status, cpu_limit)
                if outcome is None and checks is None:
                    outcome = Outcome.FAILED  # the solution raised before it was ready
            if outcome is None and counts is None:
                outcome = _ended_outcome(checks_status, cpu_limit) or Outcome.FAILED
            if outcome is not None:
                return ProgramResult(outcome, stderr=stderr, wall_s=wall), candidate_status.get("isolation", {})
            passed, total = counts
            outcome = Outcome.PASSED if 0 < passed == total else Outcome.FAILED  # no assert ran: nothing passed
            result = ProgramResult(outcome, passed, total, "", stderr, wall, trivial=trivial)
            return result, candidate_status.get("isolation", {})
        finally:
            candidate.close()
            if checks is not None:
                checks.close()


def _message(line: bytes | None) -> dict | None:
    """A trusted process's protocol line as a dict, or None."""
    if line is None:
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def _line(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()
