"""Markdown rendering of the analysis: number formats, the ``mintrl-summary`` tables (per job and per setting
over seeds) and the reproduction report (:func:`render_markdown` of :func:`mintrl.analysis.report.build_report`'s
dict)."""

from __future__ import annotations

import time
from typing import Sequence

from mintrl.analysis.measures import budget, final_pass, last_entropy
from mintrl.analysis.rows import CONST, GRPO, Row, find_row, per_seed, row_budget
from mintrl.analysis.runs import NOT_RECORDED, STEP_SECONDS_TAG, parse_override, seed_of
from mintrl.analysis.stats import FAILS, HOLDS, UNDECIDED, mean_interval, verdict

INTERVAL_NOTE = (
    "95% interval over seeds: mean ± t(0.975, n-1) · s / sqrt(n), s the sample standard deviation of the "
    "n seeds' values, t Student's t quantile (scipy.stats.t.ppf); n = 1: no interval. One run's SE: "
    "sqrt(p (1-p) / N) of a final pass@1 p on N = validation prompts x samples per prompt held-out rollouts."
)
EFFECT_READING = {HOLDS: "the high level is better", FAILS: "the low level is better", UNDECIDED: "undecided"}


def fmt(value: float | None, signed: bool = False) -> str:
    """``0.300``, or ``+0.050`` when ``signed``; ``n/a`` for None."""
    if value is None:
        return "n/a"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def fmt_interval(stat: dict | None) -> str:
    """``0.600 [0.352, 0.848]`` (mean [95% interval]); ``0.600 (n=1, no interval)``; ``n/a`` for None."""
    if stat is None:
        return "n/a"
    if stat["half_width"] is None:
        return f"{stat['mean']:.3f} (n=1, no interval)"
    return f"{stat['mean']:.3f} [{stat['low']:.3f}, {stat['high']:.3f}]"


def fmt_diff(stat: dict | None, digits: int = 3) -> str:
    """``+0.100 [+0.020, +0.180] (n=3)``; ``+0.100 (n=1, no interval)``; ``n/a`` for None."""
    if stat is None:
        return "n/a"
    f = f"{{:+.{digits}f}}"
    if stat["half_width"] is None:
        return f"{f.format(stat['mean'])} (n=1, no interval)"
    return f"{f.format(stat['mean'])} [{f.format(stat['low'])}, {f.format(stat['high'])}] (n={stat['n']})"


def fmt_seconds(seconds: float | None) -> str:
    """``1 h 02 min`` / ``3.5 min`` / ``42 s``; ``n/a`` for None."""
    if seconds is None:
        return "n/a"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def fmt_commits(commits: dict[str, list[str]], head: str) -> str:
    """The report's commit line from :func:`mintrl.analysis.runs.job_commits`: the commit(s) the jobs' run
    manifests recorded with their job counts, or ``head`` (the report's checkout) when no job recorded one."""
    recorded = {c: names for c, names in commits.items() if c != NOT_RECORDED}
    if not recorded:
        return f"`{head}` (the checkout writing the report: the jobs recorded no manifest.json)"

    def jobs(names: list[str]) -> str:
        return f"{len(names)} job" + ("" if len(names) == 1 else "s")

    parts = [f"`{c}` ({jobs(names)})" for c, names in recorded.items()]
    if NOT_RECORDED in commits:
        parts.append(f"not recorded ({jobs(commits[NOT_RECORDED])})")
    return "; ".join(parts) + " (each job's manifest.json)"


def cell(text) -> str:
    """``text`` as a markdown table cell: a string with ``|`` escaped."""
    return str(text).replace("|", "\\|")


# --- mintrl-summary ------------------------------------------------------------------------------


