"""The environment contract: many independent episodes served at once.

An environment holds one private state per episode (e.g. one in-memory SQLite database). The
multi-turn rollout (:mod:`mintrl.rollout.episodes`) calls

    observations = env.reset(items)               # one first observation text per episode
    result = env.step(episodes, actions)          # one action text per listed episode
    env.close()

``reset`` starts ``len(items)`` episodes, numbered ``0 .. len(items) - 1`` in order; ``step`` acts
on the listed still-open episodes only (finished ones may not act again). Each item is a
:class:`mintrl.data.base.PromptItem` whose ``entry`` holds the task as the environment needs it
(built by the environment's prompt source). Episodes are independent
and deterministic given their task and their actions, so a state is rebuilt by replaying the actions
in a fresh environment (:func:`replay`; RAIL's branches from a turn rely on it).

Bad actions (unparseable, unknown tool, too long) never raise: the episode goes on and the
observation tells the agent what was wrong (``StepResult.invalid``). An error of the environment
itself ends that episode with no reward (``StepResult.error``), never the run.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from mintrl.data.base import PromptItem

log = logging.getLogger(__name__)

# one action's outcome: (observation, reward, done, action kind, invalid), as in StepResult's columns
ActionOutcome = tuple[str, float, bool, str, bool]


@dataclass
class StepResult:
    """What one ``Environment.step`` call returns, one entry per acting episode (in call order).

    Attributes:
        observations: the observation text shown to the agent as the next user turn ("" when done
            and nothing is to be shown).
        rewards: reward in [0, 1] of each episode that ended at this step (its final reward), 0.0
            for an episode that goes on, NaN for an episode ended by an environment error (no reward).
        done: True where the episode ended (final answer committed, error, or the environment's own limit).
        action_kinds: the parsed kind of each action (e.g. ``"query"``, ``"answer"``, ``"invalid"``).
        invalid: True where the action was unusable (unparseable, unknown tool, too long): the
            observation says why, the episode goes on.
        error: True where the environment failed (the episode ends with NaN reward).
        seconds: wall time of the whole call (seconds).
    """

    observations: list[str]
    rewards: list[float]
    done: list[bool]
    action_kinds: list[str]
    invalid: list[bool]
    error: list[bool]
    seconds: float = 0.0


class Environment(ABC):
    """Many episodes at once (``env=`` config group; see module docstring).

    Attributes:
        thread_safe: class-level capability; True when ``step`` may be called from several threads
            at once on disjoint episodes (the multi-turn rollout then steps slices of a turn in
            parallel, ``rollout.env_workers``).
        action_kinds: class-level; every ``StepResult.action_kinds`` value the environment can
            return (the rollout logs ``episode/actions_<kind>`` for each, 0 on steps without it).
    """

    thread_safe: bool = False
    action_kinds: tuple[str, ...] = ()

    @abstractmethod
    def reset(self, items: Sequence[PromptItem]) -> list[str]:
        """Start one episode per item (previous episodes are closed): the first observation of
        each ("" when the instruction says everything)."""

    @abstractmethod
    def step(self, episodes: Sequence[int], actions: Sequence[str]) -> StepResult:
        """Apply ``actions[i]`` to episode ``episodes[i]``.

        Raises:
            ValueError: an unknown or finished episode index, or lengths that differ.
        """

    def score_final(self, episodes: Sequence[int]) -> list[float]:
        """Reward of episodes that ran out of turns or tokens without ending (default 0.0 each;
        an environment that scores the final state, e.g. a table after UPDATEs, overrides it)."""
        return [0.0] * len(episodes)

    def metrics(self) -> dict[str, float]:
        """Counters since the last call (e.g. ``env/timeouts``), logged with the step's rollout
        statistics (default none)."""
        return {}

    def close(self) -> None:
        """Free every episode's state."""


class Counters:
    """An environment's event counters (counts, seconds), safe to add to from several threads
    (steps of disjoint episodes); :meth:`take` reads them for ``Environment.metrics`` and resets."""

    def __init__(self, names: Iterable[str]):
        self.names = tuple(names)
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.names, 0.0)

    def add(self, name: str, value: float) -> None:
        """Add ``value`` to counter ``name`` (KeyError for a name not declared)."""
        with self._lock:
            self._values[name] += value

    def take(self) -> dict[str, float]:
        """``{"env/<name>": value}`` since the last call, then every counter back to 0."""
        with self._lock:
            out = {f"env/{k}": float(v) for k, v in self._values.items()}
            self._values = dict.fromkeys(self.names, 0.0)
        return out


