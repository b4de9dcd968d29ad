"""The confirmation section of the reproduction report (``mintrl-reproduce-confirm``, ``make confirm-report``):
:func:`render_confirm_section` of :func:`mintrl.analysis.confirm.build_confirmation`'s confirmations (per sweep
the plan and where it was fixed, the finished, missing and left-out jobs, the commit, the tables and the claims
with their verdicts, interim until every planned job finished at one commit), and :func:`write_confirmation`,
which puts it between the markers of :data:`mintrl.analysis.report_blocks.CONFIRM` in ``docs/reproduction.md``,
every other byte of the file kept.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Sequence

from mintrl.analysis.agent_tables import fmt_success
from mintrl.analysis.confirm import AGENTS_SWEEP, CORE_SWEEP, Confirmation, Plan, build_confirmation
from mintrl.analysis.report_blocks import CONFIRM, markers, write_block
from mintrl.analysis.rows import CONST, GRPO, find_row
from mintrl.analysis.runs import NOT_RECORDED
from mintrl.analysis.stats import seed_key
from mintrl.analysis.tables import cell, fmt, fmt_commits, paired_table
from mintrl.build.config import CONFIG_DIR

TITLE = "## Confirmation at seeds fixed in advance"
INTRO = (
    "Each claim is measured again at seeds its sweep file fixed before any of its jobs ran. No seed is added or "
    "dropped after seeing a result: a job whose seed, row or overrides the sweep file does not name is listed and "
    "left out, and a claim gets its verdict only when every planned job has finished, all at one commit; until "
    "then its numbers are interim and carry no verdict."
)
COMMAND = (
    "`make confirm-report`: `mintrl-reproduce-confirm --core <folders> --agents <folders> --out docs/reproduction.md` "
    "over the folders of `results/confirm_core/` and `results/confirm_agents_db/` whose job finished "
    "(`0/summary.json`)"
)
RUNS = {  # the command that runs each sweep's planned jobs
    CORE_SWEEP: "`make confirm-core`: per planned job `mintrl-train -m +sweep=confirm_core method=<row> seed=<seed> "
    "hydra.sweep.dir=results/confirm_core/<row>_s<seed>_<commit>` (a stopped target resumes)",
    AGENTS_SWEEP: "`AGENTBENCH_DIR=<AgentBench checkout> make confirm-agents-db`: per planned job `mintrl-train -m "
    "+sweep=confirm_agents_db experiment=agent/<row>_cpu seed=<seed> "
    "hydra.sweep.dir=results/confirm_agents_db/<row>_s<seed>_<commit>` (a stopped target resumes)",
}
HEADINGS = {
    CORE_SWEEP: "### (i) MInTRL-Const beats GRPO on the 3-term task (`data=arithmetic_3terms`)",
    AGENTS_SWEEP: "### RAIL's claims R1-R4 on AgentBench's DB-bench rows (`data=agentbench_db`)",
}
RULES = (
    "Verdicts by the rules of the sections above: (i) from the 95% Student t interval of MInTRL-Const minus GRPO "
    "over the plan's seeds, paired by seed; R1-R4 as in the agents section. No next step names more seeds: the "
    "plan's seeds are final, and an undecided claim stays undecided at them."
)


def fmt_seeds(seeds: Sequence[str]) -> str:
    """Seeds in :func:`mintrl.analysis.stats.seed_key` order, runs of 3 or more consecutive integers as ``a-b``:
    ``fmt_seeds(["100", "101", "102", "105"]) == "100-102, 105"``; ``none`` for no seeds."""
    ordered = sorted(seeds, key=seed_key)
    parts: list[list[str]] = []
    for s in ordered:
        last = parts[-1][-1] if parts else None
        if last is not None and s.isdigit() and last.isdigit() and int(s) == int(last) + 1:
            parts[-1].append(s)
        else:
            parts.append([s])
    text = [f"{p[0]}-{p[-1]}" if len(p) >= 3 else ", ".join(p) for p in parts]
    return ", ".join(text) or "none"


def shown_path(path: str | Path) -> str:
    """A sweep file's path as the report names it: relative to the repository of
    :data:`mintrl.build.config.CONFIG_DIR` (``configs/sweep/confirm_core.yaml``) when it lies there, else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path(CONFIG_DIR).resolve().parent))
    except ValueError:
        return str(path)


