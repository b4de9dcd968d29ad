"""The reward contract: a batched call, checked and normalised in one place."""

from __future__ import annotations

import math
from typing import Protocol, Sequence


class Reward(Protocol):
    """A verifiable reward over a batch of decoded responses.

    ``__call__(responses, items)`` returns one value per response: a float (usually in [0, 1]) or
    None when no reward could be computed (that rollout then gets no training signal). A reward may
    also have ``metrics() -> dict[str, float]``: counters since the last call, logged with the
    step's rollout statistics (e.g. ``code/timeout``).
    """

    def __call__(self, responses: Sequence[str], items: Sequence) -> Sequence[float | None]: ...


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
    if len(values) != len(responses):
        raise ValueError(f"reward function returned {len(values)} rewards for {len(responses)} responses")
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
