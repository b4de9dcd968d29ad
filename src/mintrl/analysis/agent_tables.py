"""Markdown of the agents section (:func:`render_agents_section` of
:func:`mintrl.analysis.agent_report.build_agents_report`'s dict): the rows per level, the step time split,
RAIL's claims R1-R4 with their verdicts, the calibration of the controller's predictions and the figure
(RAIL Figure 1 at CPU scale), between the markers of :mod:`mintrl.analysis.report_blocks`' ``AGENTS`` block."""

from __future__ import annotations

import time

from mintrl.analysis.report_blocks import AGENTS, markers
from mintrl.analysis.runs import STEP_SECONDS_TAG
from mintrl.analysis.tables import cell, fmt, fmt_seconds

TITLE = "## RAIL at equal budget on agent tasks (make reproduce-agents)"
COMMAND = (
    "`mintrl-train -m +sweep=reproduce_agents` (SQL level `data=sql_schema`, seeds 0,1,2) and "
    "`mintrl-train -m +sweep=reproduce_agents_shell` (shell level `data=shell_files`, seed 0), then "
    "`mintrl-reproduce-agents <sql multirun dir> ... --shell <shell multirun dir> ...`"
)
INTERVALS = (
    "Held-out success: the last `val/pass@1` (after the last step), 0-1. Interval over 2+ seeds: mean ± t(0.975, "
    "n-1) · s / sqrt(n) over the seeds (Student t); one seed: the 95% Wilson interval of its k of N held-out "
    "episodes (scipy.stats.binomtest). Episodes generated per task: mean over steps of "
    "`allocation/generated_per_prompt` (RAIL's discarded shadow branches count), then over seeds."
)
RULES = (
    "Verdicts. R1/R2: **holds** when the 95% interval over seeds of RAIL minus the other row lies above 0 and RAIL "
    "generated no more episodes per task (tolerance 0.01); **does not hold** when it lies below 0 or RAIL "
    "generated more; **undecided** otherwise. R3: **holds** when the Spearman interval's low end is above 0, **does "
    "not hold** when its high end is below 0, **undecided** otherwise. R4: **holds** when live minus shadow and, "
    "each with 2+ decisions, live minus explore and live minus random have Welch intervals above 0, **does not "
    "hold** when one lies below 0, **undecided** otherwise."
)


def fmt_success(interval: dict | None) -> str:
    """``0.150 [0.080, 0.220] (t over seeds, n=3)``, ``0.109 [0.054, 0.209] (Wilson, 7 of 64)``, ``0.109 (no
    interval)``; ``n/a`` for None (success 0-1)."""
    if interval is None:
        return "n/a"
    if interval["low"] is None:
        return f"{interval['mean']:.3f} (no interval)"
    how = (
        f"Wilson, {interval['k']} of {interval['episodes']}"
        if interval["method"] == "wilson"
        else f"t over seeds, n={interval['n']}"
    )
    return f"{interval['mean']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}] ({how})"


