"""The rows of the reproduction report: the settings of a multirun over seeds, named as the paper names its
methods, in the paper's order, with the budget every job of a row ran with.

A row is the jobs of one setting apart from ``seed=...`` (:func:`mintrl.analysis.runs.group_by_seed`); it is
named after the method its jobs' composed configs run (:func:`mintrl.analysis.runs.method_of`: objective,
judge, allocation, guide), so ``method=grpo``, a sweep's ``method: grpo`` and the ``experiment=math/grpo_cpu``
the committed runs in ``results/`` recorded all land in the row ``GRPO``; the other swept overrides are
appended to the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from mintrl.analysis.measures import budget
from mintrl.analysis.runs import (
    Job,
    group_by_seed,
    is_no_intervention,
    method_of,
    names_the_method,
    seed_of,
    swept,
)
from mintrl.analysis.stats import seed_key
from mintrl.analysis.summary import summarize_seeds

# the report's rows (mintrl.analysis.runs.method_of), in the paper's order
ROW_NAMES = ("MInTRL-Const", "GRPO", "no-intervention", "MInTRL-Proxy", "MENTOR-style", "intervention-GRPO")
CONST, GRPO, NO_INTERVENTION = "MInTRL-Const", "GRPO", "no-intervention"
BUDGET_KEYS = ("max_steps", "prompts_per_step", "rollouts_per_prompt", "max_response_tokens")


@dataclass
class Row:
    """One setting of a multirun: jobs equal apart from ``seed=...``.

    Attributes:
        name: the paper's name of the row's method (:data:`ROW_NAMES`) and its other swept overrides, else the
            swept overrides.
        jobs: the row's jobs, one per seed.
        stats: the row of :func:`mintrl.analysis.summary.summarize_seeds` (final pass@1, area, curve, ...).
    """

    name: str
    jobs: list[Job]
    stats: dict


def row_name(jobs: Sequence[Job], varying: Sequence[str]) -> str:
    """The paper's name of a row's method (:func:`mintrl.analysis.runs.method_of`, read from the composed
    config), with its other swept overrides (``varying``, :func:`mintrl.analysis.runs.swept`) appended, those
    that only spell the method (``method=``, an alias ``experiment=``) left out; for another method, the swept
    overrides, ``(no-intervention)`` marking a baseline."""
    method = method_of(jobs[0])
    if method is not None:
        return " ".join([method, *(o for o in varying if not names_the_method(o))])
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
    return ROW_NAMES.index(row.name) if row.name in ROW_NAMES else len(ROW_NAMES)


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
