"""The multirun summary behind ``mintrl-summary``: one row per job, and one row per setting over seeds.

For every job of a multirun (:func:`mintrl.analysis.runs.read_multirun`) it reads

* the off-policy token fraction, ``rollout/offpolicy_frac`` (fraction of rollout tokens written by the
  judge-intervention policy, 0-1) averaged over the logged training steps;
* the final held-out pass@1, the last logged ``val/pass@1`` (``val/reward`` when the run has no
  ``val/pass@1``), a fraction of correct validation rollouts, 0-1;
* its difference to the no-intervention job of the same multirun
  (:func:`mintrl.analysis.runs.is_no_intervention`), in pass@1 units (0.05 = 5 percentage points).

A job without event files is listed as missing; the other numbers of a job lacking a tag are None.

Seeds and intervals (:func:`summarize_seeds`): jobs whose overrides differ only in ``seed=...`` form one row.
Per row it reports the number of seeds, and the mean and a 95% interval over seeds
(:func:`mintrl.analysis.stats.mean_interval`) of

* the final held-out pass@1 (0-1), and
* the area under the held-out curve (:func:`mintrl.analysis.stats.area_under_curve`: trapezoid over the
  validation steps divided by the step span, so it is the mean pass@1 over training, 0-1),

and one run's binomial standard error ``sqrt(p (1-p) / N)`` of a final pass@1 ``p`` measured on ``N`` =
validation prompts x samples per prompt held-out rollouts (:func:`mintrl.analysis.measures.heldout_size`):
when it is about as wide as the seed interval, the held-out split, not the seeds, limits the comparison.
The tables are :mod:`mintrl.analysis.tables`, the figures :mod:`mintrl.analysis.plots`.

Usage::

    mintrl-summary outputs/sweep_intensity/multiruns/<date> --figure intensity.png --json rows.json
    mintrl-summary <multirun dir of seed=0,1,2 x methods> --curves curves.png --seeds-json seeds.json
    mintrl-summary <multirun dir> --baseline outputs/no_intervention/runs/<date>
"""

from __future__ import annotations

from typing import Sequence

from mintrl.analysis.measures import final_pass_at_1, heldout_size, mean_offpolicy_frac, pass_at_1_curve, pass_at_1_tag
from mintrl.analysis.runs import (
    Job,
    group_by_seed,
    is_no_intervention,
    is_seed_override,
    normalize_override,
    seed_of,
    varying_overrides,
)
from mintrl.analysis.stats import area_under_curve, binomial_se, mean_interval


def baseline_pass_at_1(overrides: Sequence[str], baselines: Sequence[tuple[Sequence[str], float]]) -> float | None:
    """Final pass@1 of the no-intervention run that a run is compared with.

    Args:
        overrides: the run's overrides.
        baselines: ``(overrides, final pass@1)`` of every no-intervention run with a pass@1.

    Returns:
        The mean final pass@1 of the baselines sharing the most overrides with the run (so in a
        sweep crossed with ``seed=0,1`` each run is compared with the baseline of its own seed;
        with a single baseline, that one); None when there is no baseline.
    """
    if not baselines:
        return None
    mine = {normalize_override(o) for o in overrides}
    shared = [len(mine & {normalize_override(o) for o in b}) for b, _ in baselines]
    best = [p for (_, p), s in zip(baselines, shared) if s == max(shared)]
    return sum(best) / len(best)