def rows_tables(report: dict) -> list[str]:
    """Per level a table of its rows: seeds, held-out success with its interval and per seed, held-out episodes,
    episodes generated per task, branches and top-up per step."""
    out = []
    for level in report["levels"]:
        which = " (the claims' level)" if level == report["level"] else ""
        out += [
            f"#### Level `{level}`{which}",
            "",
            "| row | seeds (n) | held-out success, mean [95% interval] | per seed | held-out episodes per job "
            "| episodes generated per task | branches per step | top-up per step |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row, s in zip(report["rows"], report["summaries"]):
            if row.level != level:
                continue
            seeds = f"{','.join(s['seeds'])} ({len(s['success'])})"
            if s["missing"]:
                seeds += f"; no val/pass@1: seed {','.join(s['missing'])}"
            per = ", ".join(f"{k}: {v:.3f}" for k, v in s["success"].items()) or "n/a"
            cells = [
                f"{row.label} (`{row.experiment}`)",
                seeds,
                fmt_success(s["interval"]),
                per,
                s["heldout"] if s["heldout"] is not None else "n/a",
                fmt(s["generated"]),
                "n/a (no branching)" if s["branches"] is None else f"{s['branches']:.2f}",
                "n/a" if s["top_up"] is None else f"{s['top_up']:.2f}",
            ]
            out.append("| " + " | ".join(cell(c) for c in cells) + " |")
        out.append("")
    return out + [INTERVALS, ""]


def split_table(report: dict) -> list[str]:
    """The step time split per level and row: median seconds over the pooled steps of its jobs."""
    out = [
        "### Step time split (median over the steps of every seed)",
        "",
        "| level | row | generation (s) | environment (s) | update (s) | step (s) | environment share |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row, s in zip(report["rows"], report["summaries"]):
        sp = s["split"]
        secs = ["n/a" if sp[k] is None else f"{sp[k]:.3f}" for k in ("gen", "env", "update", "step")]
        share = "n/a" if sp["env_share"] is None else f"{100 * sp['env_share']:.3f}%"
        out.append(f"| {row.level} | {cell(row.label)} | " + " | ".join(secs) + f" | {share} |")
    return out + [
        "",
        "Generation is `perf/gen_seconds` (environment time taken out), environment `env/seconds`, update "
        f"`perf/update_seconds`, step `{STEP_SECONDS_TAG}`; environment share: the median over steps of "
        "environment / step seconds.",
        "",
    ]


def claims_table(report: dict) -> list[str]:
    """R1-R4 with verdicts and measures, then how to decide each open one and the rules."""
    out = ["### RAIL's claims", "", "| claim | verdict | measured |", "| --- | --- | --- |"]
    for c in report["claims"]:
        out.append(f"| ({c.key}) {cell(c.text)} | **{c.verdict}** | {cell(c.measure)} |")
    out.append("")
    out += [f"- ({c.key}) {c.verdict}: {c.next_step}" for c in report["claims"] if c.next_step]
    return out + ["", *live_table(report), RULES, ""]


def live_table(report: dict) -> list[str]:
    """R4's comparisons: per kind the decisions and mean realised gains (reward^2) of live and the other kind, and
    the difference with Welch's 95% interval; empty without R4's measures."""
    r4 = report["measures"].get("R4") or {}
    if not r4:
        return []
    counts = r4["counts"]
    out = [
        "| live minus | live decisions | other decisions | mean realised, live | mean realised, other "
        "| difference [Welch 95%] |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("shadow", "explore", "random", "entropy"):
        d = r4[kind]
        if d is None:
            out.append(f"| {kind} | {counts['live']} | {counts[kind]} | n/a | n/a | not measured (fewer than 2) |")
            continue
        ci = "no spread, no interval" if d["low"] is None else f"[{d['low']:+.4f}, {d['high']:+.4f}]"
        out.append(
            f"| {kind} | {d['n_a']} | {d['n_b']} | {d['mean_a']:+.4f} | {d['mean_b']:+.4f} | {d['mean']:+.4f} {ci} |"
        )
    return out + [
        "",
        "Realised gain per decision, reward^2 (RAIL eq. 2). explore: RAIL's random action at the top-entropy anchor; "
        "random: the random-anchor row's branches (anchors drawn uniformly at random, 2 episodes at T = 1.0); "
        "entropy: entropy branching's branches (context, not in R4's verdict). "
        "Shadow decisions come from the first steps and live ones from later steps, so live minus shadow also "
        "holds the policy's change over training; the random and entropy rows branch at every step, so their "
        "comparisons mix all stages of training against the live phase's later ones.",
        "",
    ]


def decisions_table(report: dict) -> list[str]:
    """Per level, row and decision kind its allocation declares (or its decisions name): the decisions, those
    kept, the mean predicted and the mean realised gain (reward^2, RAIL eq. 2); rows without kinds are left out."""
    out = [
        "### Branch decisions per kind",
        "",
        "| level | row | kind | who chose the branch | decisions | kept | mean predicted | mean realised |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    listed = 0
    for row, s in zip(report["rows"], report["summaries"]):
        for d in s.get("decisions", []):
            cells = [
                row.level,
                row.label,
                f"`{d['kind']}`",
                d["meaning"],
                str(d["n"]),
                str(d["kept"]),
                "n/a" if d["predicted"] is None else f"{d['predicted']:+.4f}",
                "n/a" if d["realized"] is None else f"{d['realized']:+.4f}",
            ]
            out.append("| " + " | ".join(cell(c) for c in cells) + " |")
            listed += 1
    if not listed:
        return []
    return out + [
        "",
        "Kinds: the ones each row's allocation declares on its class (`decision_kinds`, recorded in the job's "
        "`allocation_kinds.json`), then any others its `allocation_decisions.jsonl` names. Gains in reward^2 (RAIL "
        "eq. 2), means over the row's decisions of every seed; predicted only where a controller predicts.",
        "",
    ]


def calibration_table(report: dict) -> list[str]:
    """R3's calibration: quartile bins of predicted gain with the mean realised gain and its interval."""
    bins = report["measures"].get("R3", {}).get("bins") or []
    out = ["### Calibration of the controller's predictions (R3)", ""]
    if not bins:
        return out + ["No RAIL decision with a prediction.", ""]
    out += [
        "| bin of predicted gain | decisions | predicted range | mean predicted | mean realised [95% interval] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, b in enumerate(bins, start=1):
        r = b["realized"]
        ci = "(n=1, no interval)" if r["half_width"] is None else f"[{r['low']:+.4f}, {r['high']:+.4f}]"
        out.append(
            f"| {i} of {len(bins)} | {b['n']} | {b['pred_low']:+.4f} to {b['pred_high']:+.4f} | "
            f"{b['predicted']:+.4f} | {r['mean']:+.4f} {ci} |"
        )
    return out + [
        "",
        "Gains in reward^2 (RAIL eq. 2, the variance gain of the branch). Bins: the decisions ordered by predicted "
        "gain, cut into near-equal groups; realised interval: Student t over the bin's decisions.",
        "",
    ]


def render_agents_section(report: dict, figure: str) -> str:
    """The agents section, from the begin to the end marker of the block
    :data:`mintrl.analysis.report_blocks.AGENTS` (no newline after it).

    Args:
        report: :func:`mintrl.analysis.agent_report.build_agents_report`'s dict.
        figure: the figure's path relative to the markdown file.
    """
    m, w = report["machine"], report["wall"]
    begin, end = markers(AGENTS)
    folders = f"SQL `{report['sql_dirs']}`" + (f"; shell `{report['shell_dirs']}`" if report["shell_dirs"] else "")
    out = [
        begin,
        TITLE,
        "",
        f"Written by `mintrl-reproduce-agents` on {time.strftime('%Y-%m-%d %H:%M %Z')}; numbers below are measured, "
        "not copied.",
        "",
        f"- **command**: {COMMAND}",
        f"- **multirun(s)**: {folders}",
        f"- **commit**: {report['commit']}",
        f"- **machine** (the one writing this report): {m['platform']}, {m['processor']}, {m['cpu_count']} logical "
        f"CPUs, Python {m['python']}, torch {m['torch']}; the jobs ran on: {report['job_machines']}",
        f"- **wall time**: {fmt_seconds(w['elapsed'])} from the first job's start to the last job's last logged "
        f"scalar (per multirun folder, summed); {fmt_seconds(w['step_seconds'])} summed over the jobs' logged "
        f"`{STEP_SECONDS_TAG}`",
        "- **rows**: uniform GRPO-8 (8 on-policy episodes per task), entropy branching (4 + branches at the top-"
        "quartile entropy turns + fresh top-up = 8), RAIL (4 + the controller's branches, shadow then live, + "
        "fresh top-up = 8) and random anchors (4 + branches at uniformly random turns + fresh top-up = 8), those "
        f"the folders hold; {report['settings']}",
        "",
        "### Rows",
        "",
        *rows_tables(report),
        *split_table(report),
        *claims_table(report),
        *decisions_table(report),
        *calibration_table(report),
        "### Figure",
        "",
        f"![Held-out success vs episodes generated per task]({figure})",
        "",
        "*Held-out success against episodes generated per task, one point per row with its 95% interval (t over "
        "seeds; Wilson for a one-seed level), a panel per level: RAIL Figure 1 at CPU scale. Points at the same "
        "x are drawn slightly apart.*",
        end,
    ]
    return "\n".join(out)
