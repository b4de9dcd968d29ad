"""One long-lived ``bash`` inside the project's sandbox, driven command by command.

:class:`ShellSession` starts ``launcher.py`` in program mode (:mod:`mintrl.sandbox.launcher`:
new network, PID, mount and IPC namespaces, a new root showing only the system folders, private
size-capped tmpfs folders, resource limits and a memory cgroup over the whole sandbox where the
machine has one, a per-slot unprivileged uid when root, ``no_new_privs``, no user namespaces,
parent-death SIGKILL, a wall-clock kill of the whole sandbox) with ``bash --noprofile --norc``
(non-interactive: no job control, no history) as PID 1 of the sandbox's PID namespace, reading
commands on a pipe; stdout and stderr come back merged on one pipe, and a third pipe (bash's fd 3,
the status channel) carries the exit status of each command. With an init script, a fourth pipe
(bash's fd 4, the init pipe) carries it, until the init has run.

Each :meth:`ShellSession.run` writes one line to bash::

    __mintrl_c=$'<command, ANSI-C quoted>'; eval "$__mintrl_c" </dev/null 3>&-; printf '<n>:%d\\n' "$?" >&3

so that an unfinished quote or heredoc in the command is a syntax error of ``eval``, a command
reading stdin reads nothing, the command and its children run without the status channel, and the
exit status goes out of band (``<n>``: the command's number). Nothing the command prints ends it.

**The init script** (``ShellSession(..., init=...)``; its result is
:attr:`ShellSession.init_result`) runs as part of the start, after the calibration below and before
any other command, in a process of its own that has exited before the first command: bash runs
:data:`INIT_RUNNER` (a fixed ``bash --noprofile --norc -c`` program that reads the script from fd 4
by dup into a variable, closes fd 4 and runs it with ``eval``) with ``</dev/null 3>&-``, sends its
exit status, then closes its own fd 4; this process writes the script into the init pipe from a
thread (it may exceed the pipe's buffer) and closes it. PID 1 never reads the script: after the
init, no process the commands can see holds its text, its variables or what it wrote and deleted, in
memory (``/proc/<pid>/mem``, readable by the same uid), environment or command line. What the init
changes on disk stays; its variables, functions, options, traps and working folder do not reach the
commands' shell (as in AgentBench, where the init runs in a separate ``exec`` in the container).
What remains readable is what the init leaves behind on purpose or by accident: files it keeps; a
program it leaves running holds its own command line and the environment it inherited (the init's
exported variables at its start); a background *subshell* it leaves (``( ... ) &``, ``{ ...; } &``,
a function or builtin run with ``&``, a process substitution: a fork of the init's bash, not an
exec'd program) holds the init bash's whole memory, the script's text included, as long as it lives.
The init runs as the same uid as the commands, within the same limits, under its own time limit
(``init_timeout_s``; past it the session is dead).

**When a command has ended** (out of band): its status line is on the status channel, bash is
blocked in its top-level read of the command pipe, which this process sees in
``/proc/<bash>/syscall``: the ``read`` syscall on the command pipe (checked through
``/proc/<bash>/fd``) with the stack and instruction pointers that bash had there after two trusted
``:`` commands at the session's start (:attr:`ShellSession.end_check` ``"prompt"``), *and* the
process is still that bash: its :func:`process_identity` (executable path, device and inode, and
``start_code``, ``end_code``, ``start_stack`` of ``/proc/<pid>/stat``, which only an ``exec``
changes and which ASLR randomises per exec), recorded after the two ``:`` commands, is unchanged.
The identity is read after the wait, so a process seen waiting was that bash (an exec never gives
the old identity back). A command after which the identity has changed never counts as ended: it
runs into its time limit and the session is dead.

Threat model: the command runs inside that same bash (its state must persist), so it can do whatever
the wrapper does: learn the wrapper's text (a DEBUG trap), reach bash's saved copies of the status
channel and of the command pipe (``/proc/self/fd``), write a forged status line, redefine
``printf``, block bash in a read of the command pipe, or ``exec`` any program in bash's place (same
pid, same descriptors). None of these ends a command: a read of the command pipe inside the command
sits at another depth of bash's stack than the top-level one, and an exec'd program has another
identity, even one that learns bash's wait from ``/proc/1/syscall`` and blocks in a read of the
command pipe at those very stack and instruction pointers (code and stack mapped there with
``MAP_FIXED``), and even a new ``/bin/bash`` (the same executable, other random addresses).

What remains: a command can forge its own exit status and output (it could print anything anyway);
code can run in the shell between commands without a time limit of its own: background processes and
signal traps (as any shell allows), bounded by the session's wall clock, CPU time, process and
memory limits; foreground code that steals the next command line from the pipe runs under that
command's time limit. The stack check is not a secret: a read nested in bash's own calls at exactly
the top-level depth would pass it. None of the constructs tried here lands there, but the sandbox
can read bash's ``/proc/<pid>/syscall`` (same uid), so a deliberate search over bash's frame sizes
could find one. No check of bash's state holds against code run *inside* the calibrated bash: bash
runs as the sandbox uid and is dumpable, so a command can write bash's memory (``/proc/1/mem`` is
writable by the same uid; ``ptrace``) or load a shared object it wrote into a tmpfs folder
(``enable -f``), and such code can forge the status line and block in the top-level read with bash's
identity intact, ending its command early (its work then goes on as a background process's would).
Where ASLR is off (``/proc/sys/kernel/randomize_va_space`` 0, or bash started with
``ADDR_NO_RANDOMIZE``: :attr:`ShellSession.identity_check` ``"fixed"``) a program other than bash is
still refused, but a new exec of ``/bin/bash`` with the same arguments and environment gets the same
identity and can reach the same wait, so it can end its command early. Where this machine does not
show the syscall (no ``/proc/<pid>/syscall``, another architecture), the status line alone ends a
command (``end_check`` ``"status"``: a command that forges it ends early); where bash's top-level
stack pointer differs between the two trusted commands, any read of the command pipe does
(``"read"``); the identity is required in both where this machine shows it (``identity_check`` None
where it does not: no binding to the calibrated bash).

The output up to the end is read with a wall-clock limit; its first ``max_output_bytes`` bytes are
kept and the rest is read and dropped (an endless printer runs into the time limit). A command that
does not come back in time, or a shell that ends (``exit``, a crash, a resource limit, the session's
own wall-clock limit), leaves the session dead (:attr:`ShellSession.alive` False): the caller
decides what follows (:mod:`mintrl.env.shell.environment` restarts it by replaying).

:meth:`close` sends SIGTERM to the launcher, which SIGKILLs PID 1 of the sandbox and reaps it
(the kernel kills every other process of the PID namespace first, a ``setsid``/``nohup`` daemon
included), then SIGKILLs the launcher's process group if it has not ended within a few seconds; the
launcher's report (which isolations the OS granted) is then :attr:`ShellSession.isolation`.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from mintrl.core.checks import check_range
from mintrl.sandbox.launch import launcher_config, start_launcher

BASH = ("/bin/bash", "--noprofile", "--norc")
INIT_FD = 4  # the long-lived bash's descriptor of the init pipe until the init has run
# the init's own bash (a child of the long-lived one): takes the script from the init pipe by dup (the
# sandbox uid may not reopen a pipe this process made by its /proc path), closes the pipe, runs it
INIT_RUNNER = (
    f'{" ".join(BASH)} -c \'IFS= read -r -d "" __mintrl_init <&{INIT_FD}; exec {INIT_FD}<&-; eval "$__mintrl_init"\''
)
ADDR_NO_RANDOMIZE = 0x0040000  # the personality flag that turns ASLR off for a process's next execs
_READ_CHUNK = 1 << 20  # bytes per read
_CLOSE_WAIT_S = 5.0  # seconds the launcher gets to reap the sandbox after SIGTERM
_CHECK_SETUP_S = 30.0  # seconds a state check may take beyond its scripts' limits (killing the sandbox, mounts)
_FIRST_POLL_S, _LAST_POLL_S = 0.001, 0.05  # seconds between looks at bash once a status line is in


@dataclass(frozen=True)
class ShellLimits:
    """The sandbox limits of one shell session (checked on construction; ``field`` names them).

    Attributes:
        wall_s: wall-clock life of the whole session, after which the sandbox is killed (seconds).
        cpu_s: CPU time of each process, the shell included (seconds; SIGXCPU, SIGKILL 1 s later).
        cpu_cores: CPU share of the whole sandbox (cores: CPU seconds per wall-clock second over all
            its processes, background and ``setsid`` ones included), where the machine lets the
            launcher make a cpu cgroup (root); else the bound is ``cpu_s`` per process.
        memory_mb: address space of each process (MiB).
        memory_total_mb: memory of the whole sandbox, every process and its tmpfs files together
            (MiB; None: ``memory_mb``), where the machine lets the launcher make a memory cgroup
            (else the bound is ``memory_mb`` times ``processes``); past it the kernel's OOM killer
            ends a process of the sandbox.
        processes: processes/threads of the sandbox uid at once (a fork loop stops here).
        file_size_mb: largest file a process may write (MiB).
        open_files: file descriptors per process.
        tmp_mb: size of each private tmpfs (``/tmp`` with the home folder, ``/var/tmp``,
            ``/dev/shm``, ``tmpfs_dirs``) (MiB).
        tmpfs_dirs: more folders hidden under a private writable tmpfs (absolute paths).
        writable_root: run the shell as root of a user namespace of its own on a copy-on-write root
            (the launcher's writable root: every folder writable, ``useradd`` works, all writes
            vanish with the session), as AgentBench's Docker container runs a task; root only, each
            session given its own range of 65536 host uids (:class:`ShellSession`'s ``root_uids``).
            False: an unprivileged uid on the read-only system folders.
        field: config prefix in error messages.

    Raises:
        ValueError: a non-positive limit (field named).
    """

    wall_s: float = 60.0
    cpu_s: int = 60
    cpu_cores: float = 1.0
    memory_mb: int = 512
    memory_total_mb: int | None = None
    processes: int = 32
    file_size_mb: int = 8
    open_files: int = 1024
    tmp_mb: int = 32
    tmpfs_dirs: tuple[str, ...] = ("/root", "/home")
    writable_root: bool = False
    field: str = "env"

    def __post_init__(self):
        for name in ("wall_s", "cpu_s", "cpu_cores", "memory_mb", "processes", "file_size_mb", "open_files", "tmp_mb"):
            check_range(f"{self.field}.{name}", getattr(self, name), 0, low_open=True)
        object.__setattr__(self, "tmpfs_dirs", tuple(self.tmpfs_dirs))
        bad = [d for d in self.tmpfs_dirs if not str(d).startswith("/")]
        if bad:
            raise ValueError(f"{self.field}.tmpfs_dirs: {bad!r} are not absolute paths")
        if self.memory_total_mb is not None:
            check_range(f"{self.field}.memory_total_mb", self.memory_total_mb, 0, low_open=True)

    def launcher_limits(self, wall_s: float | None = None) -> dict:
        """The launcher's ``limits`` dict (:func:`~mintrl.sandbox.launch.launcher_config`),
        with ``wall_s`` (seconds) in place of the session's own when given."""
        return {
            "wall_s": float(self.wall_s if wall_s is None else wall_s),
            "cpu_s": int(self.cpu_s),
            "cpu_cores": float(self.cpu_cores),
            "address_space_bytes": int(self.memory_mb) << 20,
            "memory_total_bytes": int(self.memory_mb if self.memory_total_mb is None else self.memory_total_mb) << 20,
            "file_size_bytes": int(self.file_size_mb) << 20,
            "processes": int(self.processes),
            "open_files": int(self.open_files),
        }


@dataclass(frozen=True)
class CommandResult:
    """What one command gave.

    Attributes:
        output: its stdout and stderr as one text (decoded as UTF-8, bad bytes replaced), at most
            the session's ``max_output_bytes`` bytes of it.
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


@dataclass(frozen=True)
class CheckResult:
    """What one state-check script gave (:meth:`ShellSession.run_checks`).

    Attributes:
        exit_code: its exit status (0..255; 128 + N where signal N ended it), or None where it did not
            come back in time or could not start (the check failed).
        stdout: the first ``max_output_bytes`` bytes of its stdout (UTF-8, bad bytes kept as
            surrogate escapes); its stderr is dropped, as AgentBench drops it.
        timed_out: it ran past the time limit.
    """

    exit_code: int | None
    stdout: str
    timed_out: bool = False


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
        init: a script run at the start in a process of its own, before any command (see the module
            docstring; "" or blank: none).
        init_timeout_s: the init script's wall-clock limit (seconds).
        root_uids: with ``limits.writable_root``: the first of the 65536 host uids (and gids) that
            the shell's user namespace maps its uids 0..65535 to (a range nothing else uses; one per
            live session). Unused otherwise.

    Attributes:
        alive: False once the shell has ended, timed out or been closed.
        end_check: how a command's end is known (see the module docstring): ``"prompt"`` (its
            status line and bash back in its top-level read), ``"read"`` (its status line and bash in
            a read of the command pipe) or ``"status"`` (its status line alone, where this machine
            does not show bash's syscalls).
        identity_check: how far a command's end is bound to the calibrated bash (its
            :func:`process_identity`, required unchanged at each end): ``"randomised"`` (each exec
            gets new random addresses: no exec'd program passes), ``"fixed"`` (ASLR off for bash: any
            other executable is refused, a new exec of ``/bin/bash`` with the same arguments and
            environment is not) or None (this machine does not show the identity: no binding).
        init_result: the init script's :class:`CommandResult` (its output and exit status; the
            start's failure where the session did not start), None without one.
        isolation: the launcher's report of the isolations the OS granted (its ``isolation`` dict,
            with ``oom_kills``: processes the memory cap ended), once the sandbox has ended; None
            before.

    The constructor starts the sandbox and runs two ``:`` commands (before any other) to learn how
    bash waits for a command; where they do not come back within ``min(wall_s, 30)`` seconds the
    session is dead and its first :meth:`run` returns that failure. It then runs the init script.

    Raises:
        ValueError: the init script holds a NUL character, or ``limits.writable_root`` without
            ``root_uids`` (or a range outside 65536..2**32-65537).
        OSError: the launcher could not be started (no folder, no process).
    """

    def __init__(
        self,
        uid: int,
        limits: ShellLimits,
        max_output_bytes: int,
        wall_s: float | None = None,
        tmp_dir: str | None = None,
        init: str = "",
        init_timeout_s: float = 30.0,
        root_uids: int | None = None,
    ):
        if "\0" in init:
            raise ValueError("the init script holds a NUL character (bash cannot hold it)")
        if limits.writable_root and root_uids is None:
            raise ValueError(f"{limits.field}.writable_root needs the session's root_uids (its host uid range)")
        init_data = init.encode("utf-8") if init.strip() else None
        self.max_output_bytes = int(max_output_bytes)
        self._count = 0
        self._status_tail = b""
        self._proc: subprocess.Popen | None = None
        self._bash: int | None = None
        self._prompt: tuple[int, ...] | None = None
        self._seen: tuple[int, ...] | None = None  # bash's read when the last command ended
        self._start_failure: CommandResult | None = None
        self._identity: tuple | None = None  # bash's process_identity() once calibrated
        self._feeder: threading.Thread | None = None
        self.end_check = "status"
        self.identity_check: str | None = None
        self.init_result: CommandResult | None = None
        self.isolation: dict | None = None
        self.check_error: str | None = None
        self._run_dir = tempfile.mkdtemp(prefix="mintrl-shell-", dir=tmp_dir)
        status_r, status_w = os.pipe()
        # the check channel: between this process and the launcher's parent only (never the sandbox's)
        self._control, control_launcher = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        init_r, init_w = os.pipe() if init_data is not None else (None, None)
        passed = [[3, status_w]] + ([[INIT_FD, init_r]] if init_r is not None else [])  # bash's fd 3 and 4
        try:
            os.mkdir(os.path.join(self._run_dir, "work"), 0o700)
            cfg = launcher_config(
                self._run_dir,
                uid,
                limits.launcher_limits(wall_s),
                int(limits.tmp_mb) << 20,
                argv=BASH,
                tmpfs_dirs=limits.tmpfs_dirs,
                writable_root_uid=root_uids if limits.writable_root else None,
            )
            cfg["pass_fds"] = passed
            cfg["control_fd"] = control_launcher.fileno()
            self._proc = start_launcher(
                cfg,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(*(source for _, source in passed), control_launcher.fileno()),
            )
        except BaseException:
            for fd in (status_r, init_w):
                if fd is not None:
                    os.close(fd)
            self._control.close()
            shutil.rmtree(self._run_dir, ignore_errors=True)
            raise
        finally:
            for _, source in passed:
                os.close(source)  # only the sandbox holds them now
            control_launcher.close()  # only the launcher's parent holds it now
        self._status = status_r
        if init_w is not None:  # the init pipe's buffer may be smaller than the script: a writer of its own
            self._feeder = threading.Thread(target=_feed, args=(init_w, init_data), daemon=True)
            self._feeder.start()
        self._out = self._proc.stdout.fileno()
        for fd in (self._status, self._out):
            os.set_blocking(fd, False)
        self._pipe = f"pipe:[{os.fstat(self._proc.stdin.fileno()).st_ino}]"  # the command pipe, as /proc shows it
        self.alive = True
        self._calibrate(min(float(limits.wall_s if wall_s is None else wall_s), 30.0))
        if init_data is not None:
            self.init_result = self._start_failure or self._run_init(init_timeout_s)

    def _calibrate(self, timeout_s: float) -> None:
        """Two trusted ``:`` commands: bash's read after each is its top-level wait for a command;
        then bash's identity (:func:`process_identity`), which every later end check requires."""
        self.end_check = "read"
        seen = []
        for _ in range(2):
            result = self._command(":", timeout_s)
            if not result.finished:
                self._start_failure = result
                return
            seen.append(self._seen)
        if seen[0] is None:
            self.end_check = "status"  # this machine does not show bash's syscalls
        elif seen[0] == seen[1]:
            self.end_check, self._prompt = "prompt", seen[0]
        pid = self._bash_pid()
        self._identity = None if pid is None else process_identity(pid)
        if self._identity is not None:
            self.identity_check = "randomised" if exec_randomised(pid) else "fixed"

    def _run_init(self, timeout_s: float) -> CommandResult:
        """Run the init script in a child bash that reads it from the init pipe (fed by
        :func:`_feed`), then close the long-lived bash's end of the pipe, which it never reads."""
        return self._send(f"{INIT_RUNNER} </dev/null 3>&-", timeout_s, f"; exec {INIT_FD}<&-")

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run one command (any bash text, several lines allowed) and read its output.

        Args:
            timeout_s: wall-clock limit until the command has ended (seconds).

        Returns:
            The :class:`CommandResult`; after a timeout or the end of the shell the session is dead
            (:attr:`alive` False) and the sandbox is killed.

        Raises:
            RuntimeError: the session is dead (closed, timed out or ended before).
        """
        if self._start_failure is not None:
            failure, self._start_failure = self._start_failure, None
            return failure
        if not self.alive:
            raise RuntimeError("the shell session has ended")
        return self._command(command, timeout_s)

    def _command(self, command: str, timeout_s: float) -> CommandResult:
        return self._send(f'__mintrl_c={ansi_c_quote(command)}; eval "$__mintrl_c" </dev/null 3>&-', timeout_s)

    def _send(self, body: str, timeout_s: float, after: str = "") -> CommandResult:
        """Write one line to bash: ``body``, its exit status to the status channel, then ``after``
        (trusted text); read what it gives until it has ended."""
        self._count += 1
        line = f"{body}; printf '{self._count}:%d\\n' \"$?\" >&3{after}\n"
        start = time.monotonic()
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._die()
            return CommandResult("", None, shell_ended=True, seconds=time.monotonic() - start)
        return self._read(self._count, start, timeout_s)

    def _read(self, number: int, start: float, timeout_s: float) -> CommandResult:
        """Read the output until command ``number`` has ended (see the module docstring) or the
        deadline; keep the head, drop the rest."""
        head, dropped, status = bytearray(), False, None
        deadline, poll = start + timeout_s, _FIRST_POLL_S
        watched = [self._out, self._status]

        def add(chunk: bytes) -> None:
            nonlocal dropped
            room = self.max_output_bytes - len(head)
            head.extend(chunk[: max(room, 0)])
            dropped = dropped or len(chunk) > room

        def result(exit_code=None, **flags) -> CommandResult:
            return CommandResult(_decode(head), exit_code, dropped, seconds=time.monotonic() - start, **flags)

        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die()
                return result(timed_out=True)
            ready, _, _ = select.select(watched, [], [], min(left, poll) if status is not None else left)
            if self._status in ready:
                try:
                    status = self._take_status(number, status)
                except EOFError:  # nobody holds the channel any more: stdout's end or the deadline ends it
                    watched.remove(self._status)
            if self._out in ready:
                try:
                    chunk = os.read(self._out, _READ_CHUNK)
                except BlockingIOError:
                    chunk = None
                if chunk == b"":
                    self._die()  # EOF: the launcher and the shell are gone
                    return result(shell_ended=True)
                add(chunk or b"")
            if status is not None and self._ended():
                add(self._drain(self._out, deadline) or b"")  # all the command wrote before bash went back to its read
                try:
                    status = self._take_status(number, status)  # the wrapper's line, written last
                except EOFError:
                    pass
                return result(status)
            if status is not None:
                poll = min(2 * poll, _LAST_POLL_S)  # a forged status line: bash is rarely looked at

    def run_checks(self, scripts: list[tuple[str, str]], answer: str, timeout_s: float) -> list[CheckResult]:
        """Run a state check's chain as AgentBench's ``_evaluate_by_check_scripts`` does, on the
        sandbox's final state, and end the session (it is dead afterwards; callable once).

        The launcher's parent (host root, outside the sandbox) takes the request on a channel the
        sandbox never holds, kills every process of the sandbox (its PID 1, so that the kernel kills
        the rest and waits for them) keeping its mount and user namespaces, then runs each script in
        a process of its own on the agent's final tree with the host's programs, libraries, loader
        files and alternatives bound over the agent's copies (a writable root's), no procfs, the
        sandbox's identity and limits, ``no_new_privs`` and the seccomp filter with ``ptrace``,
        ``process_vm_readv`` and ``process_vm_writev`` refused, as PID 1 of a PID namespace of its
        own (see ``launcher.py``). Script ``k`` runs as ``bash -c text -- answer out_1 ... out_k-1``
        or ``python3 -c text answer out_1 ...`` (``out_j``: the stdout of script ``j``), and the chain
        stops at the first exit code that is not 0.

        Args:
            scripts: ``(language, text)`` per script, ``language`` ``"bash"`` or ``"python"`` (a
                row's ``null`` entry: the caller puts the example script there).
            answer: the agent's answer (the first parameter of every script).
            timeout_s: wall-clock limit of each script (seconds).

        Returns:
            One :class:`CheckResult` per script run (fewer than ``scripts`` where one failed); an
            empty list where the check could not run at all (the session was dead or the launcher
            refused: the check failed).

        Raises:
            RuntimeError: the session is dead (closed, timed out or ended before).
        """
        if not self.alive or self._proc is None:
            raise RuntimeError("the shell session has ended")
        request = {
            "scripts": [[language, text] for language, text in scripts],
            "answer": answer,
            "timeout_s": float(timeout_s),
            "max_output_bytes": self.max_output_bytes,
        }
        body = json.dumps(request).encode("utf-8", "surrogateescape")
        self.alive = False  # the launcher kills the sandbox on this request
        reply: dict = {}
        try:
            self._control.settimeout(_CLOSE_WAIT_S)
            self._control.sendall(len(body).to_bytes(8, "big") + body)
            self._control.settimeout(float(timeout_s) * max(1, len(scripts)) + _CHECK_SETUP_S)
            head = _receive(self._control, 8)
            reply = json.loads(_receive(self._control, int.from_bytes(head, "big")).decode("utf-8", "surrogateescape"))
            self._proc.wait(timeout=_CLOSE_WAIT_S)  # the launcher writes its report and ends
        except (OSError, EOFError, ValueError, subprocess.TimeoutExpired):
            pass
        finally:
            self._die()
        if "results" not in reply:
            self.check_error = str(reply.get("error", "the launcher gave no check result"))
            return []
        return [CheckResult(r["exit_code"], r["stdout"], bool(r.get("timed_out"))) for r in reply["results"]]

    def _take_status(self, number: int, status: int | None) -> int | None:
        """Read the status channel now: the exit status in the last line for command ``number``
        (``status`` when none came). Raises EOFError at the channel's end."""
        data = self._drain(self._status, time.monotonic() + 1.0)
        if data is None:
            raise EOFError
        lines = (self._status_tail + data).split(b"\n")
        self._status_tail = lines.pop()[-64:]  # an unfinished line (a flood without newlines stays bounded)
        for text in lines:
            match = _STATUS_LINE.fullmatch(text)
            if match and int(match.group(1)) == number:
                status = min(int(match.group(2)), 255)
        return status

    def _ended(self) -> bool:
        """Whether bash now waits for the next command, as :attr:`end_check` tells it (the status
        line is already in), and is still the calibrated bash: its identity is looked at after its
        wait, so that a process that passed the look at its wait was that bash then (an exec never
        gives a process its old identity back)."""
        if self.end_check == "status":
            waiting = True
        else:
            self._seen = self._waiting()
            waiting = (
                (self._seen is None or bool(self._seen)) if self.end_check == "read" else self._seen == self._prompt
            )
        return waiting and self._same_process()

    def _same_process(self) -> bool:
        """Whether the sandbox's PID 1 is still the bash calibrated at the start (True where this
        machine did not show its identity then)."""
        if self._identity is None:
            return True
        pid = self._bash_pid()
        return pid is not None and process_identity(pid) == self._identity

    def _waiting(self) -> tuple[int, ...] | None:
        """bash's blocked read of the command pipe as ``(syscall, fd, count, stack pointer,
        instruction pointer)``; ``()`` while bash does anything else; None where this machine does
        not show it."""
        pid = self._bash_pid()
        state = None if pid is None else _syscall(pid)
        if state is None or len(state) < 9:
            return None if state is None else ()
        if state[0] != READ_SYSCALL:
            return ()
        try:
            on_pipe = os.readlink(f"/proc/{pid}/fd/{state[1]}") == self._pipe
        except OSError:
            on_pipe = False
        return (state[0], state[1], state[3], state[7], state[8]) if on_pipe else ()

    @staticmethod
    def _drain(fd: int, deadline: float) -> bytes | None:
        """Everything in the pipe ``fd`` now (possibly b"", bounded by ``deadline``, a monotonic
        time), or None at its end."""
        data = bytearray()
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                return bytes(data) if data else None
            data += chunk
        return bytes(data)

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
        """Kill the sandbox (the launcher reaps PID 1 of its PID namespace), mark the session dead
        and keep the launcher's report."""
        self.alive = False
        if self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGTERM)
                self._proc.wait(timeout=_CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._proc.wait()
        if self.isolation is None:
            try:
                with open(os.path.join(self._run_dir, "status.json")) as f:
                    report = json.load(f)
                self.isolation = dict(report["isolation"], oom_kills=report.get("oom_kills", 0))
            except (OSError, ValueError, KeyError):
                pass

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
        os.close(self._status)
        self._control.close()
        if self._feeder is not None:
            self._feeder.join(timeout=_CLOSE_WAIT_S)  # its pipe has no reader left: it has ended
        self._proc = None
        shutil.rmtree(self._run_dir, ignore_errors=True)

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_init(result: CommandResult | None, what: str = "the init script") -> None:
    """Raise when an init script (its :attr:`ShellSession.init_result`; None: no script) did not
    come back or exited non-zero.

    Raises:
        RuntimeError: naming ``what``, why it failed and the end of its output.
    """
    if result is not None and result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        raise RuntimeError(f"{what} failed ({why}): {result.output.strip()[-300:]!r}")


READ_SYSCALL = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)  # the number of read(2) here
_STATUS_LINE = re.compile(rb"(\d+):(\d+)")


