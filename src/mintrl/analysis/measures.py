"""The numbers of one finished run, read from its logged scalars and its composed config: held-out pass@1
(final value, curve, area), off-policy token fraction, policy entropy, the reward gap's narrowing, the size
of the held-out split and the budget it ran with."""

from __future__ import annotations

from typing import Sequence

from mintrl.analysis.runs import Job, config_value
from mintrl.analysis.stats import area_under_curve
from mintrl.analysis.tensorboard import Scalars, tag_values

OFFPOLICY_TAG = "rollout/offpolicy_frac"
PASS_AT_1_TAGS = ("val/pass@1", "val/reward")  # preferred first
GAP_TAG = "reward/gap"
ENTROPY_TAG = "train/policy_entropy"


def mean_offpolicy_frac(scalars: Scalars | None) -> float | None:
    """Off-policy token fraction (0-1, tokens written by the judge-intervention policy over all rollout tokens)
    averaged over the logged training steps; None without ``rollout/offpolicy_frac``."""
    points = (scalars or {}).get(OFFPOLICY_TAG)
    if not points:
        return None
    return sum(v for _, v in points) / len(points)


def pass_at_1_tag(scalars: Scalars | None) -> str | None:
    """``val/pass@1`` when logged, else ``val/reward`` (mean reward = pass@1 for 0/1 rewards), else None."""
    return next((t for t in PASS_AT_1_TAGS if (scalars or {}).get(t)), None)


def final_pass_at_1(scalars: Scalars | None) -> float | None:
    """Held-out pass@1 (0-1) at the last logged validation step (:func:`pass_at_1_tag`); None without one."""
    tag = pass_at_1_tag(scalars)
    return scalars[tag][-1][1] if tag else None


def pass_at_1_curve(scalars: Scalars | None) -> list[tuple[int, float]]:
    """The held-out curve ``[(step, pass@1), ...]`` (steps in optimizer steps, pass@1 0-1) of
    :func:`pass_at_1_tag`, sorted by step; a step logged twice (a resumed run) keeps its last value. Empty
    without a pass@1 tag."""
    tag = pass_at_1_tag(scalars)
    if tag is None:
        return []
    return sorted(dict(scalars[tag]).items())


def final_pass(job: Job) -> float | None:
    """Final held-out pass@1 (0-1) of a job: the last point of its held-out curve; None without one."""
    curve = pass_at_1_curve(job.scalars)
    return curve[-1][1] if curve else None


def job_area(job: Job) -> float | None:
    """Area under the job's held-out curve over its step span (mean pass@1 over training, 0-1;
    :func:`mintrl.analysis.stats.area_under_curve`)."""
    return area_under_curve(pass_at_1_curve(job.scalars))


def last_entropy(job: Job) -> float | None:
    """The last logged ``train/policy_entropy`` (nats per policy token); None when not logged."""
    values = tag_values(job.scalars, ENTROPY_TAG)
    return values[-1] if values else None


def gap_narrowing(values: Sequence[float]) -> float | None:
    """How much the semi-on-policy minus control reward gap narrowed over one run: the mean of the first third
    of the per-step gaps minus the mean of the last third (thirds of ``len // 3`` steps, at least one step
    each), in reward units (positive: the gap narrowed).

    Args:
        values: ``reward/gap`` per training step, in step order.

    Returns:
        The narrowing; None with fewer than 2 steps (one step has no trend).
    """
    if len(values) < 2:
        return None
    k = max(1, len(values) // 3)
    return sum(values[:k]) / k - sum(values[-k:]) / k


def job_gap_narrowing(job: Job) -> float | None:
    """:func:`gap_narrowing` of the job's ``reward/gap``."""
    return gap_narrowing(tag_values(job.scalars, GAP_TAG))


def heldout_size(config: dict | None) -> int | None:
    """Held-out rollouts per validation, N = ``data.prompts.val_size`` (prompts) x ``data.val_samples_per_prompt``
    (samples per prompt), from a job's composed (unresolved) ``.hydra/config.yaml``; None when either is missing
    or not a literal integer (an interpolation)."""
    prompts = config_value(config, "data.prompts.val_size")
    samples = config_value(config, "data.val_samples_per_prompt")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (prompts, samples)):
        return None
    return prompts * samples


def budget(job: Job) -> dict:
    """The budget a job ran with, from its composed ``.hydra/config.yaml``: ``max_steps`` (optimizer steps),
    ``prompts_per_step``, ``rollouts_per_prompt`` (n_control + n_semi), ``max_response_tokens`` (tokens) and
    ``task`` (the data's ``task_kwargs``); None where missing or not a literal."""

    def num(path):
        v = config_value(job.config, path)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    nc, ns = num("rollout.n_control"), num("rollout.n_semi")
    return {
        "max_steps": num("trainer.max_steps"),
        "prompts_per_step": num("data.prompts_per_step"),
        "rollouts_per_prompt": None if nc is None or ns is None else nc + ns,
        "max_response_tokens": num("rollout.max_response_tokens"),
        "task": config_value(job.config, "data.prompts.task_kwargs"),
    }
