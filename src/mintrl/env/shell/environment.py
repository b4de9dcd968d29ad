"""``env=shell``: an agent answers questions about files by running commands in one persistent bash
shell per episode, inside the project's sandbox.

Each episode is one task (the prompt item's ``entry``, :mod:`mintrl.env.shell.tasks` or
:mod:`mintrl.env.shell.loader`). Its shell (:class:`~mintrl.env.shell.session.ShellSession`: no
network, resource limits, private tmpfs, a per-slot uid, a wall-clock kill) starts at the episode's
first command: the task's ``init`` script runs first, in a process of its own that has exited
before the agent's first command (:class:`~mintrl.env.shell.session.ShellSession`'s ``init``: the
agent cannot read its text or what it held, unless it leaves a process behind; what it does to
files stays, its variables and working folder do not reach the agent's shell; its output unseen; a
failing init is an environment error); then the task's optional ``start`` command (a background
program, a variable) runs in the agent's shell itself, output unseen (a failing start is an
environment error; its programs end with the shell). An action (:mod:`mintrl.env.shell.protocol`) is

- a ```bash block: the command runs in the episode's shell (state persists: files, the working
  folder, variables) and its output (stdout and stderr merged, at most ``max_output_chars``
  characters, with a note when cut) and a non-zero exit code are the next observation; kind
  ``run`` for exit 0, ``run_error`` otherwise;
- an ``<answer>`` tag: the episode ends with reward 1.0 when the answer matches the task's label
  under the task's check (:func:`~mintrl.env.shell.protocol.answers_match`), else 0.0; for a loaded
  row whose check tests the final state (check ``state``, :mod:`mintrl.env.shell.loader`), 1.0 when
  its ``state_check`` chain passes on the episode's final machine with the answer
  (:meth:`~mintrl.env.shell.session.ShellSession.run_checks`: every process the agent left killed
  first, the host's programs, libraries and loader files over the agent's; a shell killed by a
  timeout rebuilt by replay first), else 0.0;
- anything else: ``invalid``; the observation states the protocol, the episode goes on.

**A command that does not come back** within ``command_timeout_s``, or a shell that ends (``exit``,
a crash, a resource limit), kills that shell's whole sandbox. The episode goes on: the observation
says so (kind ``run_error``), and the next command runs in a new shell rebuilt by replaying the
init script (again in its own process), the start command and the episode's earlier commands that came back, in order,
output unseen (so the state is rebuilt, not kept: a command that is not deterministic may rebuild a
different state).
The episode ends with reward 0.0 when its shell time (``episode_timeout_s``, replays included) is
spent, or when a replay does not come back.

Live shells are capped at ``max_shells`` (slot ``k`` runs as uid ``uid_base + k``; no two live
shells share a slot); a shell is closed as soon as its episode ends, and every shell by ``reset``
and ``close``. An episode that finds no free slot, a task whose init fails, or any unexpected
exception ends that episode with reward NaN (``error``): the others go on, the run never stops.
An episode that reaches ``max_turns`` actions ends with reward 0.0.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from mintrl.core.checks import check_int, check_range
from mintrl.data.base import PromptItem
from mintrl.env.base import Counters, SerialEnvironment
from mintrl.env.shell.protocol import CHECKS, answers_match, check_names, output_observation, parse_action
from mintrl.env.shell.session import CommandResult, ShellLimits, ShellSession, check_init

log = logging.getLogger(__name__)

STATE = "state"  # the check of a loaded row whose check chain tests the final state (entry["state_check"])
COUNTERS = ("commands", "command_errors", "timeouts", "restarts", "invalid_actions", "errors", "seconds")


def timeout_note(timeout_s: float) -> str:
    """What the agent reads after a command stopped at the time limit (``timeout_s`` in seconds)."""
    return (
        f"The command ran longer than {timeout_s:g} s and was stopped; the shell was killed. Your next command "
        "runs in a new shell where your earlier commands are run again."
    )


ENDED_NOTE = (
    "The shell ended (exit, or a sandbox limit: memory, processes, CPU time); your next command runs in a new "
    "shell where your earlier commands are run again."
)


def cut_note(max_chars: int) -> str:
    """The note after output cut at ``max_chars`` characters."""
    return f"... (output cut at {max_chars} characters)"


def check_task(entry: Any) -> None:
    """Check that ``entry`` is a task dict the environment can run.

    Raises:
        ValueError: not a dict, ``question``/``init``/``label`` (or an optional ``start``) not
            strings, or ``check`` not one of :data:`~mintrl.env.shell.protocol.CHECKS` or several
            joined with ``+`` (the field named).
    """
    if not isinstance(entry, dict):
        raise ValueError(f"the task entry is a {type(entry).__name__}, not a dict")
    for key in ("question", "init", "label"):
        if not isinstance(entry.get(key), str):
            raise ValueError(f"field {key!r}: missing or not a string")
    if not isinstance(entry.get("start", ""), str):
        raise ValueError("field 'start': not a string")
    if entry.get("check") == STATE:
        scripts = entry.get("state_check")
        if not (isinstance(scripts, list) and scripts and all(_is_script(s) for s in scripts)):
            raise ValueError("field 'state_check': not a list of [language, text] (language bash or python)")
        return
    try:
        check_names(entry.get("check"))
    except ValueError:
        raise ValueError(f"field 'check': {entry.get('check')!r} is not one of {CHECKS}") from None


def _is_script(script: Any) -> bool:
    return (
        isinstance(script, (list, tuple))
        and len(script) == 2
        and script[0] in ("bash", "python")
        and isinstance(script[1], str)
    )


class _EpisodeOver(Exception):
    """The episode's shell time is spent or its state could not be rebuilt (reward 0.0)."""