def plan_line(plan: Plan) -> str:
    """The plan: rows x seeds, the jobs it makes, the settings every job has, and the file that fixed them."""
    rows = ", ".join(f"`{r}`" for r in plan.rows)
    fixed = f"; every job also {' '.join(f'`{f}`' for f in plan.fixed)}" if plan.fixed else ""
    return (
        f"- **plan**, fixed in `{shown_path(plan.path)}`: rows {rows} x seeds {fmt_seeds(plan.seeds)} "
        f"(n = {len(plan.seeds)}): {len(plan.pairs)} jobs{fixed}"
    )


def commit_line(commits: dict[str, list[str]]) -> str:
    """The commits the finished planned jobs recorded (:func:`mintrl.analysis.tables.fmt_commits`), flagged when
    there is more than one or a job recorded none; ``none yet`` without a finished job."""
    if not commits:
        return "- **commit**: none yet (no planned job finished)"
    if set(commits) == {NOT_RECORDED}:
        return f"- **commit**: not recorded ({len(commits[NOT_RECORDED])} jobs without manifest.json): **no verdict**"
    flag = " **more than one commit: no verdict**" if len(commits) > 1 else ""
    return f"- **commit**: {fmt_commits(commits, '')}{flag}"


def folders_line(confirmation: Confirmation) -> str:
    """How many planned jobs finished, and the folders read, counted per parent folder."""
    status = confirmation.status
    parents = Counter(f"{Path(f).parent}/" for f in confirmation.folders)
    read = "; ".join(f"{n} folder{'s' if n != 1 else ''} under `{p}`" for p, n in parents.items()) or "no folder"
    return f"- **finished**: {len(status.finished)} of {len(status.plan.pairs)} planned jobs (read: {read})"


def left_out_lines(confirmation: Confirmation) -> list[str]:
    """The finished jobs outside the plan (left out, with why) and the unfinished ones (not counted)."""
    status = confirmation.status
    out = []
    if status.outside:
        said = "; ".join(f"`{job.path}`: {why}" for job, why in status.outside)
        out.append(f"- **not in the plan** (left out): {said}")
    if status.running:
        said = ", ".join(f"`{job.path}`" for job in status.running)
        out.append(f"- **unfinished** (no summary.json; not counted): {said}")
    return out


def verdict_line(confirmation: Confirmation) -> str:
    """``pending: k of N jobs finished`` (or why else there is no verdict), else each claim's verdict."""
    if confirmation.blocked is not None:
        return f"- **verdict**: **{confirmation.blocked}**"
    return "- **verdict**: " + "; ".join(f"({c.key}) **{c.verdict}**" for c in confirmation.claims)


def jobs_table(confirmation: Confirmation) -> list[str]:
    """Per planned row its seeds, those finished and those missing."""
    status = confirmation.status
    out = [
        "| row | planned seeds | finished | missing |",
        "| --- | --- | --- | --- |",
    ]
    for row in status.plan.rows:
        done = [s for (r, s) in status.finished if r == row]
        missing = [s for (r, s) in status.missing if r == row]
        planned = f"{fmt_seeds(status.plan.seeds)} ({len(status.plan.seeds)})"
        out.append(f"| `{row}` | {planned} | {fmt_seeds(done)} ({len(done)}) | {fmt_seeds(missing)} |")
    return out + [""]


def interim(confirmation: Confirmation) -> str:
    """`` (interim: not a verdict)`` while the claims get no verdict, else empty."""
    return " (interim: not a verdict)" if confirmation.blocked is not None else ""


def core_table(confirmation: Confirmation) -> list[str]:
    """MInTRL-Const's and GRPO's final held-out pass@1 per finished seed and their difference with its interval
    (:func:`mintrl.analysis.tables.paired_table`)."""
    rows, diff = confirmation.details["rows"], confirmation.details["diff"]
    out = [f"#### Final held-out pass@1, MInTRL-Const minus GRPO, paired by seed{interim(confirmation)}", ""]
    if diff is None:
        return out + ["No seed has finished both rows yet.", ""]
    return out + [paired_table(find_row(rows, CONST), find_row(rows, GRPO), diff), ""]


