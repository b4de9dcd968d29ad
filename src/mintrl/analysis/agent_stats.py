"""Statistics of the agent comparison beyond Student t over seeds (:mod:`mintrl.analysis.stats`): the Wilson
interval of one run's success, the Spearman rank correlation of predicted and realised gains with its Fisher z
interval, a binned calibration of the predictions, and Welch's interval of a difference of mean gains with
decisions as the unit (scipy.stats throughout).
"""

from __future__ import annotations

import math
from typing import Sequence

from scipy.stats import binomtest, norm, spearmanr, ttest_ind

from mintrl.analysis.stats import mean_interval

Z975 = float(norm.ppf(0.975))  # 1.960: the normal 0.975 quantile
MAX_DECISIONS = 10**6  # decisions_to_clear_zero gives up above this


def wilson_interval(p: float, n: int) -> dict:
    """95% Wilson score interval of one run's held-out success ``p`` (0-1) measured on ``n`` held-out episodes:
    ``k = round(p n)`` successes, ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")`` (the interval of
    a level run with one seed, where no interval over seeds exists; episodes of one task count as independent).

    Returns:
        ``{"mean": p, "low", "high", "k", "episodes": n}`` (success units 0-1).

    Raises:
        ValueError: ``p`` outside [0, 1] or ``n`` < 1.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"wilson_interval: p must be in [0, 1], got {p}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"wilson_interval: n must be an integer >= 1 held-out episodes, got {n!r}")
    k = round(p * n)
    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return {"mean": float(p), "low": float(ci.low), "high": float(ci.high), "k": k, "episodes": n}


def _fisher(r: float) -> float:
    """atanh(r), with |r| kept below 1 so a perfect rank correlation gives a finite z."""
    return math.atanh(max(-1 + 1e-12, min(1 - 1e-12, r)))


def spearman_interval(predicted: Sequence[float], realized: Sequence[float]) -> dict | None:
    """Spearman rank correlation of predicted against realised gains (``scipy.stats.spearmanr``, average ranks
    for ties) with its 95% interval ``tanh(atanh(r) ± 1.96 se)``, ``se = sqrt((1 + r^2/2) / (n - 3))`` (Fisher z
    with the Bonett-Wright standard error for Spearman's r).

    Args:
        predicted, realized: one value per decision (reward^2, RAIL eq. 2), in the same order.

    Returns:
        ``{"n", "r", "se", "low", "high"}``; None with fewer than 4 decisions (no interval) or when either side is
        constant (r undefined).

    Raises:
        ValueError: the two sequences differ in length.
    """
    if len(predicted) != len(realized):
        raise ValueError(f"spearman_interval: {len(predicted)} predictions but {len(realized)} realised gains")
    n = len(predicted)
    if n < 4 or len(set(predicted)) < 2 or len(set(realized)) < 2:
        return None
    r = float(spearmanr(predicted, realized).statistic)
    if math.isnan(r):
        return None
    se = math.sqrt((1 + r * r / 2) / (n - 3))
    z = _fisher(r)
    return {"n": n, "r": r, "se": se, "low": math.tanh(z - Z975 * se), "high": math.tanh(z + Z975 * se)}


def decisions_to_clear_zero(r: float, max_n: int = MAX_DECISIONS) -> int | None:
    """Decisions a Spearman correlation needs for its 95% interval (:func:`spearman_interval`) to exclude 0 if r
    stayed as measured: the smallest n >= 4 with ``1.96 sqrt((1 + r^2/2) / (n - 3)) < |atanh(r)|``.

    Returns:
        That n (decisions); None for r = 0 or when it exceeds ``max_n``.
    """
    z = abs(_fisher(r))
    if z == 0:
        return None
    n = max(4, math.floor(3 + Z975**2 * (1 + r * r / 2) / z**2) + 1)
    return n if n <= max_n else None


def calibration_bins(predicted: Sequence[float], realized: Sequence[float], bins: int = 4) -> list[dict]:
    """The decisions ordered by predicted gain and cut into ``bins`` groups of near-equal size (quartiles for 4;
    the first groups take one more when the count does not divide; ties may fall on both sides of a cut).

    Args:
        predicted, realized: one value per decision (reward^2, RAIL eq. 2), in the same order.
        bins: the number of groups (fewer, none empty, with fewer decisions).

    Returns:
        Per group in increasing prediction: ``{"n", "pred_low", "pred_high", "predicted"}`` (count, the smallest,
        largest and mean predicted gain) and ``"realized"``: the :func:`mintrl.analysis.stats.mean_interval` of
        its realised gains (Student t; no interval for one decision).

    Raises:
        ValueError: the two sequences differ in length, or ``bins`` < 1.
    """
    if len(predicted) != len(realized):
        raise ValueError(f"calibration_bins: {len(predicted)} predictions but {len(realized)} realised gains")
    if bins < 1:
        raise ValueError(f"calibration_bins: bins must be >= 1, got {bins}")
    pairs = sorted(zip(map(float, predicted), map(float, realized)), key=lambda p: p[0])
    size, extra = divmod(len(pairs), bins)
    out, start = [], 0
    for i in range(bins):
        group = pairs[start : start + size + (i < extra)]
        start += len(group)
        if group:
            preds = [p for p, _ in group]
            out.append(
                {
                    "n": len(group),
                    "pred_low": preds[0],
                    "pred_high": preds[-1],
                    "predicted": sum(preds) / len(preds),
                    "realized": mean_interval([r for _, r in group]),
                }
            )
    return out


def welch_difference(a: Sequence[float], b: Sequence[float]) -> dict | None:
    """``mean(a) - mean(b)`` with Welch's 95% interval (``scipy.stats.ttest_ind(a, b, equal_var=False)
    .confidence_interval(0.95)``), each value one decision (realised gains, reward^2, RAIL eq. 2).

    Returns:
        ``{"n_a", "n_b", "mean_a", "mean_b", "mean", "se", "df", "low", "high", "half_width"}``; ``low``, ``high``
        and ``half_width`` are None when both groups have no spread (no interval); None with fewer than 2 values
        in either group.
    """
    a, b = [float(x) for x in a], [float(x) for x in b]
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
    out = {"n_a": len(a), "n_b": len(b), "mean_a": ma, "mean_b": mb, "mean": ma - mb}
    out["se"] = math.sqrt(va / len(a) + vb / len(b))
    if out["se"] == 0:
        return {**out, "df": None, "low": None, "high": None, "half_width": None}
    test = ttest_ind(a, b, equal_var=False)
    ci = test.confidence_interval(0.95)
    low, high = float(ci.low), float(ci.high)
    return {**out, "df": float(test.df), "low": low, "high": high, "half_width": (high - low) / 2}


def welch_scale(stat: dict | None) -> float | None:
    """How many times the decisions of both groups a :func:`welch_difference` needs for its interval to exclude 0
    if the means and spreads stayed as measured (normal approximation: ``(1.96 se / |mean|)^2``); None without a
    difference, a spread, or for a mean of 0."""
    if stat is None or not stat.get("se") or stat["mean"] == 0:
        return None
    return (Z975 * stat["se"] / abs(stat["mean"])) ** 2
