"""Statistics over seeds: Student t intervals of a mean and of a paired difference, the verdict an interval
gives, the seeds a difference would need, and two numbers of a single run (the area under its held-out curve
and the binomial standard error of its final pass@1).

Every interval is ``mean ± t(0.975, n-1) * s / sqrt(n)`` over the ``n`` seeds' values, ``s`` their sample
standard deviation and ``t`` Student's t quantile (:func:`t_quantile_975`, ``scipy.stats.t.ppf``); one seed
gives no interval.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

from scipy.stats import t as student_t

HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
MAX_SEEDS = 1000  # seeds_needed gives up above this


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` degrees of freedom: the multiplier of a two-sided 95% interval
    (``scipy.stats.t.ppf(0.975, df)``; 12.706 for df 1, 4.303 for df 2, 1.960 in the limit).

    Raises:
        ValueError: ``df`` is not an integer >= 1 (a bool is not an integer here).
    """
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    return _t975(df)


@lru_cache(maxsize=None)
def _t975(df: int) -> float:
    return float(student_t.ppf(0.975, df))


def mean_interval(values: Sequence[float]) -> dict:
    """Mean and 95% interval over seeds of one quantity (e.g. final pass@1, 0-1).

    The interval is ``mean ± t(0.975, n-1) * s / sqrt(n)`` (:func:`t_quantile_975`), ``s`` the sample
    standard deviation (n-1 in the denominator).

    Returns:
        ``{"n", "mean", "sd", "half_width", "low", "high"}`` in the values' units; ``sd``, ``half_width``,
        ``low`` and ``high`` are None when n = 1 (no interval from one seed).

    Raises:
        ValueError: no values, or a value that is not a finite number.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_interval needs at least one value")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"mean_interval: non-finite value in {values}")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "low": None, "high": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half}


def seed_key(seed: str) -> tuple:
    """Sort key of a seed value: integer seeds numerically, then other values (``default``) alphabetically."""
    try:
        return (0, int(seed), "")
    except ValueError:
        return (1, 0, seed)


def paired_difference(a: dict[str, float], b: dict[str, float]) -> dict | None:
    """The difference ``a - b`` paired by seed: per common seed ``a[s] - b[s]``, then the mean and 95% interval
    over those seeds (:func:`mean_interval`, Student t with n-1 degrees of freedom on the per-seed differences),
    in the values' units.

    Args:
        a, b: ``{seed: value}``.

    Returns:
        The :func:`mean_interval` dict plus ``seeds`` (the common seeds, in :func:`seed_key` order) and ``diffs``
        (the per-seed differences in that order); None when no seed is common to both.
    """
    seeds = sorted(set(a) & set(b), key=seed_key)
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    return {**mean_interval(diffs), "seeds": seeds, "diffs": diffs}


def verdict(stat: dict | None) -> str:
    """:data:`HOLDS` when the 95% interval of a difference (:func:`mean_interval` dict) lies above 0,
    :data:`FAILS` when it lies below 0, :data:`UNDECIDED` when it contains or touches 0, when there is one seed
    (no interval) or no data (None)."""
    if stat is None or stat.get("half_width") is None:
        return UNDECIDED
    if stat["low"] > 0:
        return HOLDS
    if stat["high"] < 0:
        return FAILS
    return UNDECIDED


def seeds_needed(stat: dict | None, max_n: int = MAX_SEEDS) -> int | None:
    """Seeds a difference needs for its 95% interval to exclude 0 if its mean and standard deviation stayed as
    observed: the smallest n >= 2 with ``t(0.975, n-1) * sd / sqrt(n) < |mean|``.

    Args:
        stat: a :func:`mean_interval` dict (``mean``, ``sd``).
        max_n: the most seeds tried.

    Returns:
        That n; None when it cannot be estimated (no data, one seed: no sd, a mean of 0) or exceeds ``max_n``.
    """
    if stat is None or stat.get("sd") is None or stat["mean"] == 0:
        return None
    for n in range(2, max_n + 1):
        if t_quantile_975(n - 1) * stat["sd"] / math.sqrt(n) < abs(stat["mean"]):
            return n
    return None


def area_under_curve(points: Sequence[tuple[int, float]]) -> float | None:
    """Area under a held-out curve normalised by its step span: the trapezoid rule over the validation steps
    divided by ``last step - first step``, i.e. the mean pass@1 (0-1) over training (a run that learns early
    scores higher than one that reaches the same final value late).

    Args:
        points: ``[(step, pass@1), ...]`` sorted by step.

    Returns:
        The normalised area (pass@1 units); the value itself for a single point; None for no points.

    Raises:
        ValueError: the steps are not strictly increasing.
    """
    if not points:
        return None
    if len(points) == 1:
        return float(points[0][1])
    steps = [s for s, _ in points]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"area_under_curve: steps must be strictly increasing, got {steps}")
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(points, points[1:]))
    return area / (steps[-1] - steps[0])


def binomial_se(p: float, n: int) -> float:
    """Binomial standard error ``sqrt(p (1-p) / n)`` of one run's pass@1 ``p`` (0-1) measured on ``n`` held-out
    rollouts, in pass@1 units: the noise of a single run's number from the finite held-out split alone
    (rollouts of one prompt are treated as independent, so it is a lower bound when prompts differ in
    difficulty).

    Raises:
        ValueError: ``p`` outside [0, 1] or ``n`` < 1.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_se: p must be in [0, 1], got {p}")
    if n < 1:
        raise ValueError(f"binomial_se: n must be >= 1 held-out rollouts, got {n}")
    return math.sqrt(p * (1 - p) / n)
