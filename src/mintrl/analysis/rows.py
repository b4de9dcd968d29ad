"""The rows of the reproduction report: the settings of a multirun over seeds, named as the paper names its
methods, in the paper's order, with the budget every job of a row ran with.

A row is the jobs whose overrides are equal apart from ``seed=...``; it is named after its ``experiment=``
override (:data:`ROW_NAMES`: the reproduction configs run ``experiment=math/<method>_cpu``, the names under
which the committed runs in ``results/`` recorded them), with its other swept overrides appended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from mintrl.analysis.measures import budget
from mintrl.analysis.runs import (
    Job,
    experiment_of,
    group_by_seed,
    is_no_intervention,
    parse_override,
    seed_of,
    swept,
)
from mintrl.analysis.stats import seed_key
from mintrl.analysis.summary import summarize_seeds

# experiment config -> the row's name in the paper's terms
ROW_NAMES = {
    "math/mintrl_const_cpu": "MInTRL-Const",
    "math/grpo_cpu": "GRPO",
    "no_intervention": "no-intervention",
    "math/mintrl_proxy_cpu": "MInTRL-Proxy",
    "math/mentor_cpu": "MENTOR-style",
    "math/intervention_grpo_cpu": "intervention-GRPO",
}
CONST, GRPO, NO_INTERVENTION = "MInTRL-Const", "GRPO", "no-intervention"
BUDGET_KEYS = ("max_steps", "prompts_per_step", "rollouts_per_prompt", "max_response_tokens")


@dataclass
class Row:
    """One setting of a multirun: jobs equal apart from ``seed=...``.

    Attributes:
        name: the paper's name of the row (:data:`ROW_NAMES`), else the swept overrides.
        jobs: the row's jobs, one per seed.
        stats: the row of :func:`mintrl.analysis.summary.summarize_seeds` (final pass@1, area, curve, ...).
    """

    name: str
    jobs: list[Job]
    stats: dict


def row_name(jobs: Sequence[Job], varying: Sequence[str]) -> str:
    """The paper's name of a row from its ``experiment=`` (:data:`ROW_NAMES`), with its other swept overrides
    (``varying``, :func:`mintrl.analysis.runs.swept`) appended; else the swept overrides; ``(no-intervention)``
    marks an unnamed baseline."""
    exp = experiment_of(jobs[0])
    others = [o for o in varying if parse_override(o)[0] != "experiment"]
    if exp in ROW_NAMES:
        return " ".join([ROW_NAMES[exp], *others])
    label = " ".join(varying) or "all jobs"
    return f"{label} (no-intervention)" if is_no_intervention(jobs[0].overrides, jobs[0].config) else label


def rows_of(jobs: Sequence[Job]) -> list[Row]:
    """The rows (settings over seeds) of a multirun's jobs, in order of first appearance, named by
    :func:`row_name` from the overrides that differ between the jobs."""
    return [
        Row(name=row_name(group, swept(jobs, group[0])), jobs=list(group), stats=stats)
        for group, stats in zip(group_by_seed(jobs), summarize_seeds(jobs))
    ]


def paper_order(row: Row) -> int:
    """Sort key: the rows of :data:`ROW_NAMES` in that order (MInTRL-Const, GRPO, no-intervention, ...), then
    any other row (a stable sort keeps their order of appearance)."""
    names = list(ROW_NAMES.values())
    return names.index(row.name) if row.name in names else len(names)


def find_row(rows: Sequence[Row], name: str) -> Row | None:
    """The row of that name (:func:`row_name`), None when absent."""
    return next((r for r in rows if r.name == name), None)


def row_budget(row: Row) -> dict:
    """:func:`mintrl.analysis.measures.budget` shared by every job of a row (a key whose jobs disagree is
    None)."""
    budgets = [budget(j) for j in row.jobs]
    return {k: budgets[0][k] if all(b[k] == budgets[0][k] for b in budgets) else None for k in budgets[0]}


def equal_budget(rows: Sequence[Row]) -> bool:
    """Whether every row ran the same steps, prompts per step, rollouts per prompt and response limit (all
    known)."""
    budgets = [row_budget(r) for r in rows]
    return all(all(b[k] is not None and b[k] == budgets[0][k] for b in budgets) for k in BUDGET_KEYS)


def per_seed(jobs: Sequence[Job], value: Callable[[Job], float | None]) -> dict[str, float]:
    """``{seed: value(job)}`` over ``jobs`` (:func:`mintrl.analysis.runs.seed_of`), leaving out jobs whose value
    is None."""
    out = {}
    for job in jobs:
        v = value(job)
        if v is not None:
            out[seed_of(job)] = float(v)
    return out


def seeds_run(*rows: Row | None) -> list[str]:
    """Every seed (:func:`mintrl.analysis.runs.seed_of`) any job of these rows ran, whether or not it logged what
    a claim reads, in :func:`mintrl.analysis.stats.seed_key` order."""
    return sorted({seed_of(j) for row in rows if row is not None for j in row.jobs}, key=seed_key)
