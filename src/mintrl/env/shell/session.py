"""One long-lived ``bash`` inside the project's sandbox, driven command by command.

:class:`ShellSession` starts ``launcher.py`` in program mode (:mod:`mintrl.reward.sandbox.launcher`:
new network, PID, mount and IPC namespaces, every mount read-only but private size-capped tmpfs
folders, resource limits, a per-slot unprivileged uid when root, parent-death SIGKILL, a wall-clock
kill of the whole sandbox) with ``bash --noprofile --norc`` (non-interactive: no job control, no
history) as PID 1 of the sandbox's PID namespace, reading commands on a pipe; stdout and stderr come
back merged on one pipe.

Each :meth:`ShellSession.run` writes one line to bash::

    __mintrl_c=$'<command, ANSI-C quoted>'; eval "$__mintrl_c" </dev/null; printf '\\n<marker>:%d\\n' "$?"

so that an unfinished quote or heredoc in the command is a syntax error of ``eval`` (it cannot
swallow the marker), a command reading stdin reads nothing, and the exit status follows the
output. ``<marker>`` holds a random per-session nonce and the command's number. The output up to
the marker is read with a wall-clock limit; its first ``max_output_bytes`` bytes are kept and the
rest is read and dropped (an endless printer runs into the time limit). A command that does not
come back in time, or a shell that ends (``exit``, a crash, a resource limit, the session's own
wall-clock limit), leaves the session dead (:attr:`ShellSession.alive` False): the caller decides
what follows (:mod:`mintrl.env.shell.environment` restarts it by replaying).

:meth:`close` sends SIGTERM to the launcher, which SIGKILLs PID 1 of the sandbox and reaps it
(the kernel kills every other process of the PID namespace first, a ``setsid``/``nohup`` daemon
included), then SIGKILLs the launcher's process group if it has not ended within a few seconds.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from mintrl.core.checks import check_range
from mintrl.reward.sandbox.launch import launcher_config, start_launcher

BASH = ("/bin/bash", "--noprofile", "--norc")
_READ_CHUNK = 1 << 20  # bytes per read
_CLOSE_WAIT_S = 5.0  # seconds the launcher gets to reap the sandbox after SIGTERM


@dataclass(frozen=True)
class ShellLimits:
    """The sandbox limits of one shell session (checked on construction; ``field`` names them).

    Attributes:
        wall_s: wall-clock life of the whole session, after which the sandbox is killed (seconds).
        cpu_s: CPU time of each process, the shell included (seconds; SIGXCPU, SIGKILL 1 s later).
        memory_mb: address space of each process (MiB).
        processes: processes/threads of the sandbox uid at once (a fork loop stops here).
        file_size_mb: largest file a process may write (MiB).
        open_files: file descriptors per process.
        tmp_mb: size of each private tmpfs (``/tmp`` with the home folder, ``/var/tmp``,
            ``/dev/shm``, ``tmpfs_dirs``) (MiB).
        tmpfs_dirs: more folders hidden under a private writable tmpfs (absolute paths).
        field: config prefix in error messages.

    Raises:
        ValueError: a non-positive limit (field named).
    """

    wall_s: float = 60.0
    cpu_s: int = 60
    memory_mb: int = 512
    processes: int = 32
    file_size_mb: int = 8
    open_files: int = 64
    tmp_mb: int = 32
    tmpfs_dirs: tuple[str, ...] = ("/root", "/home")
    field: str = "env"

    def __post_init__(self):
        for name in ("wall_s", "cpu_s", "memory_mb", "processes", "file_size_mb", "open_files", "tmp_mb"):
            check_range(f"{self.field}.{name}", getattr(self, name), 0, low_open=True)
        object.__setattr__(self, "tmpfs_dirs", tuple(self.tmpfs_dirs))
        bad = [d for d in self.tmpfs_dirs if not str(d).startswith("/")]
        if bad:
            raise ValueError(f"{self.field}.tmpfs_dirs: {bad!r} are not absolute paths")

    def launcher_limits(self, wall_s: float | None = None) -> dict:
        """The launcher's ``limits`` dict (:func:`~mintrl.reward.sandbox.launch.launcher_config`),
        with ``wall_s`` (seconds) in place of the session's own when given."""
        return {
            "wall_s": float(self.wall_s if wall_s is None else wall_s),
            "cpu_s": int(self.cpu_s),
            "address_space_bytes": int(self.memory_mb) << 20,
            "file_size_bytes": int(self.file_size_mb) << 20,
            "processes": int(self.processes),
            "open_files": int(self.open_files),
        }