@dataclass
class _Episode:
    entry: Any
    failure: str | None = None  # why the episode cannot run (raised at its first step)
    done: bool = False
    turns: int = 0
    commands: list[str] = field(default_factory=list)  # commands that came back, in order
    session: ShellSession | None = None
    slot: int | None = None
    shell_seconds: float = 0.0  # wall time its shells have lived so far (seconds)
    started: float | None = None  # monotonic start of the live shell


class ShellEnvironment(SerialEnvironment):
    """Many shell episodes at once (see the module docstring). Thread-safe for disjoint episodes:
    each episode has its own shell; slots come from a thread-safe queue, counters under a lock.

    Args:
        command_timeout_s: wall-clock limit of one command (seconds, > 0).
        init_timeout_s: wall-clock limit of a task's init script (seconds, > 0).
        episode_timeout_s: wall-clock shell time of one episode, replays included (seconds, > 0).
        max_output_chars: most characters of a command's output shown to the agent (characters,
            >= 1); more is read, dropped and noted.
        max_action_chars: longer actions are invalid (characters, >= 1).
        max_turns: actions after which an episode ends with reward 0.0 (actions, >= 1), or None.
        max_shells: live shells at once (slots, >= 1); slot ``k`` runs as uid ``uid_base + k``.
        uid_base: first unprivileged uid of the slots (used only when running as root).
        writable_root: run each shell as root of a user namespace of its own on a copy-on-write root
            (every folder writable, ``useradd`` works, all writes gone with the shell), as AgentBench's
            container runs a task (:class:`~mintrl.env.shell.session.ShellLimits`); root only.
        root_uid_base: with ``writable_root``, slot ``k``'s namespace maps its uids 0..65535 to the
            host uids ``root_uid_base + 65536 k`` onwards (a range nothing else uses).
        cpu_s, cpu_cores, memory_mb, processes, file_size_mb, open_files, tmp_mb, tmpfs_dirs: the sandbox
            limits of each shell (:class:`~mintrl.env.shell.session.ShellLimits`; seconds, cores,
            MiB, processes, MiB, descriptors, MiB, absolute paths).
        tmp_dir: where each shell's run folder (launcher status) is made (default: the system's).

    Counters (:meth:`metrics`): ``env/commands`` (commands run), ``env/command_errors`` (non-zero
    exit, timeout or shell end), ``env/timeouts`` (commands stopped at the time limit),
    ``env/restarts`` (shells rebuilt by replay), ``env/invalid_actions``, ``env/errors`` (episodes
    ended by an environment error) and ``env/seconds`` (wall time in reset, step and score_final,
    seconds).

    Raises:
        ValueError: a field out of its range (named ``env.<field>``).
    """

    name = "shell"
    thread_safe = True
    action_kinds = ("run", "run_error", "answer", "invalid", "error")

    def __init__(
        self,
        command_timeout_s: float = 2.0,
        init_timeout_s: float = 10.0,
        episode_timeout_s: float = 60.0,
        max_output_chars: int = 500,
        max_action_chars: int = 1000,
        max_turns: int | None = None,
        max_shells: int = 128,
        uid_base: int = 64000,
        writable_root: bool = False,
        root_uid_base: int = 2_000_000_000,
        cpu_s: int = 60,
        cpu_cores: float = 1.0,
        memory_mb: int = 512,
        processes: int = 32,
        file_size_mb: int = 8,
        open_files: int = 1024,
        tmp_mb: int = 32,
        tmpfs_dirs: Sequence[str] = ("/root", "/home"),
        tmp_dir: str | None = None,
    ):
        for name, value in (
            ("command_timeout_s", command_timeout_s),
            ("init_timeout_s", init_timeout_s),
            ("episode_timeout_s", episode_timeout_s),
        ):
            check_range(f"env.{name}", value, 0.0, low_open=True)
        for name, value in (
            ("max_output_chars", max_output_chars),
            ("max_action_chars", max_action_chars),
            ("max_shells", max_shells),
        ):
            check_int(f"env.{name}", value)
        check_int("env.max_turns", max_turns, none_ok=True)
        check_int("env.uid_base", uid_base, 1)
        check_int("env.root_uid_base", root_uid_base, 65536)
        if writable_root and root_uid_base + 65536 * max_shells > 2**32 - 65536:
            raise ValueError(f"env.root_uid_base: {max_shells} slots of 65536 uids from {root_uid_base} pass 2**32")
        self.command_timeout_s, self.init_timeout_s = float(command_timeout_s), float(init_timeout_s)
        self.episode_timeout_s = float(episode_timeout_s)
        self.max_output_chars, self.max_action_chars, self.max_turns = max_output_chars, max_action_chars, max_turns
        self.limits = ShellLimits(
            wall_s=self.episode_timeout_s,
            cpu_s=cpu_s,
            cpu_cores=cpu_cores,
            memory_mb=memory_mb,
            processes=processes,
            file_size_mb=file_size_mb,
            open_files=open_files,
            tmp_mb=tmp_mb,
            tmpfs_dirs=tuple(tmpfs_dirs),
            writable_root=bool(writable_root),
        )
        self.uid_base, self.tmp_dir, self.max_shells = int(uid_base), tmp_dir, max_shells
        self.root_uid_base = int(root_uid_base)
        self._slots: queue.Queue[int] = queue.Queue()
        for k in range(max_shells):
            self._slots.put(k)
        self.episodes: list[_Episode] = []
        self.counters = Counters(COUNTERS)

    # -- shells -----------------------------------------------------------------------------------

    def _stop_shell(self, ep: _Episode) -> None:
        """Close the episode's live shell (its sandbox and every process in it), keep the slot."""
        if ep.session is not None:
            ep.session.close()
            ep.session = None
            ep.shell_seconds += time.monotonic() - ep.started

    def free(self, ep: _Episode) -> None:
        """Close the episode's shell and give its slot back."""
        self._stop_shell(ep)
        if ep.slot is not None:
            self._slots.put(ep.slot)
            ep.slot = None

    def _left_s(self, ep: _Episode) -> float:
        live = time.monotonic() - ep.started if ep.session is not None else 0.0
        return self.episode_timeout_s - ep.shell_seconds - live

    def _start_shell(self, ep: _Episode) -> None:
        """A new shell for the episode: init script, then its earlier commands replayed.

        Raises:
            _EpisodeOver: no shell time left, or a replayed command did not come back.
            RuntimeError: no free slot, or the init script failed (an environment error).
        """
        left = self._left_s(ep)
        if left <= 0:
            raise _EpisodeOver("shell time spent")
        if ep.slot is None:
            try:
                ep.slot = self._slots.get_nowait()
            except queue.Empty:
                raise RuntimeError(f"no free shell slot (all env.max_shells={self.max_shells} in use)") from None
        output_bytes = 4 * (self.max_output_chars + 1)
        started = time.monotonic()  # the shell's start (launcher, bash, its first commands) is shell time too
        ep.session = ShellSession(
            self.uid_base + ep.slot,
            self.limits,
            output_bytes,
            left,
            self.tmp_dir,
            init=ep.entry["init"],
            init_timeout_s=min(self.init_timeout_s, left),
            root_uids=self.root_uid_base + 65536 * ep.slot,
        )
        ep.started = started
        check_init(ep.session.init_result, "the task's init script")
        self._run_start(ep)
        if ep.commands:
            self.counters.add("restarts", 1)
        for command in ep.commands:
            if not ep.session.run(command, min(self.command_timeout_s, max(self._left_s(ep), 0.001))).finished:
                raise _EpisodeOver("a replayed command did not come back")

    def _run_start(self, ep: _Episode) -> None:
        """The task's ``start`` command (a background program, a variable), run in the agent's shell
        after the init, output unseen; it lives as long as the shell (the sandbox's PID namespace
        ends with it).

        Raises:
            RuntimeError: it did not come back or exited non-zero (an environment error).
        """
        start = ep.entry.get("start") or ""
        if start.strip():
            result = ep.session.run(start, min(self.init_timeout_s, max(self._left_s(ep), 0.001)))
            check_init(result, "the task's start command")

    def _run(self, ep: _Episode, command: str) -> tuple[str, str]:
        """Run one command: (observation, kind). Raises :class:`_EpisodeOver` when the shell time is
        spent."""
        if ep.session is None:
            self._start_shell(ep)
        result: CommandResult = ep.session.run(command, min(self.command_timeout_s, max(self._left_s(ep), 0.001)))
        self.counters.add("commands", 1)
        self.counters.add("command_errors", result.exit_code != 0)
        self.counters.add("timeouts", result.timed_out)
        text = result.output.rstrip("\n")
        notes = []
        if result.truncated or len(text) > self.max_output_chars:
            text = text[: self.max_output_chars]
            notes.append(cut_note(self.max_output_chars))
        if result.finished:
            ep.commands.append(command)
        else:
            self._stop_shell(ep)
            if self._left_s(ep) <= 0:
                raise _EpisodeOver("shell time spent")
            notes.append(timeout_note(self.command_timeout_s) if result.timed_out else ENDED_NOTE)
        kind = "run" if result.exit_code == 0 else "run_error"
        return output_observation(text, result.exit_code, "\n".join(notes)), kind

    # -- episodes ---------------------------------------------------------------------------------

    @staticmethod
    def _open(item: PromptItem) -> _Episode:
        """One episode's state from ``item.entry``; a bad entry is remembered, not raised (it fails
        at the first step; no shell starts before an episode's first command)."""
        try:
            check_task(item.entry)
        except ValueError as err:
            return _Episode(item.entry, failure=f"bad task entry: {err}")
        return _Episode(item.entry)

    def act(self, ep: _Episode, text: str) -> tuple[str, float, bool, str, bool]:
        """One action: (observation, reward, done, kind, invalid)."""
        if ep.failure is not None:
            raise RuntimeError(ep.failure)
        ep.turns += 1
        action = parse_action(text, self.max_action_chars)
        if action.kind == "answer":
            if ep.entry["check"] == STATE:
                return "", self._state_reward(ep, action.text), True, "answer", False
            reward = float(answers_match(action.text, ep.entry["label"], ep.entry["check"]))
            return "", reward, True, "answer", False
        if action.kind == "invalid":
            self.counters.add("invalid_actions", 1)
            observation, kind = action.text, "invalid"
        else:
            try:
                observation, kind = self._run(ep, action.text)
            except _EpisodeOver as over:
                log.info("shell episode ended: %s", over)
                return "", 0.0, True, "run_error", False
        return self.turn_outcome(ep, observation, kind)

    def _state_reward(self, ep: _Episode, answer: str) -> float:
        """1.0 when the task's state check chain (``entry["state_check"]``) passes on the episode's
        final state with ``answer``, else 0.0: every script run, each exit code 0
        (:meth:`~mintrl.env.shell.session.ShellSession.run_checks`, each script limited to
        ``init_timeout_s``). A shell killed by a timeout is rebuilt first by replay (its state is the
        episode's); where no shell time is left or a replay fails, 0.0. The shell ends with the check."""
        scripts = [(language, text) for language, text in ep.entry["state_check"]]
        try:
            if ep.session is None:
                self._start_shell(ep)
            results = ep.session.run_checks(scripts, answer, self.init_timeout_s)
        except _EpisodeOver as over:
            log.info("shell episode ended before its state check: %s", over)
            return 0.0
        finally:
            self._stop_shell(ep)
        return float(len(results) == len(scripts) and all(r.exit_code == 0 for r in results))

    def live_shells(self) -> int:
        """Shells alive now (processes)."""
        return sum(ep.session is not None for ep in self.episodes)