def summarize(jobs: Sequence[Job], baseline: Job | None = None) -> list[dict]:
    """One row per job.

    Args:
        jobs: the jobs of a multirun (:func:`mintrl.analysis.runs.read_multirun`).
        baseline: an explicit no-intervention run; when None, the no-intervention jobs of ``jobs``
            (:func:`mintrl.analysis.runs.is_no_intervention`) are the baselines (:func:`baseline_pass_at_1`).

    Returns:
        dicts with ``job`` (name), ``path``, ``overrides`` (all), ``varying`` (those not shared by every job),
        ``missing`` (no event files), ``no_intervention`` (bool), ``offpolicy_frac`` (0-1, mean over training
        steps), ``pass_at_1_tag``, ``final_pass_at_1`` (0-1) and ``delta_pass_at_1`` (final pass@1 minus the
        baseline's, in pass@1 units), ``area_under_curve`` (:func:`~mintrl.analysis.stats.area_under_curve` of
        the held-out curve, mean pass@1 0-1), ``heldout_n`` (held-out rollouts per validation,
        :func:`~mintrl.analysis.measures.heldout_size`) and ``binomial_se`` (one run's standard error of its
        final pass@1, :func:`~mintrl.analysis.stats.binomial_se`, pass@1 units); numbers are None where
        unavailable.
    """
    if baseline is not None:
        b = final_pass_at_1(baseline.scalars)
        baselines = [(baseline.overrides, b)] if b is not None else []
    else:
        baselines = [
            (j.overrides, p)
            for j in jobs
            if is_no_intervention(j.overrides, j.config) and (p := final_pass_at_1(j.scalars)) is not None
        ]
    rows = []
    for job, varying in zip(jobs, varying_overrides(jobs)):
        final = final_pass_at_1(job.scalars)
        base = baseline_pass_at_1(job.overrides, baselines)
        size = heldout_size(job.config)
        rows.append(
            {
                "job": job.name,
                "path": str(job.path),
                "overrides": list(job.overrides),
                "varying": varying,
                "missing": job.scalars is None,
                "no_intervention": is_no_intervention(job.overrides, job.config),
                "offpolicy_frac": mean_offpolicy_frac(job.scalars),
                "pass_at_1_tag": pass_at_1_tag(job.scalars),
                "final_pass_at_1": final,
                "delta_pass_at_1": None if final is None or base is None else final - base,
                "area_under_curve": area_under_curve(pass_at_1_curve(job.scalars)),
                "heldout_n": size,
                "binomial_se": None if final is None or size is None else binomial_se(final, size),
            }
        )
    return rows


def mean_curve(jobs: Sequence[Job]) -> list[dict]:
    """The held-out curve averaged over seeds: per validation step (optimizer steps) that any job
    logged, ``{"step", "n", "mean", "half_width", "low", "high"}`` (:func:`~mintrl.analysis.stats.mean_interval` of the
    jobs' pass@1 at that step, 0-1; no interval where only one job has the step)."""
    by_step: dict[int, list[float]] = {}
    for job in jobs:
        for step, value in pass_at_1_curve(job.scalars):
            by_step.setdefault(step, []).append(value)
    return [{"step": step, **mean_interval(values)} for step, values in sorted(by_step.items())]


def summarize_seeds(jobs: Sequence[Job]) -> list[dict]:
    """One row per setting (jobs equal apart from ``seed=...``, :func:`~mintrl.analysis.runs.group_by_seed`).

    Args:
        jobs: the jobs of a multirun (:func:`mintrl.analysis.runs.read_multirun`), e.g. ``objective=a,b seed=0,1,2``.

    Returns:
        dicts with ``jobs`` (names), ``seeds`` (the ``seed=`` values, ``"default"`` for a job without one),
        ``varying`` (the swept overrides without the seed), ``no_intervention``, ``n`` (jobs with a held-out
        curve), ``missing`` (names of jobs without one), ``final_pass_at_1`` and ``area_under_curve``
        (:func:`~mintrl.analysis.stats.mean_interval` dicts over those jobs, pass@1 units 0-1; None when n = 0),
        ``heldout_n`` (N when every job of the row has the same, else None), ``run_se`` (one run's binomial SE
        at the row's mean final pass@1 and N, :func:`~mintrl.analysis.stats.binomial_se`) and ``curve``
        (:func:`mean_curve`).
    """
    varying = {id(j): [o for o in v if not is_seed_override(o)] for j, v in zip(jobs, varying_overrides(jobs))}
    rows = []
    for group in group_by_seed(jobs):
        curves = {j.name: pass_at_1_curve(j.scalars) for j in group}
        done = [j for j in group if curves[j.name]]
        finals = [curves[j.name][-1][1] for j in done]
        areas = [area_under_curve(curves[j.name]) for j in done]
        sizes = {heldout_size(j.config) for j in done}
        size = sizes.pop() if len(sizes) == 1 else None
        final = mean_interval(finals) if finals else None
        seeds = [seed_of(j) for j in group]
        rows.append(
            {
                "jobs": [j.name for j in group],
                "seeds": seeds,
                "varying": varying[id(group[0])],
                "no_intervention": is_no_intervention(group[0].overrides, group[0].config),
                "n": len(done),
                "missing": [j.name for j in group if not curves[j.name]],
                "final_pass_at_1": final,
                "area_under_curve": mean_interval(areas) if areas else None,
                "heldout_n": size,
                "run_se": binomial_se(final["mean"], size) if final is not None and size is not None else None,
                "curve": mean_curve(done),
            }
        )
    return rows