def check_episodes(episodes: Sequence[int], opened: Sequence) -> None:
    """Check the episode indices of one ``step`` or ``score_final`` call against the open
    episodes ``opened`` (objects with a ``done`` flag).

    Raises:
        ValueError: an index that is not an int in ``0 .. len(opened) - 1``, a finished episode, or
            an index listed twice.
    """
    seen = set()
    for e in episodes:
        if not isinstance(e, int) or isinstance(e, bool) or not 0 <= e < len(opened):
            raise ValueError(f"episode index {e!r} is unknown (episodes 0..{len(opened) - 1})")
        if opened[e].done:
            raise ValueError(f"episode {e} has finished and cannot act again")
        if e in seen:
            raise ValueError(f"episode {e} is listed twice in one call")
        seen.add(e)


def check_step(episodes: Sequence[int], actions: Sequence[str], opened: Sequence) -> None:
    """Check the arguments of one ``step`` call: as many actions as episodes, and the indices
    (:func:`check_episodes`).

    Raises:
        ValueError: lengths that differ, an unknown, repeated or finished episode index.
    """
    if len(episodes) != len(actions):
        raise ValueError(f"step got {len(episodes)} episodes and {len(actions)} actions")
    check_episodes(episodes, opened)


def step_result(
    name: str,
    episodes: Sequence[int],
    outcomes: Sequence[ActionOutcome | Exception],
    opened: Sequence,
    counters: Counters,
    start: float,
    finish: Callable[[object], None] | None = None,
) -> StepResult:
    """The :class:`StepResult` of one ``step`` call from each acting episode's outcome.

    An outcome that is an exception (the environment failed on that episode) ends the episode with
    reward NaN and action kind ``error``; it is logged with the environment's ``name`` and counted in
    ``errors``. An episode that is done gets ``done = True`` and is passed to ``finish`` (free its
    state). The call's wall time (``time.perf_counter()`` now minus ``start``, seconds) is the result's
    ``seconds`` and is added to the ``seconds`` counter.

    Args:
        name: the environment's name, for the log (``shell``, ``sql``, ``python_tool``).
        episodes: the acting episodes' indices into ``opened`` (checked by :func:`check_step`).
        outcomes: one :data:`ActionOutcome` or exception per acting episode, in the same order.
        opened: the environment's episodes (objects with a ``done`` flag).
        counters: the environment's counters; must declare ``errors`` and ``seconds``.
        start: ``time.perf_counter()`` when the call began (seconds).
        finish: called with each episode that ended (None: nothing to free).
    """
    out = StepResult([], [], [], [], [], [])
    for e, outcome in zip(episodes, outcomes):
        error = isinstance(outcome, Exception)
        if error:
            log.warning("%s episode %d failed: %s: %s", name, e, type(outcome).__name__, outcome)
            counters.add("errors", 1)
            outcome = ("", math.nan, True, "error", False)
        observation, reward, done, kind, invalid = outcome
        if done:
            opened[e].done = True
            if finish is not None:
                finish(opened[e])
        for column, value in zip(
            (out.observations, out.rewards, out.done, out.action_kinds, out.invalid, out.error),
            (observation, reward, done, kind, invalid, error),
        ):
            column.append(value)
    out.seconds = time.perf_counter() - start
    counters.add("seconds", out.seconds)
    return out


