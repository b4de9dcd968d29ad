"""The staleness study (``configs/sweep/staleness.yaml``, ``make staleness-report``): MInTRL-Const, GRPO and GRPO-TIS
trained on rollouts 0, 1 and 2 optimizer steps old, at seeds fixed before the runs. What the section of
``docs/reproduction.md`` between the markers of :data:`mintrl.analysis.report_blocks.STALENESS` says, computed here
and written by :mod:`mintrl.analysis.staleness_report`.

The plan and the jobs are read as a confirmation's are (:func:`mintrl.analysis.confirm.read_plan`,
:func:`~mintrl.analysis.confirm.plan_status`: one folder per job, finished when it holds ``summary.json``, jobs
outside the plan listed and left out). Per row (method x staleness) over its seeds: the final held-out pass@1 (mean
and 95% Student t interval) and the means over training steps of the logged off-policy measures
(:data:`MEASURES`). Per method, how much pass@1 each staleness costs: ``pass@1(s) - pass@1(0)`` paired by seed; and
whether MInTRL-Const (no importance weights) loses less than a ratio-based row: ``(C_s - C_0) - (G_s - G_0)``
paired by seed (:func:`staleness_costs`). The numbers are final, whatever they show, only when every planned job
finished at one commit (:func:`mintrl.analysis.confirm.why_no_verdict`); until then they are interim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from mintrl.analysis.confirm import Plan, Status, plan_status, read_plan, sweep_file, unmeasured, why_no_verdict
from mintrl.analysis.measures import final_pass
from mintrl.analysis.runs import Job, folder_list, job_commits, parse_override, read_multiruns, seed_of
from mintrl.analysis.stats import mean_interval, paired_difference

STALENESS_SWEEP = "staleness"
STALENESS_KEY = "rollout.max_staleness"
METHOD_KEY = "method"
BASE_METHOD = "mintrl_const"  # the row without importance weights, compared with each ratio-based row
# logged per training step; each job's value is its mean over the steps that logged it ("max": the largest)
MEASURES = (
    ("train/staleness", "mean"),  # optimizer steps since the weights that sampled the batch
    ("train/proximal_shift_abs", "mean"),  # nats per policy token, proximal against behaviour log-probs
    ("train/sampler_mismatch_abs", "mean"),  # nats per policy token, trainer against sampler (bf16 sampling)
    ("objective/is_weight_mean", "mean"),  # GRPO-TIS: untruncated importance weight, mean over tokens
    ("objective/is_weight_max", "max"),  # GRPO-TIS: the largest over the run
    ("objective/is_truncated_frac", "mean"),  # GRPO-TIS: fraction of tokens over objective.tis_cap
)


def job_measure(job: Job, tag: str, how: str) -> float | None:
    """``tag``'s mean (``how="mean"``) or largest value (``"max"``) over the job's logged steps; None when not logged."""
    points = (job.scalars or {}).get(tag)
    if not points:
        return None
    values = [v for _, v in points]
    return max(values) if how == "max" else sum(values) / len(values)


def row_parts(row: str) -> tuple[str, int]:
    """``(method, staleness)`` of a plan row ``"method=grpo rollout.max_staleness=1"``.

    Raises:
        ValueError: the row lacks either key (the plan is not the staleness study's).
    """
    parts = dict(parse_override(o) for o in row.split(" "))
    if METHOD_KEY not in parts or STALENESS_KEY not in parts:
        raise ValueError(f"row {row!r} names no {METHOD_KEY} and {STALENESS_KEY}: not a staleness-study row")
    return parts[METHOD_KEY], int(parts[STALENESS_KEY])


@dataclass
class StudyRow:
    """One planned row over its finished seeds.

    Attributes:
        method, staleness: the row (staleness in optimizer steps).
        passes: ``{seed: final held-out pass@1}`` (0-1) of its finished jobs that logged one.
        pass_stat: :func:`mintrl.analysis.stats.mean_interval` of ``passes`` (None without any).
        measures: ``{tag: mean over seeds}`` of :data:`MEASURES` (a tag no job logged is absent).
    """

    method: str
    staleness: int
    passes: dict[str, float]
    pass_stat: dict | None
    measures: dict[str, float]


@dataclass
class StalenessStudy:
    """The plan, its finished jobs, the rows and the costs of staleness.

    Attributes:
        status: the plan against the jobs (:func:`mintrl.analysis.confirm.plan_status`).
        commits: ``{commit: [job names]}`` of the finished planned jobs.
        blocked: why the numbers are interim (:func:`mintrl.analysis.confirm.why_no_verdict`); None when final.
        rows: one :class:`StudyRow` per planned row, in plan order.
        costs: :func:`staleness_costs`.
        folders: the folders read, as given.
    """

    status: Status
    commits: dict[str, list[str]]
    blocked: str | None
    rows: list[StudyRow]
    costs: list[dict]
    folders: list[str] = field(default_factory=list)


def study_rows(status: Status) -> list[StudyRow]:
    """Each planned row's final pass@1 and off-policy measures over its finished seeds."""
    rows = []
    for row in status.plan.rows:
        jobs = [job for (r, _), job in status.finished.items() if r == row]
        passes = {seed_of(j): p for j in jobs if (p := final_pass(j)) is not None}
        measures = {}
        for tag, how in MEASURES:
            values = [v for j in jobs if (v := job_measure(j, tag, how)) is not None]
            if values:
                measures[tag] = sum(values) / len(values)
        method, staleness = row_parts(row)
        rows.append(
            StudyRow(method, staleness, passes, mean_interval(list(passes.values())) if passes else None, measures)
        )
    return rows


def staleness_costs(rows: Sequence[StudyRow], base: str = BASE_METHOD) -> list[dict]:
    """What staleness costs each method, paired by seed (pass@1 points, 0-1 scale):

    - ``{"method": m, "staleness": s, "cost": paired_difference(pass(m, s), pass(m, 0))}`` for every method and
      ``s > 0``;
    - ``{"method": m, "staleness": s, "vs": base, "cost": ...}`` the difference of those costs, ``base``'s minus
      ``m``'s (``(C_s - C_0) - (G_s - G_0)``, per seed then averaged; > 0: ``base`` loses less), for every other
      method.

    A cost is None where the two rows share no seed (:func:`mintrl.analysis.stats.paired_difference`)."""
    by = {(r.method, r.staleness): r.passes for r in rows}
    out = []
    methods = list(dict.fromkeys(r.method for r in rows))
    for method in methods:
        for s in sorted({r.staleness for r in rows if r.method == method and r.staleness > 0}):
            if (method, 0) in by:
                out.append({"method": method, "staleness": s, "cost": paired_difference(by[method, s], by[method, 0])})
    for method in methods:
        if method == base:
            continue
        for s in sorted({r.staleness for r in rows if r.method == method and r.staleness > 0}):
            keys = [(base, s), (base, 0), (method, s), (method, 0)]
            if all(k in by for k in keys):
                seeds = set.intersection(*(set(by[k]) for k in keys))
                own = {x: by[base, s][x] - by[base, 0][x] for x in seeds}
                other = {x: by[method, s][x] - by[method, 0][x] for x in seeds}
                out.append({"method": method, "staleness": s, "vs": base, "cost": paired_difference(own, other)})
    return out


def study_staleness(plan: Plan, jobs: Sequence[Job]) -> StalenessStudy:
    """The study of ``plan`` over ``jobs`` (see module docstring)."""
    status = plan_status(plan, jobs)
    rows = study_rows(status)
    commits = job_commits(status.jobs)
    blocked = why_no_verdict(status, commits, unmeasured(status, final_pass), "held-out pass@1")
    return StalenessStudy(status, commits, blocked, rows, staleness_costs(rows))


def build_study(
    dirs: str | Path | Sequence[str | Path] | None = None, sweep: str | Path | None = None
) -> StalenessStudy:
    """Read the plan (default: :func:`mintrl.analysis.confirm.sweep_file` of :data:`STALENESS_SWEEP`) and the jobs of
    the folders (``results/staleness/<method>_st<staleness>_s<seed>_<commit>/``; none: nothing finished yet) and study them.

    Raises:
        FileNotFoundError: the sweep file or a folder is missing, or a folder holds no Hydra job.
        ValueError: a plan without seeds or rows, or whose rows lack method or staleness (:func:`row_parts`); a
            row run twice at one seed.
    """
    folders = folder_list(dirs)
    _, jobs = read_multiruns(folders)
    study = study_staleness(read_plan(sweep if sweep is not None else sweep_file(STALENESS_SWEEP)), jobs)
    study.folders = [str(f) for f in folders]
    return study
