"""The reward contract: a batched call, checked and normalised in one place."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Callable, Sequence


class Reward(ABC):
    """A verifiable reward over a batch of decoded responses (``reward=`` config group).

    ``__call__(responses, items)`` returns one value per response: a float (usually in [0, 1]) or
    None when no reward could be computed (that rollout then gets no training signal).

    Attributes:
        main_thread_only: capability a subclass declares (default False); True for a reward that
            must run in the calling thread (it times out by itself with signals, as ``math-verify``
            does): the rollout's fault guard (:mod:`mintrl.rollout.guards`) reads it as
            ``reward.main_thread_only``, runs it without a thread time limit and hands it the limit
            in ``time_limit_s``.
        time_limit_s: limit of one call (seconds; None: none) that a ``main_thread_only`` reward
            keeps by itself: rows it cannot grade in time get no reward (NaN) and are counted in
            its ``reward/timeout``. The rollout's fault guard sets it from
            ``rollout.reward_timeout_s`` before each call; other rewards ignore it.
        handles_code: True for a reward of code problems (unit tests in the sandbox); a config
            that pairs code prompts with another reward, or the reverse, is refused.
    """

    main_thread_only: bool = False
    time_limit_s: float | None = None
    handles_code: bool = False

    @abstractmethod
    def __call__(self, responses: Sequence[str], items: Sequence) -> Sequence[float | None]:
        """One value per ``(response, item)`` pair."""

    def metrics(self) -> dict[str, float]:
        """Counters since the last call (e.g. ``code/timeout``), logged with the rollout statistics."""
        return {}


class FunctionReward(Reward):
    """A plain ``(responses, items) -> values`` function as a :class:`Reward` (no metrics; the
    base's capabilities: not ``main_thread_only``, not ``handles_code``)."""

    def __init__(self, fn: Callable[[Sequence[str], Sequence], Sequence[float | None]]):
        if not callable(fn):
            raise TypeError(f"reward must be a Reward or a callable, got {type(fn).__name__}")
        self.fn = fn

    def __call__(self, responses: Sequence[str], items: Sequence) -> Sequence[float | None]:
        return self.fn(responses, items)


def as_reward(reward: Reward | Callable, field: str = "reward") -> Reward:
    """``reward`` as a :class:`Reward`: itself when it is one, a plain ``(responses, items) ->
    values`` function wrapped in :class:`FunctionReward`.

    Raises:
        TypeError: anything else (``"<field> must be a mintrl.reward.base.Reward or a function
            (responses, items) -> values, got <type>"``).
    """
    if isinstance(reward, Reward):
        return reward
    if not callable(reward):
        raise TypeError(
            f"{field} must be a mintrl.reward.base.Reward or a function (responses, items) -> values, "
            f"got {type(reward).__name__}"
        )
    return FunctionReward(reward)


def check_reward_count(values: Sequence, n: int) -> None:
    """Raise when a reward returned ``len(values) != n`` values for ``n`` responses.

    A reward must return one value per response; any other count is a configuration error (a
    scorer that ignores its batch, a wrong wrapper), never a transient fault, so it stops the run
    rather than being retried or broadcast.

    Raises:
        ValueError: ``"reward function returned {len(values)} rewards for {n} responses ..."``.
    """
    if len(values) != n:
        raise ValueError(
            f"reward function returned {len(values)} rewards for {n} responses: a reward must return one value "
            "per response (a configuration error, not a transient fault)"
        )


def score_rewards(reward: Reward, responses: Sequence[str], items: Sequence) -> list[float]:
    """Call ``reward`` on a batch and check what comes back.

    Args:
        reward: a :class:`Reward`. responses: ``N`` decoded responses. items: their ``N`` prompt items.

    Returns:
        ``N`` floats; None and NaN become NaN (no reward: excluded from the group statistics and
        from the loss, see :func:`mintrl.objective.advantages.valid_rows`).

    Raises:
        ValueError: the reward returned a different number of values than responses (both
            lengths named), or a value that is not a number (row named), or +-inf.
    """
    values = list(reward(list(responses), list(items)))
    check_reward_count(values, len(responses))
    out = []
    for i, v in enumerate(values):
        if v is None:
            out.append(math.nan)
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"reward row {i}: {v!r} is not a number") from None
        if math.isinf(f):
            raise ValueError(f"reward row {i}: infinite reward {f}")
        out.append(f)
    return out