def _syscall(pid: int) -> tuple[int, ...] | None:
    """The fields of ``/proc/<pid>/syscall`` as numbers: ``(syscall, 6 arguments, stack pointer,
    instruction pointer)`` while the process is blocked in a syscall, ``(-1,)`` while it runs; None
    where this machine does not tell (no such file, no permission, an architecture whose read(2)
    number is not known here)."""
    if READ_SYSCALL is None:
        return None
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return None
    if not fields or fields[0] == "running" or fields[0] == "-1":
        return (-1,)
    try:
        return tuple(int(field, 0) for field in fields)
    except ValueError:
        return None


def process_identity(pid: int) -> tuple | None:
    """What ``exec`` changes in a process and nothing else does: ``(executable path, its device,
    its inode, start_code, end_code, start_stack)``, the last three from ``/proc/<pid>/stat`` (the
    addresses of its code and of its initial stack: set by each exec, randomised per exec where
    :func:`exec_randomised`); None where this machine does not show them (no such process, or no
    right to look: the kernel then shows 1, 1, 0)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        file = os.stat(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # from field 3 (state) on: comm may hold anything
        start_code, end_code, start_stack = (int(field) for field in fields[23:26])
    except (OSError, ValueError):
        return None
    if start_stack == 0:
        return None
    return (exe, file.st_dev, file.st_ino, start_code, end_code, start_stack)


def exec_randomised(pid: int) -> bool:
    """Whether each new exec in the process gets new random code and stack addresses: ASLR is on
    (``/proc/sys/kernel/randomize_va_space`` not 0; the setting is the whole kernel's) and not
    turned off for the process (``ADDR_NO_RANDOMIZE`` in ``/proc/<pid>/personality``). False where
    this machine does not tell."""
    try:
        with open("/proc/sys/kernel/randomize_va_space") as f:
            aslr = int(f.read()) != 0
        with open(f"/proc/{pid}/personality") as f:
            personality = int(f.read(), 16)
    except (OSError, ValueError):
        return False
    return aslr and not personality & ADDR_NO_RANDOMIZE


def _feed(fd: int, data: bytes) -> None:
    """Write ``data`` into the pipe ``fd`` and close it; it ends early when the pipe has no reader
    left (the init's bash ended before reading it all, or the sandbox is gone)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)


def _receive(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from ``sock`` (its timeout applies to each read).

    Raises:
        EOFError: the channel ended first.
    """
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), _READ_CHUNK))
        if not chunk:
            raise EOFError("the check channel ended")
        data += chunk
    return bytes(data)


def _decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", "replace")
