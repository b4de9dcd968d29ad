"""The staleness section of the reproduction report (``mintrl-reproduce-staleness``, ``make staleness-report``):
:func:`render_staleness_section` of :func:`mintrl.analysis.staleness_study.build_study` (the plan and where it was
fixed, the finished, missing and left-out jobs, the commit, per row the final held-out pass@1 and the off-policy
measures, and what staleness costs each method, interim until every planned job finished at one commit), and
:func:`write_staleness`, which puts it between the markers of :data:`mintrl.analysis.report_blocks.STALENESS` in
``docs/reproduction.md``, every other byte of the file kept.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from mintrl.analysis.confirm_report import commit_line, folders_line, jobs_table, left_out_lines, plan_line
from mintrl.analysis.report_blocks import STALENESS, markers, write_block
from mintrl.analysis.staleness_study import MEASURES, StalenessStudy, build_study
from mintrl.analysis.tables import fmt, fmt_diff, fmt_interval

TITLE = "## Training on stale rollouts (`rollout.max_staleness`)"
INTRO = (
    "MInTRL-Const's regression is anchored on the behaviour log-probs and takes no importance weight; GRPO's ratio "
    "is taken against the proximal policy, with no weight (GRPO) or a token-level truncated one (GRPO-TIS). Does "
    "the regression tolerate stale rollouts better? Each row trains on batches sampled by the weights of "
    "`rollout.max_staleness` optimizer steps before (0: on-policy); seeds fixed in the sweep file before any job "
    "ran. The answer is whatever the table shows once every planned job finished at one commit."
)
COMMAND = (
    "`make staleness-report`: `mintrl-reproduce-staleness --runs <folders> --out docs/reproduction.md` over the "
    "folders of `results/staleness/` whose job finished (`0/summary.json`)"
)
RUNS = (
    "`make staleness`: per planned job `mintrl-train -m +sweep=staleness method=<method> "
    "rollout.max_staleness=<s> seed=<seed> hydra.sweep.dir=results/staleness/<method>_st<s>_s<seed>_<commit>` "
    "(a stopped target resumes)"
)
LABELS = {  # the measures' column headings (units in the notes below the table)
    "train/staleness": "staleness (steps)",
    "train/proximal_shift_abs": "proximal shift (nats)",
    "train/sampler_mismatch_abs": "sampler mismatch (nats)",
    "objective/is_weight_mean": "IS weight mean",
    "objective/is_weight_max": "IS weight max",
    "objective/is_truncated_frac": "truncated",
}


def status_line(study: StalenessStudy) -> str:
    """``interim: pending k of N`` (or why else the numbers are interim), else ``final``."""
    if study.blocked is not None:
        return f"- **numbers**: **interim ({study.blocked})**"
    return "- **numbers**: **final** (every planned job finished at one commit)"


def rows_table(study: StalenessStudy) -> list[str]:
    """Per row: seeds finished, final held-out pass@1 (mean [95% interval]) and the off-policy measures (means
    over seeds of each job's mean over its training steps; ``n/a``: not logged by that row)."""
    head = ["method", "staleness", "seeds", "final held-out pass@1", *(LABELS[t] for t, _ in MEASURES)]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for row in study.rows:
        measures = [fmt(row.measures.get(tag)) for tag, _ in MEASURES]
        cells = [f"`{row.method}`", str(row.staleness), str(len(row.passes)), fmt_interval(row.pass_stat), *measures]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def costs_table(study: StalenessStudy) -> list[str]:
    """What each staleness costs each method in final held-out pass@1 (paired by seed), and the base method's
    cost minus each other method's (> 0: the base loses less)."""
    out = ["| what | staleness | pass@1 difference, paired by seed [95% interval] |", "| --- | --- | --- |"]
    for c in study.costs:
        if "vs" in c:
            what = f"`{c['vs']}`'s cost minus `{c['method']}`'s"
        else:
            what = f"`{c['method']}` at `s` minus at 0"
        out.append(f"| {what} | {c['staleness']} | {fmt_diff(c['cost'])} |")
    return out + [""]


NOTES = (
    'Measures are logged per training step (docs/operations.md, "Logged counters"): staleness in optimizer steps '
    "(the first batches of a run are younger); proximal shift and sampler mismatch in nats per policy-sampled token "
    "(mean |log-prob difference|); the importance weights pi_prox / mu of GRPO-TIS before truncation at "
    "`objective.tis_cap` (mean, and the largest of the run) and the fraction of tokens truncated (GRPO-TIS logs "
    "them at staleness 0 too: every weight 1). `n/a`: the row logs no such measure (the sampler mismatch is "
    "measured only where a fresh batch's log-probs are recomputed, at staleness 0; the proximal shift only for a "
    "stale batch; the weights only with a correction). Two things differ between staleness 0 and the stale rows "
    "besides the age of the batch: at staleness 0 the trainer's recompute replaces a bf16 sampler's log-probs "
    "(the behaviour log-probs are then the trainer's), while a stale batch keeps the sampler's (bf16 where the "
    "sampler samples in bf16), so the proximal shift counts the sampler's rounding with the drift, and MInTRL-Const "
    "anchors on the sampler's values; and runs at staleness >= 1 are not bit-reproducible at a fixed seed (the "
    "producer thread's timing), so a rerun of a job gives other numbers."
)


def render_staleness_section(study: StalenessStudy) -> str:
    """The staleness section, from the begin to the end marker of :data:`mintrl.analysis.report_blocks.STALENESS`
    (no newline after it)."""
    begin, end = markers(STALENESS)
    out = [
        begin,
        TITLE,
        "",
        f"Written by `mintrl-reproduce-staleness` on {time.strftime('%Y-%m-%d %H:%M %Z')}; numbers below are "
        "measured, not copied.",
        "",
        INTRO,
        "",
        f"- **command**: {COMMAND}",
        plan_line(study.status.plan),
        f"- **runs**: {RUNS}",
        folders_line(study),
        *left_out_lines(study),
        commit_line(study.commits),
        status_line(study),
        "",
        *jobs_table(study),
        *rows_table(study),
        *costs_table(study),
        NOTES,
    ]
    return "\n".join([*out, end])


def write_staleness(
    dirs: str | Path | Sequence[str | Path] | None = None,
    out: str | Path = "docs/reproduction.md",
    sweep: str | Path | None = None,
) -> dict:
    """Study the jobs of ``dirs`` against the plan of ``sweep`` (:func:`mintrl.analysis.staleness_study.build_study`)
    and write their section into ``out`` (:func:`mintrl.analysis.report_blocks.write_block`, the block
    :data:`~mintrl.analysis.report_blocks.STALENESS`).

    Returns:
        ``{"out": Path, "study": StalenessStudy}``.

    Raises:
        FileNotFoundError, ValueError: see :func:`mintrl.analysis.staleness_study.build_study`; ``out``'s markers
            are malformed (:func:`mintrl.analysis.report_blocks.block_span`).
    """
    study = build_study(dirs, sweep)
    return {"out": write_block(out, render_staleness_section(study), STALENESS), "study": study}