def markdown_table(rows: Sequence[dict]) -> str:
    """The rows of :func:`mintrl.analysis.summary.summarize` as a markdown table (fractions with 3 decimals,
    deltas signed; ``n/a`` for a missing tag, ``missing`` for a job without event files)."""
    lines = [
        "| job | overrides | off-policy frac | final val pass@1 | delta pass@1 vs no-intervention |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        name = f"{r['job']} (no-intervention)" if r["no_intervention"] else str(r["job"])
        overrides = " ".join(r["varying"]) or "-"
        if r["missing"]:
            cells = ["missing (no event files)"] * 3
        else:
            cells = [fmt(r["offpolicy_frac"]), fmt(r["final_pass_at_1"]), fmt(r["delta_pass_at_1"], signed=True)]
        lines.append("| " + " | ".join([name, cell(overrides), *cells]) + " |")
    return "\n".join(lines)


def point_label(row: dict) -> str:
    """Short plot label of a :func:`mintrl.analysis.summary.summarize` row: the job name and its swept values
    without the key prefixes (``rollout.chunk_size=8`` -> ``chunk_size=8``)."""
    parts = []
    for o in row["varying"]:
        key, value = parse_override(o)
        parts.append(f"{key.rsplit('.', 1)[-1]}={value}" if value else key)
    return f"{row['job']}: " + " ".join(parts) if parts else str(row["job"])


def row_label(row: dict) -> str:
    """The label of a :func:`mintrl.analysis.summary.summarize_seeds` row: its swept values without key
    prefixes, ``(no-intervention)`` marked."""
    parts = []
    for o in row["varying"]:
        key, value = parse_override(o)
        parts.append(f"{key.rsplit('.', 1)[-1]}={value}" if value else key)
    label = " ".join(parts) or "all jobs"
    return f"{label} (no-intervention)" if row["no_intervention"] else label


def seed_table(rows: Sequence[dict]) -> str:
    """The rows of :func:`mintrl.analysis.summary.summarize_seeds` as a markdown table (pass@1 units with 3
    decimals) followed by :data:`INTERVAL_NOTE`, saying how the intervals are computed."""
    lines = [
        "| setting | seeds (n) | final val pass@1, mean [95% interval] | area under val curve, mean [95% interval] "
        "| one run's SE (N held-out rollouts) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ran = [s for s, j in zip(r["seeds"], r["jobs"]) if j not in r["missing"]]
        seeds = (",".join(str(s) for s in ran) or "none") + f" ({r['n']})"
        if r["missing"]:
            lost = [f"{j} (seed={s})" for s, j in zip(r["seeds"], r["jobs"]) if j in r["missing"]]
            seeds += "; no event files: job " + ", ".join(lost)
        se = f"{r['run_se']:.3f} (N={r['heldout_n']})" if r["run_se"] is not None else "n/a"
        cells = [row_label(r), seeds, fmt_interval(r["final_pass_at_1"]), fmt_interval(r["area_under_curve"]), se]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n\n" + INTERVAL_NOTE


# --- the reproduction report --------------------------------------------------------------------


def rows_table(rows: Sequence[Row]) -> str:
    """The reproduction rows (:func:`mintrl.analysis.rows.rows_of`) as a markdown table: seeds, final pass@1 and
    area under the held-out curve (mean [95% interval] over seeds, pass@1 units), one run's binomial SE,
    last-step entropy (nats) and the budget."""
    lines = [
        "| row | seeds (n) | final held-out pass@1 | area under held-out curve | one run's SE (N) "
        "| last-step entropy (nats) | steps | rollouts per prompt |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        s = row.stats
        ran = [seed_of(j) for j in row.jobs if j.name not in s["missing"]]
        seeds = (",".join(ran) or "none") + f" ({s['n']})"
        if s["missing"]:
            seeds += "; no event files: job " + ", ".join(s["missing"])
        se = f"{s['run_se']:.3f} (N={s['heldout_n']})" if s["run_se"] is not None else "n/a"
        ent = list(per_seed(row.jobs, last_entropy).values())
        b = row_budget(row)
        cells = [
            row.name,
            seeds,
            fmt_interval(s["final_pass_at_1"]),
            fmt_interval(s["area_under_curve"]),
            se,
            fmt_interval(mean_interval(ent)) if ent else "n/a",
            b["max_steps"] if b["max_steps"] is not None else "?",
            b["rollouts_per_prompt"] if b["rollouts_per_prompt"] is not None else "?",
        ]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


def paired_table(const: Row, grpo: Row, diff: dict) -> str:
    """Per seed: MInTRL-Const's and GRPO's final pass@1 and their difference, then the mean [interval]."""
    a, b = per_seed(const.jobs, final_pass), per_seed(grpo.jobs, final_pass)
    lines = ["| seed | MInTRL-Const | GRPO | difference |", "| --- | --- | --- | --- |"]
    for s, d in zip(diff["seeds"], diff["diffs"]):
        lines.append(f"| {s} | {a[s]:.3f} | {b[s]:.3f} | {d:+.3f} |")
    lines.append(f"| mean [95% interval] | | | {fmt_diff(diff)} |")
    return "\n".join(lines)


def effects_table(effects: Sequence[dict]) -> list[str]:
    """Markdown lines of the intensity sweep's main effects (:func:`mintrl.analysis.knob_effects.main_effects`
    on final pass@1): per knob the levels, the matched pairs, the effect with its interval, per seed, and
    the reading of the interval (:func:`mintrl.analysis.stats.verdict`)."""
    out = [
        "### Which knob moves pass@1 (main effects)",
        "",
        "Per knob: final held-out pass@1 at its highest level minus at its lowest, over the settings equal on "
        "the other knobs (matched pairs), averaged over the pairs per seed; the interval is over seeds.",
        "",
        "| knob | low -> high | matched pairs | effect on final pass@1 | per seed | reading |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in effects:
        stat = e["effect"]
        seeds = ", ".join(f"{s}: {d:+.3f}" for s, d in zip(stat["seeds"], stat["diffs"])) if stat else "n/a"
        reading = EFFECT_READING[verdict(stat)] if stat else "not measured"
        out.append(
            f"| {e['knob']} | {e['low']} -> {e['high']} | {e['pairs']} | {fmt_diff(stat)} | {seeds} | {reading} |"
        )
    return out + [""]


def render_markdown(report: dict, figures: dict[str, str]) -> str:
    """The report of :func:`mintrl.analysis.report.build_report` as markdown; ``figures`` maps a caption to a PNG path relative
    to the markdown file."""
    rows, m, w = report["rows"], report["machine"], report["wall"]
    first = rows[0].jobs[0] if rows and rows[0].jobs else None
    b = budget(first) if first is not None else {}
    out = [
        "# Reproduction: MInTRL vs GRPO on the 3-term task (`data=arithmetic_3terms`)",
        "",
        f"Written by `mintrl-reproduce` on {time.strftime('%Y-%m-%d %H:%M %Z')}; numbers below are measured, not copied.",
        "",
        f"- **multirun(s)**: `{report['multirun_dir']}`"
        + (f", intensity sweep `{report['intensity_dir']}`" if report["intensity_dir"] else ""),
        f"- **commit**: {report['commit']}",
        f"- **machine** (the one writing this report): {m['platform']}, {m['processor']}, {m['cpu_count']} logical CPUs, "
        f"Python {m['python']}, torch {m['torch']}",
        f"- **wall time**: {fmt_seconds(w['elapsed'])} from the first job's start to the last job's last logged scalar "
        "(per multirun folder, summed); "
        f"{fmt_seconds(w['step_seconds'])} summed over the jobs' logged `{STEP_SECONDS_TAG}` (training steps only)",
        f"- **task**: `{b.get('task')}`; {b.get('max_steps')} optimizer steps of {b.get('prompts_per_step')} prompts x "
        f"{b.get('rollouts_per_prompt')} rollouts (MInTRL rows: n_control + n_semi), responses up to "
        f"{b.get('max_response_tokens')} tokens",
        "- **equal budget** (steps, prompts per step, rollouts per prompt, response limit in every job's config): "
        + ("yes" if report["equal_budget"] else "**no**: compare the steps and rollouts columns"),
        "",
        "## Rows",
        "",
        rows_table(rows),
        "",
        INTERVAL_NOTE,
        "",
    ]
    const, grpo, diff = find_row(rows, CONST), find_row(rows, GRPO), report["const_minus_grpo"]
    out += ["## MInTRL-Const minus GRPO (final held-out pass@1, paired by seed)", ""]
    if diff is not None:
        out += [
            paired_table(const, grpo, diff),
            "",
            "Interval: per-seed differences d_s, mean ± t(0.975, n-1) · sd(d) / sqrt(n) (Student t over the n paired seeds).",
            "",
        ]
    else:
        out += ["Not measured: the multirun lacks a MInTRL-Const and a GRPO job of a common seed.", ""]
    out += ["## The paper's claims", "", "| claim | verdict | measured |", "| --- | --- | --- |"]
    for c in report["claims"]:
        out.append(f"| ({c.key}) {cell(c.text)} | **{c.verdict}** | {cell(c.measure)} |")
    out += [""]
    for c in report["claims"]:
        if c.next_step:
            out.append(f"- ({c.key}) {c.verdict}: {c.next_step}")
    out += [
        "",
        "Verdicts: **holds** when the 95% interval of the difference lies above 0, **does not hold** when it lies below 0, "
        "**undecided** when it contains 0 or one seed gives no interval.",
        "",
    ]
    if report["points"]:
        out += [
            "## Off-policy intensity (claim iv)",
            "",
            "| setting | seeds | off-policy token fraction (%) | delta final pass@1 vs no-intervention, paired by seed "
            "| per seed |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in sorted(report["points"], key=lambda p: (p["offpolicy_frac"] is None, p["offpolicy_frac"] or 0)):
            frac = "n/a" if p["offpolicy_frac"] is None else f"{100 * p['offpolicy_frac']:.2f}"
            seeds = ", ".join(f"{k}: {v:+.3f}" for k, v in p["per_seed"].items()) or "n/a"
            out.append(f"| {cell(p['name'])} | {p['n']} | {frac} | {fmt_diff(p['delta'])} | {seeds} |")
        out += [""]
    if report.get("effects"):
        out += effects_table(report["effects"])
    if figures:
        out += ["## Figures", ""]
        for caption, rel in figures.items():
            out += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    return "\n".join(out).rstrip() + "\n"