@dataclass(frozen=True)
class CommandResult:
    """What one command gave.

    Attributes:
        output: its stdout and stderr as one text (decoded as UTF-8, bad bytes replaced), at most
            the session's ``max_output_bytes`` bytes of it, without the newline before the marker.
        exit_code: its exit status (0..255), or None when it did not come back.
        truncated: True when more output was read (and dropped) than was kept.
        timed_out: True when the command ran past the time limit (the session is then dead).
        shell_ended: True when the shell ended before the command came back (the session is dead).
        seconds: wall time of the command (seconds).
    """

    output: str
    exit_code: int | None
    truncated: bool = False
    timed_out: bool = False
    shell_ended: bool = False
    seconds: float = 0.0

    @property
    def finished(self) -> bool:
        """True when the command came back with an exit status (whatever it was)."""
        return self.exit_code is not None


def ansi_c_quote(text: str) -> str:
    """``text`` as a bash ANSI-C quoted word (``$'...'``): backslash, quote and every control or
    non-ASCII byte of its UTF-8 escaped, so the word is one line of printable ASCII."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in "\\'":
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return "$'" + "".join(out) + "'"


class ShellSession:
    """A ``bash`` in the sandbox, alive until :meth:`close` (see the module docstring).

    Args:
        uid: the sandbox uid (used only as root; one live session per uid: the caller's slots).
        limits: the sandbox's :class:`ShellLimits`.
        max_output_bytes: bytes of a command's output kept (bytes, >= 1).
        wall_s: the session's wall-clock life (seconds), in place of ``limits.wall_s`` when given.
        tmp_dir: where the session's run folder (launcher status) is made (default: the system's).

    Raises:
        OSError: the launcher could not be started (no folder, no process).
    """

    def __init__(
        self,
        uid: int,
        limits: ShellLimits,
        max_output_bytes: int,
        wall_s: float | None = None,
        tmp_dir: str | None = None,
    ):
        self.max_output_bytes = int(max_output_bytes)
        self._nonce = secrets.token_hex(8)
        self._count = 0
        self._run_dir = tempfile.mkdtemp(prefix="mintrl-shell-", dir=tmp_dir)
        try:
            os.mkdir(os.path.join(self._run_dir, "work"), 0o700)
            cfg = launcher_config(
                self._run_dir,
                uid,
                limits.launcher_limits(wall_s),
                int(limits.tmp_mb) << 20,
                argv=BASH,
                tmpfs_dirs=limits.tmpfs_dirs,
            )
            self._proc = start_launcher(cfg, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except BaseException:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            raise
        self._out = self._proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._bash: int | None = None
        self.alive = True

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run one command (any bash text, several lines allowed) and read its output.

        Args:
            timeout_s: wall-clock limit until the exit status is back (seconds).

        Returns:
            The :class:`CommandResult`; after a timeout or the end of the shell the session is dead
            (:attr:`alive` False) and the sandbox is killed.

        Raises:
            RuntimeError: the session is dead (closed, timed out or ended before).
        """
        if not self.alive:
            raise RuntimeError("the shell session has ended")
        self._count += 1
        marker = f"__mintrl_{self._nonce}_{self._count}__"
        line = f'__mintrl_c={ansi_c_quote(command)}; eval "$__mintrl_c" </dev/null; printf \'\\n{marker}:%d\\n\' "$?"\n'
        start = time.monotonic()
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._die()
            return CommandResult("", None, shell_ended=True, seconds=time.monotonic() - start)
        return self._read(re.compile(rb"\n" + marker.encode() + rb":(\d+)\n"), start, timeout_s)

    def _read(self, pattern: re.Pattern, start: float, timeout_s: float) -> CommandResult:
        """Read until ``pattern`` (the marker line) or the deadline; keep the head, drop the rest."""
        keep = self.max_output_bytes + 1  # one byte more than kept tells a cut
        window = 256  # bytes of the tail kept for finding the marker past a cut (the marker is ~40)
        head, tail, dropped = bytearray(), bytearray(), False
        deadline = start + timeout_s

        def result(body, exit_code=None, **flags) -> CommandResult:
            truncated = dropped or len(body) > self.max_output_bytes
            return CommandResult(
                _decode(body[: self.max_output_bytes]), exit_code, truncated, seconds=time.monotonic() - start, **flags
            )

        marked = False  # a marker is out; the command has ended once the shell also waits for input
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die()
                return result(head, timed_out=True)
            ready, _, _ = select.select([self._out], [], [], min(left, 0.002) if marked else left)
            drained = not ready
            if drained:
                if not (marked and self._shell_waits()):
                    continue
                chunk = self._drain()  # all the shell wrote before it went back to reading
            else:
                try:
                    chunk = os.read(self._out, _READ_CHUNK) or None
                except BlockingIOError:
                    continue
            if chunk is None:  # EOF: the launcher and the shell are gone
                self._die()
                return result(head, shell_ended=True)
            if not dropped:
                head += chunk
                if len(head) > keep + window:
                    tail = head[-window:]
                    del head[keep:]
                    dropped = True
            else:
                tail += chunk
            # the command has ended when its marker is out and the shell waits for the next line:
            # a marker the command printed itself (it can learn the nonce) does not end it early
            matches = list(pattern.finditer(tail if dropped else head))
            marked = bool(matches)
            if (
                marked and drained
            ):  # read to the end after the shell went back to reading: the last marker is the wrapper's
                last = matches[-1]
                return result(head if dropped else head[: last.start()], int(last.group(1)))
            if dropped:
                del tail[:-window]

    def _shell_waits(self) -> bool:
        """Whether bash is blocked reading its next command line (``read`` on fd 0). True where this
        machine does not show it (no ``/proc/<pid>/syscall``): then the marker alone ends a command."""
        pid = self._bash_pid()
        state = None if pid is None else _syscall(pid)
        return state is None or state == (READ_SYSCALL, 0)

    def _drain(self) -> bytes | None:
        """Everything in the output pipe now (possibly b""), or None at its end (the shell is gone)."""
        data = bytearray()
        while True:
            try:
                chunk = os.read(self._out, _READ_CHUNK)
            except BlockingIOError:
                return bytes(data)
            if not chunk:
                return bytes(data) if data else None
            data += chunk

    def _bash_pid(self) -> int | None:
        """This machine's PID of the sandbox's bash (the launcher's one child), or None."""
        if self._bash is None and self._proc is not None:
            try:
                with open(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children") as f:
                    children = f.read().split()
                self._bash = int(children[0]) if len(children) == 1 else None
            except (OSError, ValueError):
                self._bash = None
        return self._bash

    def _die(self) -> None:
        """Kill the sandbox (the launcher reaps PID 1 of its PID namespace) and mark the session dead."""
        self.alive = False
        if self._proc.poll() is not None:
            return
        try:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(timeout=_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait()

    def close(self) -> None:
        """End the session: nothing it started survives (see the module docstring); idempotent."""
        if self._proc is None:
            return
        self._die()
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._proc = None
        shutil.rmtree(self._run_dir, ignore_errors=True)

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_script(
    script: str, command: str, uid: int, limits: ShellLimits, timeout_s: float, max_output_bytes: int = 65536
) -> CommandResult:
    """Run ``script`` (e.g. a task's init) then ``command`` in one fresh session, and close it.

    Args:
        timeout_s: time limit of each of the two (seconds).

    Returns:
        The command's result.

    Raises:
        RuntimeError: the script did not come back or exited non-zero (its output's end named).
        OSError: no session could be started.
    """
    with ShellSession(uid, limits, max_output_bytes) as session:
        if script.strip():
            init = session.run(script, timeout_s)
            if init.exit_code != 0:
                why = "timed out" if init.timed_out else f"exit code {init.exit_code}"
                raise RuntimeError(f"the init script failed ({why}): {init.output.strip()[-300:]!r}")
        return session.run(command, timeout_s)


READ_SYSCALL = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)  # the number of read(2) here


def _syscall(pid: int) -> tuple[int, int] | None:
    """``(syscall number, first argument)`` a process is blocked in (``/proc/<pid>/syscall``), or
    ``(-1, -1)`` while it runs; None where this machine does not tell (no such file, no permission,
    an architecture whose read(2) number is not known here)."""
    if READ_SYSCALL is None:
        return None
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return None
    if not fields or fields[0] == "running" or fields[0] == "-1":
        return (-1, -1)
    try:
        return int(fields[0]), int(fields[1], 16)
    except (IndexError, ValueError):
        return None


def _decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", "replace")