def agents_table(confirmation: Confirmation) -> list[str]:
    """Per agent row on the claims' level: its finished seeds, held-out success (mean [95% interval], per seed;
    :func:`mintrl.analysis.agent_tables.fmt_success`) and episodes generated per task."""
    d = confirmation.details
    out = [f"#### Held-out success per row{interim(confirmation)}", ""]
    if not d["rows"]:
        return out + ["No planned job has finished yet.", ""]
    out += [
        "| row | finished seeds (n) | held-out success, mean [95% interval] | per seed | episodes generated per task |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row, s in zip(d["rows"], d["summaries"]):
        per = ", ".join(f"{k}: {v:.3f}" for k, v in s["success"].items()) or "n/a"
        cells = [
            f"{row.label} (`{row.experiment}`)",
            f"{fmt_seeds(s['seeds'])} ({len(s['seeds'])})",
            fmt_success(s["interval"]),
            per,
            fmt(s["generated"]),
        ]
        out.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return out + [""]


TABLES = {CORE_SWEEP: core_table, AGENTS_SWEEP: agents_table}


def claims_table(confirmation: Confirmation) -> list[str]:
    """Each claim with its verdict, or the reason there is none yet, and what it measured (marked interim)."""
    blocked = confirmation.blocked
    out = [f"#### Claims{interim(confirmation)}", "", "| claim | verdict | measured |", "| --- | --- | --- |"]
    for c in confirmation.claims:
        verdict = blocked if blocked is not None else c.verdict
        measure = f"interim, not a verdict: {c.measure}" if blocked is not None else c.measure
        out.append(f"| ({c.key}) {cell(c.text)} | **{cell(verdict)}** | {cell(measure)} |")
    return out + [""]


def confirmation_lines(confirmation: Confirmation) -> list[str]:
    """One sweep's part of the section: heading, plan, the command that runs it, finished and left-out jobs, commit, verdict, the
    planned-and-finished table, the measured table and the claims."""
    return [
        HEADINGS[confirmation.sweep],
        "",
        plan_line(confirmation.status.plan),
        f"- **runs**: {RUNS[confirmation.sweep]}",
        folders_line(confirmation),
        *left_out_lines(confirmation),
        commit_line(confirmation.commits),
        verdict_line(confirmation),
        "",
        *jobs_table(confirmation),
        *TABLES[confirmation.sweep](confirmation),
        *claims_table(confirmation),
    ]


def render_confirm_section(confirmations: Sequence[Confirmation]) -> str:
    """The confirmation section, from the begin to the end marker of
    :data:`mintrl.analysis.report_blocks.CONFIRM` (no newline after it)."""
    begin, end = markers(CONFIRM)
    out = [
        begin,
        TITLE,
        "",
        f"Written by `mintrl-reproduce-confirm` on {time.strftime('%Y-%m-%d %H:%M %Z')}; numbers below are "
        "measured, not copied.",
        "",
        INTRO,
        "",
        f"- **command**: {COMMAND}",
        "",
    ]
    for confirmation in confirmations:
        out += confirmation_lines(confirmation)
    return "\n".join([*out, RULES, end])


def write_confirmation(
    core_dirs: str | Path | Sequence[str | Path] | None = None,
    agents_dirs: str | Path | Sequence[str | Path] | None = None,
    out: str | Path = "docs/reproduction.md",
    core_sweep: str | Path | None = None,
    agents_sweep: str | Path | None = None,
) -> dict:
    """Put the confirmation section (:func:`render_confirm_section` of
    :func:`mintrl.analysis.confirm.build_confirmation`) into ``out`` between the
    :data:`~mintrl.analysis.report_blocks.CONFIRM` markers (replaced, else appended; every other byte kept; the
    file is created when absent).

    Returns:
        ``{"out": Path, "confirmations": [...]}``.

    Raises:
        FileNotFoundError, ValueError: see :func:`mintrl.analysis.confirm.build_confirmation`; ``out``'s markers
            are malformed (:func:`mintrl.analysis.report_blocks.block_span`).
    """
    confirmations = build_confirmation(core_dirs, agents_dirs, core_sweep, agents_sweep)
    return {"out": write_block(out, render_confirm_section(confirmations), CONFIRM), "confirmations": confirmations}
