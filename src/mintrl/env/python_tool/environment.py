"""``env=python_tool``: an agent solves a math task, running Python in a sandbox as often as it likes
before it answers.

Each episode is one reasoning-gym task (the prompt item's ``entry``, from
:class:`~mintrl.env.python_tool.source.PythonToolPrompts`). An action
(:mod:`mintrl.env.python_tool.protocol`) is

- a ```python block: the code runs in the project's code sandbox
  (:class:`mintrl.sandbox.Sandbox`: no network, resource limits, a per-call time limit) and
  what it printed (capped), or its error, is the next observation; code that fails is a valid
  action of kind ``run_error`` (the agent learns from the error), the episode goes on. Every call
  is a fresh process; variables persist because the episode's earlier successful cells are re-run
  first (:mod:`mintrl.env.python_tool.program`);
- an ``<answer>`` tag: the episode ends with the task's own scorer on that answer
  (:class:`mintrl.reward.reasoning_gym.ReasoningGymReward`, in [0, 1]);
- anything else: ``invalid``; the observation states the protocol, the episode goes on.

An episode that reaches ``max_turns`` actions ends with reward 0.0 (:meth:`score_final`). A task
entry without a known reasoning-gym scorer fails at its first step (reward NaN, ``error``), as does
a sandbox failure or any unexpected exception inside one episode: the others go on, the run never
stops.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import reasoning_gym

from mintrl.core.checks import check_int, check_range
from mintrl.data.base import PromptItem
from mintrl.env.base import ActionOutcome, Counters, EpisodicEnvironment, StepResult, check_step, step_result
from mintrl.env.python_tool.program import program_source, result_text
from mintrl.env.python_tool.protocol import output_observation, parse_action
from mintrl.reward.reasoning_gym import ReasoningGymReward
from mintrl.sandbox import Outcome, Program, Sandbox

COUNTERS = ("tool_calls", "tool_errors", "timeouts", "invalid_actions", "errors", "seconds")


@dataclass
class _Episode:
    item: PromptItem
    failure: str | None = None  # why the episode cannot run (raised at its first step)
    done: bool = False
    turns: int = 0
    cells: list[str] = field(default_factory=list)  # code of the calls that ran to the end, in order


class PythonToolEnvironment(EpisodicEnvironment):
    """Many tool-using math episodes at once (see the module docstring). Thread-safe for disjoint
    episodes: the sandbox hands out worker slots from a thread-safe queue and runs each call in its
    own process; its one-time self-check runs under a lock, the counters under another.

    Args:
        timeout_s: wall-clock limit of one call, the re-run earlier cells included (seconds, > 0);
            the CPU-time limit is this rounded up (whole seconds, >= 1).
        max_output_chars: most characters of a call's printed text shown to the agent, and of its
            error (characters, >= 1); more is cut, with a note.
        max_action_chars: longer actions are invalid (characters, >= 1).
        max_turns: actions after which an episode ends with reward 0.0 (actions, >= 1), or None for
            no limit of its own (the rollout's turn limit applies).
        memory_mb: address-space limit of each sandboxed process (MiB, >= 1).
        processes: process/thread limit of each sandbox slot (processes, >= 1).
        workers: calls run at once by the sandbox (processes, >= 1), or None for the CPU count.
        uid_base: first unprivileged uid of the sandbox's slots (used only when running as root).

    Counters (:meth:`metrics`): ``env/tool_calls`` (code runs), ``env/tool_errors`` (runs that
    raised, timed out or crashed), ``env/timeouts`` (runs stopped at the time limit),
    ``env/invalid_actions`` (unusable actions), ``env/errors`` (episodes ended by an environment
    error) and ``env/seconds`` (wall time in reset, step and score_final, seconds).

    Raises:
        ValueError: a field out of its range (named ``env.<field>``).
    """

    name = "python_tool"
    thread_safe = True
    action_kinds = ("run", "run_error", "answer", "invalid", "error")

    def __init__(
        self,
        timeout_s: float = 2.0,
        max_output_chars: int = 300,
        max_action_chars: int = 1000,
        max_turns: int | None = None,
        memory_mb: int = 1024,
        processes: int = 16,
        workers: int | None = None,
        uid_base: int = 61000,
    ):
        check_range("env.timeout_s", timeout_s, 0.0, low_open=True)
        for name, value in (
            ("max_output_chars", max_output_chars),
            ("max_action_chars", max_action_chars),
            ("memory_mb", memory_mb),
            ("processes", processes),
        ):
            check_int(f"env.{name}", value)
        check_int("env.max_turns", max_turns, none_ok=True)
        check_int("env.workers", workers, none_ok=True)
        self.timeout_s, self.max_output_chars = float(timeout_s), max_output_chars
        self.max_action_chars, self.max_turns = max_action_chars, max_turns
        read_bytes = 4 * (max_output_chars + 1) + 4096  # UTF-8 of the kept text, the error, the harness line
        self.sandbox = Sandbox(
            workers=workers,
            timeout_s=self.timeout_s,
            cpu_s=max(1, math.ceil(self.timeout_s)),
            memory_mb=memory_mb,
            processes=processes,
            max_output_bytes=read_bytes,
            uid_base=uid_base,
        )
        self.reward = ReasoningGymReward()
        self.episodes: list[_Episode] = []
        self.counters = Counters(COUNTERS)
        self._ready = threading.Lock()

    # -- episodes ---------------------------------------------------------------------------------

    @staticmethod
    def _open(item: PromptItem) -> _Episode:
        """One episode's state; a bad entry is remembered, not raised (it fails at the first step)."""
        try:
            reasoning_gym.get_score_answer_fn(item.entry["metadata"]["source_dataset"])
        except Exception as err:  # noqa: BLE001 - an environment error never stops the run
            return _Episode(item, failure=f"bad task entry (no reasoning-gym scorer): {type(err).__name__}: {err}")
        return _Episode(item)

    def _run(self, calls: list[tuple[_Episode, str]]) -> list[tuple[str, bool] | Exception]:
        """Run each (episode, code) call in the sandbox, all at once: for each, the text it shows the
        agent and whether it ran to the end, or the exception that ends its episode (a sandbox
        failure). A call that ran to the end is added to its episode's cells."""
        try:
            with self._ready:
                self.sandbox.isolation()  # the one-time self-check (RuntimeError when no sandbox works)
            programs = [Program(program_source(ep.cells, code, self.max_output_chars), "") for ep, code in calls]
            results = self.sandbox.run(programs)
        except Exception as err:  # noqa: BLE001 - every call of this step failed
            return [err] * len(calls)
        out: list[tuple[str, bool] | Exception] = []
        for (ep, code), result in zip(calls, results):
            try:
                text = result_text(result, self.max_output_chars, self.timeout_s)
            except Exception as err:  # noqa: BLE001
                out.append(err)
                continue
            self.counters.add("tool_calls", 1)
            self.counters.add("tool_errors", result.outcome is not Outcome.PASSED)
            self.counters.add("timeouts", result.outcome is Outcome.TIMEOUT)
            if result.outcome is Outcome.PASSED:
                ep.cells.append(code)
            out.append((text, result.outcome is Outcome.PASSED))
        return out

    def step(self, episodes: Sequence[int], actions: Sequence[str]) -> StepResult:
        """Apply ``actions[i]`` to episode ``episodes[i]`` (see the module docstring); the code of
        every ``run`` action of the call runs at once (up to ``workers`` processes).

        Raises:
            ValueError: lengths that differ, an unknown, repeated or finished episode index.
        """
        start = time.perf_counter()
        check_step(episodes, actions, self.episodes)
        rows: list[ActionOutcome | Exception | None] = [None] * len(episodes)
        calls: list[tuple[int, _Episode, str]] = []
        for pos, (e, text) in enumerate(zip(episodes, actions)):
            ep = self.episodes[e]
            try:
                if ep.failure is not None:
                    raise RuntimeError(ep.failure)
                ep.turns += 1
                action = parse_action(text, self.max_action_chars)
                if action.kind == "answer":
                    reward = self.reward.score(f"<answer>{action.text}</answer>", ep.item)
                    rows[pos] = ("", reward, True, "answer", False)
                elif action.kind == "invalid":
                    self.counters.add("invalid_actions", 1)
                    rows[pos] = self.turn_outcome(ep, action.text, "invalid")
                else:
                    calls.append((pos, ep, action.text))
            except Exception as err:  # noqa: BLE001 - one episode's failure never stops the run
                rows[pos] = err
        if calls:
            ran = self._run([(ep, code) for _, ep, code in calls])
            for (pos, ep, _), got in zip(calls, ran):
                if isinstance(got, Exception):
                    rows[pos] = got
                else:
                    rows[pos] = self.turn_outcome(ep, output_observation(*got), "run" if got[1] else "run_error")
        return step_result(self.name, episodes, rows, self.episodes, self.counters, start, self.free)