class EpisodicEnvironment(Environment):
    """An environment that keeps one state object per episode (``env=python_tool``, ``env=shell``,
    ``env=sql``): what their ``reset``, ``score_final``, ``close`` and ``metrics`` share.

    A subclass names itself (:attr:`name`, for the log), keeps its open episodes in ``self.episodes``
    and its counters in ``self.counters`` (declaring ``errors`` and ``seconds``), sets
    :attr:`max_turns`, and provides :meth:`_open` (an episode object with the fields ``done``,
    ``failure`` and ``turns``), optionally :meth:`free` and :meth:`final_reward`. A bad task entry
    never raises at ``reset``: ``_open`` records it as the episode's ``failure``, which fails the
    episode at its first step (reward NaN, ``error``) or in :meth:`score_final`.

    Attributes:
        name: the environment's name in the log (``python_tool``, ``shell``, ``SQL``).
        max_turns: actions after which an episode ends, scored by :meth:`final_reward` (actions),
            or None for no limit of its own (the rollout's turn limit applies).
    """

    name: str = "environment"
    max_turns: int | None = None
    episodes: list
    counters: Counters

    @abstractmethod
    def _open(self, item: PromptItem):
        """One episode's state for ``item``; a bad entry is remembered as its ``failure``, not raised."""

    def free(self, episode) -> None:
        """Free a finished episode's state (default: nothing to free)."""

    def final_reward(self, episode) -> float:
        """The reward of an open episode that ends without an answer (default 0.0; an environment
        that scores the final state, e.g. a table after UPDATEs, overrides it). May raise: the
        episode then ends with reward NaN."""
        return 0.0

    def reset(self, items: Sequence[PromptItem]) -> list[str]:
        """Start one episode per item (previous episodes are closed); the time counts in ``seconds``.

        Returns:
            One "" per item: the instruction (the prompt) already states the task and the protocol.
        """
        start = time.perf_counter()
        self.close()
        self.episodes = [self._open(item) for item in items]
        self.counters.add("seconds", time.perf_counter() - start)
        return [""] * len(items)

    def turn_outcome(self, episode, observation: str, kind: str) -> ActionOutcome:
        """The outcome of an action that did not answer: ``(observation, 0.0, False, kind, invalid)``
        (``invalid``: ``kind == "invalid"``), or, when it used the last of :attr:`max_turns`, the end
        of the episode with no observation and its :meth:`final_reward`."""
        invalid = kind == "invalid"
        if self.max_turns is not None and episode.turns >= self.max_turns:
            return "", self.final_reward(episode), True, kind, invalid
        return observation, 0.0, False, kind, invalid

    def score_final(self, episodes: Sequence[int]) -> list[float]:
        """End episodes that ran out of turns or tokens without an answer: each gets its
        :meth:`final_reward`, or NaN when its task entry is bad or the scoring raised (logged and
        counted in ``env/errors``), and is freed (:meth:`free`); the time counts in ``seconds``.

        Raises:
            ValueError: an unknown, repeated or finished episode index.
        """
        start = time.perf_counter()
        check_episodes(episodes, self.episodes)
        rewards = []
        for e in episodes:
            ep = self.episodes[e]
            try:
                if ep.failure is not None:
                    raise RuntimeError(ep.failure)
                rewards.append(self.final_reward(ep))
            except Exception as err:  # noqa: BLE001 - one episode's failure never stops the run
                log.warning("%s episode %d failed: %s: %s", self.name, e, type(err).__name__, err)
                self.counters.add("errors", 1)
                rewards.append(math.nan)
            ep.done = True
            self.free(ep)
        self.counters.add("seconds", time.perf_counter() - start)
        return rewards

    def close(self) -> None:
        """Free every episode's state (:meth:`free`) and forget the episodes."""
        for ep in self.episodes:
            self.free(ep)
        self.episodes = []

    def metrics(self) -> dict[str, float]:
        """The counters since the last call, ``env/<name>`` (counts; ``env/seconds`` in seconds),
        then every counter back to 0 (:meth:`Counters.take`)."""
        return self.counters.take()


class SerialEnvironment(EpisodicEnvironment):
    """An environment that applies a step's actions one episode at a time (``env=shell``, ``env=sql``).

    A subclass provides what :class:`EpisodicEnvironment` asks and :meth:`act`; :meth:`step` is
    shared: an exception in ``act`` ends that episode with reward NaN (:func:`step_result`), never the call.
    """

    @abstractmethod
    def act(self, episode, text: str) -> ActionOutcome:
        """Apply one action to one open episode."""

    def step(self, episodes: Sequence[int], actions: Sequence[str]) -> StepResult:
        """Apply ``actions[i]`` to episode ``episodes[i]`` through :meth:`act`, in call order; each
        episode that ends is passed to :meth:`free`.

        Raises:
            ValueError: lengths that differ, an unknown, repeated or finished episode index.
        """
        start = time.perf_counter()
        check_step(episodes, actions, self.episodes)
        outcomes: list[ActionOutcome | Exception] = []
        for e, text in zip(episodes, actions):
            try:
                outcomes.append(self.act(self.episodes[e], text))
            except Exception as err:  # noqa: BLE001 - one episode's failure never stops the run
                outcomes.append(err)
        return step_result(self.name, episodes, outcomes, self.episodes, self.counters, start, self.free)


def replay(env: Environment, item: PromptItem, actions: Sequence[str]) -> tuple[list[str], StepResult | None]:
    """Rebuild an episode by replaying its actions in ``env`` (reset to this one item).

    Returns:
        The observations in order (first observation, then one per action) and the last
        :class:`StepResult` (None when ``actions`` is empty).
    """
    observations = env.reset([item])
    last = None
    for action in actions:
        last = env.step([0], [action])
        observations.append(last.observations[0])
        if last.done[0]:
            break
    return observations, last
