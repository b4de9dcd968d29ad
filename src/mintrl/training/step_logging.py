"""Per-step scalars written straight to the run's loggers, only the keys present at that step, over
all data-parallel ranks.

``LightningModule.log_dict(on_step=True)`` keeps every key it has seen in the epoch's result
collection and writes each one again at every later step with its last value: a quantity undefined
at a step (the semi-on-policy reward after the intervention phase, an action kind no episode used)
would be logged as a copy of an older step's value. :func:`log_step` writes to the loggers
directly, at the step Lightning itself uses for its training-step logs, so an omitted key has no
point at that step (TensorBoard draws the line between the steps that have one).

With several data-parallel ranks each rank computes its scalars on its own rollouts; :func:`log_step`
combines them into the values of all ranks' rollouts together (:func:`combine_ranks`) before rank 0
writes them, with the reduction each key's kind needs (:func:`reduction`): counts are summed, means
are weighted by their denominators (the rollouts, tokens or rows each rank's mean is over).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import lightning.pytorch as L
import torch.distributed as dist

# counts per rollout batch (rollouts, verdicts, calls, programs), and each rank's share of a loss
# normalised by counts of all ranks: the all-rank value is the sum
SUMMED = frozenset(
    {
        "train/loss",
        "reward/missing",
        "reward/failed",
        "reward/timeout",
        "rollout/truncated",
        "judge/keep",
        "judge/revise",
        "judge/unparseable",
        "judge/failed",
        "judge/early_cuts",
        "judge/errors",
        "judge/garbage",
        "judge/timeouts",
        "judge/sql_errors",
        "judge/shell_errors",
        "judge/first_error_reviewed",
        "judge/first_error_found",
        "objective/rows_without_signal",
        "objective/truncated_masked",
        "objective/first_error_rows",
        "objective/first_error_unmarked_rows",
        "guide/rollouts",
        "guide/prompts",
        "guide/no_solution",
        "guide/empty_prefix",
        "allocation/budget_used",
        "allocation/branches",
        "allocation/traces",
        "allocation/top_up",
        "allocation/replay_mismatches",
        "episode/invalid_actions",
        "episode/env_errors",
        "episode/env_seconds",
        "perf/gen_tokens_per_s",  # every rank generates at once: the job's throughput
        "perf/prefix_reused_tokens",
        "rollout/dropped_stale",  # each rank's run total: the job's
    }
)
SUMMED_PREFIXES = ("allocation/action_", "episode/actions_", "env/", "code/")
# wall times of work the ranks do at once, and counts every rank makes alike (its own engine's weight pushes)
MAXIMUM = frozenset(
    {"perf/gen_seconds", "perf/update_seconds", "perf/step_seconds", "perf/weight_syncs", "perf/weight_sync_seconds"}
)
# equal on every rank by construction (reduced gradients, all-rank skip decisions, the joint adaptive stop)
SHARED = frozenset(
    {
        "train/grad_norm",
        "train/skipped_batches",
        "train/skipped_updates",
        "rollout/generated_at_step",
        "train/staleness",
        "rollout/intervention_phase",
        "rollout/gap_smoothed",
        "rollout/adaptive_stop",
    }
)
# means over policy-sampled tokens (module.accumulate)
TOKEN_MEANS = (
    "train/policy_entropy",
    "train/sampler_logprob_gap",
    "train/sampler_mismatch_abs",
    "train/sampler_mismatch_kl",
    "train/proximal_shift_abs",
    "train/proximal_shift_kl",
)
DEFAULT = "*"  # the weights key of a mean without its own denominator


def reduction(key: str) -> str:
    """How ``key``'s per-rank values combine into the all-rank value: ``"sum"`` (counts),
    ``"max"`` (wall times; maxima, keys ending in ``/max`` or ``_max``), ``"shared"`` (equal on every rank: rank 0's), ``"gap"`` (``reward/gap``,
    recomputed as ``reward/semi - reward/control`` from the combined rewards) or ``"mean"``
    (weighted by each rank's denominator; every key not listed)."""
    if key in SUMMED or key.startswith(SUMMED_PREFIXES):
        return "sum"
    if key in MAXIMUM or key.endswith(("/max", "_max")):  # wall times; maxima (is/token/max, objective/is_weight_max)
        return "max"
    if key in SHARED:
        return "shared"
    if key == "reward/gap":
        return "gap"
    return "mean"


def combine_parts(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One rank's value of every key from its parts (the micro-batches of an update, the updates of a
    step), in order: the largest for a maximum (:func:`reduction` ``"max"``), else the mean over the parts
    that logged the key (a part without policy tokens logs no importance weight and does not pull the
    mean towards 0), e.g. ``combine_parts([{"a": 1.0, "w_max": 3.0}, {"w_max": 2.0}]) == {"a": 1.0, "w_max": 3.0}``."""
    values: dict[str, list[float]] = {}
    for part in parts:
        for key, value in part.items():
            values.setdefault(key, []).append(float(value))
    return {key: max(vs) if reduction(key) == "max" else sum(vs) / len(vs) for key, vs in values.items()}


def combine_ranks(parts: Sequence[tuple[Mapping[str, float], Mapping[str, float]]]) -> dict[str, float]:
    """The all-rank value of every key some rank logged, from each rank's ``(metrics, weights)``
    in rank order (see :func:`reduction`). A mean's weight is ``weights[key]``, else
    ``weights["*"]``, else 1; where every rank's weight is 0 the ranks' values are averaged.
    ``reward/gap`` is kept only where the combined ``reward/semi`` and ``reward/control`` exist.
    Keys come out sorted."""
    keys = sorted({k for metrics, _ in parts for k in metrics})
    out: dict[str, float] = {}
    for key in keys:
        kind = reduction(key)
        have = [(float(m[key]), w) for m, w in parts if key in m]
        if kind == "gap":
            continue
        if kind == "sum":
            out[key] = sum(v for v, _ in have)
        elif kind == "max":
            out[key] = max(v for v, _ in have)
        elif kind == "shared":
            out[key] = have[0][0]
        else:
            weights = [float(w.get(key, w.get(DEFAULT, 1.0))) for _, w in have]
            total = sum(weights)
            if total > 0:
                out[key] = sum(v * w for (v, _), w in zip(have, weights)) / total
            else:
                out[key] = sum(v for v, _ in have) / len(have)
    if any("reward/gap" in m for m, _ in parts) and "reward/semi" in out and "reward/control" in out:
        out["reward/gap"] = out["reward/semi"] - out["reward/control"]
    return out


def step_weights(batch) -> dict[str, float]:
    """The weights :func:`combine_ranks` gives this rank's training-step scalars: the rollout
    statistics' own denominators (``batch.stat_weights``), policy-sampled tokens for the
    trainer's per-token means, the batch's rows for every other mean (objective diagnostics)."""
    tokens = float(batch.policy_mask.sum())
    return {DEFAULT: float(len(batch)), **{k: tokens for k in TOKEN_MEANS}, **batch.stat_weights}


def logging_step(module: L.LightningModule) -> int:
    """The step index Lightning gives the current training step's logged metrics (optimizer
    steps taken before this batch: the fit loop's ``_batches_that_stepped``)."""
    return int(module.trainer.fit_loop.epoch_loop._batches_that_stepped)


def log_step(
    module: L.LightningModule, metrics: Mapping[str, float], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Write ``metrics`` (name -> float) to every logger of ``module``'s trainer at
    :func:`logging_step`; loggers write on global rank 0 only (Lightning's ``rank_zero_only``).

    With several data-parallel ranks the metrics written (and returned) are those of all ranks
    (:func:`combine_ranks` of every rank's ``metrics`` and ``weights``, :func:`step_weights`): an
    ``all_gather_object`` collective, so every rank calls this at the same points, in the same order.
    With one rank ``metrics`` are written as they are.

    Returns:
        the metrics written (name -> float).
    """
    world = module.trainer.world_size
    metrics = {k: float(v) for k, v in metrics.items()}
    if world > 1 and dist.is_available() and dist.is_initialized():
        parts: list = [None] * dist.get_world_size()
        dist.all_gather_object(parts, (metrics, dict(weights or {})))
        metrics = combine_ranks(parts)
    if not metrics:
        return metrics
    step = logging_step(module)
    for logger in module.loggers:
        logger.log_metrics(dict(metrics), step=step)
    return metrics
