"""Reward-variance gain of a branch (RAIL eq. 2)."""

from __future__ import annotations

import math
from typing import Sequence


def reward_variance(rewards: Sequence[float]) -> float:
    """Population variance ``I(Y) = 1/|Y| sum_i (R_i - mean R)^2`` of a group's rewards (RAIL eq. 2);
    NaN rewards (no reward) are left out; 0.0 for fewer than one valid reward."""
    values = [r for r in rewards if not math.isnan(r)]
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return sum((r - mean) ** 2 for r in values) / len(values)


def realized_gain(before: Sequence[float], branch: Sequence[float]) -> float:
    """``y = I(Y_b) - I(Y_0)``: the variance of the group with the branch's rollouts added minus the
    variance of the group before the branch (RAIL eq. 2 and section 3.1's traces)."""
    return reward_variance([*before, *branch]) - reward_variance(before)
