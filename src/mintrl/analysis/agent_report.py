"""The report behind ``make reproduce-agents`` and ``mintrl-reproduce-agents``: RAIL against uniform GRPO-8 and
entropy branching at exactly 8 episodes per task on agent tasks (RAIL Figure 1 at CPU scale), with intervals
and a measured verdict for each of RAIL's claims R1-R4 (:mod:`mintrl.analysis.agent_claims`).

Input: the multiruns of ``configs/sweep/reproduce_agents.yaml`` (SQL level ``data=sql_schema``, seeds 0,1,2;
several folders pool their seeds) and of ``reproduce_agents_shell.yaml`` (shell level ``data=shell_files``,
seed 0). Jobs are pooled into rows by (level, experiment) (:mod:`mintrl.analysis.agent_rows`); the claims are
measured on the level of the SQL folders' jobs.

Output (:func:`write_agents_report`): the agents section (:func:`mintrl.analysis.agent_tables.render_agents_section`)
put into the markdown file (default ``docs/reproduction.md``) between its markers, the rest of the file left byte for
byte (:mod:`mintrl.analysis.report_blocks`), and the figure ``agents_success_vs_episodes.png`` next to it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Sequence

from mintrl.analysis.agent_claims import measure_claims
from mintrl.analysis.agent_plots import plot_success_vs_episodes
from mintrl.analysis.agent_rows import agent_rows, level_of, summarize_agent_row
from mintrl.analysis.agent_tables import render_agents_section
from mintrl.analysis.measures import budget
from mintrl.analysis.report_blocks import AGENTS, put_block
from mintrl.analysis.runs import Job, folder_list, job_commits, read_multiruns, wall_time
from mintrl.analysis.tables import fmt_commits
from mintrl.core.manifest import git_commit, machine, manifest_path

FIGURE_NAME = "agents_success_vs_episodes.png"


def job_machines(jobs: Sequence[Job]) -> str:
    """The machines the jobs' run manifests recorded (``machine`` of ``manifest.json``), with their job counts,
    e.g. ``Linux-6.1-x86_64, 2 logical CPUs, torch 2.5.0+cpu (9 jobs)``; ``not recorded`` for jobs without one.

    Raises:
        ValueError: a manifest is not valid JSON (names it).
    """
    counts: Counter = Counter()
    for job in jobs:
        path = manifest_path(job.path)
        m = None
        if path.is_file():
            try:
                m = json.loads(path.read_text()).get("machine")
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from e
        what = (
            f"{m.get('platform')}, {m.get('cpu_count')} logical CPUs, torch {m.get('torch')}"
            if isinstance(m, dict)
            else "not recorded"
        )
        counts[what] += 1
    return "; ".join(f"{k} ({n} job{'s' if n != 1 else ''})" for k, n in counts.items()) or "no jobs"


def settings_of(jobs: Sequence[Job]) -> str:
    """The steps and tasks per step the jobs ran with (their configs, :func:`mintrl.analysis.measures.budget`), each
    value set once: ``6 optimizer steps of 4 tasks``; several values are listed."""

    def values(key: str) -> str:
        found = sorted({b[key] for b in map(budget, jobs) if b[key] is not None})
        return "/".join(map(str, found)) or "?"

    return f"{values('max_steps')} optimizer steps of {values('prompts_per_step')} tasks"


def build_agents_report(
    sql_dirs: str | Path | Sequence[str | Path],
    shell_dirs: str | Path | Sequence[str | Path] | None = None,
    repo_dir: str | Path = ".",
) -> dict:
    """Read the multiruns and compute everything the agents section says (no files written).

    Args:
        sql_dirs: the ``+sweep=reproduce_agents`` multirun folder(s) (seeds added later pool); the claims are
            measured on the most common level of their jobs (``sql_schema``).
        shell_dirs: the ``+sweep=reproduce_agents_shell`` folder(s), or None.
        repo_dir: where ``git rev-parse HEAD`` runs (named when the jobs recorded no commit).

    Returns:
        ``{"levels", "level", "rows", "summaries", "claims", "measures", "points", "commit", "machine",
        "job_machines", "wall", "settings", "sql_dirs", "shell_dirs"}``: ``rows`` the
        :class:`~mintrl.analysis.agent_rows.AgentRow` list and ``summaries`` their
        :func:`~mintrl.analysis.agent_rows.summarize_agent_row` (same order), ``level`` the claims' level,
        ``claims`` R1-R4 (:class:`mintrl.analysis.claims.Claim`), ``measures`` what each claim measured
        (``{"R1": ..., ...}``), ``points`` the figure's points (success 0-1 against episodes per task).

    Raises:
        FileNotFoundError: a folder is missing or holds no Hydra job (:func:`mintrl.analysis.runs.find_jobs`).
        ValueError: a seed is run twice for one row, a decisions line or a manifest is not valid JSON.
    """
    sql, shell = folder_list(sql_dirs), folder_list(shell_dirs)
    dirs, jobs = read_multiruns(sql)
    sql_levels = Counter(level_of(j) for j in jobs)
    if shell:
        more_dirs, more_jobs = read_multiruns(shell)
        dirs, jobs = dirs + more_dirs, jobs + more_jobs
    rows = agent_rows(jobs)
    level = sql_levels.most_common(1)[0][0]
    claims, measures = measure_claims(rows, level)
    summaries = [summarize_agent_row(r) for r in rows]
    points = [
        {
            "level": r.level,
            "experiment": r.experiment,
            "label": r.label,
            "x": s["generated"],
            "y": s["interval"]["mean"] if s["interval"] else None,
            "low": s["interval"]["low"] if s["interval"] else None,
            "high": s["interval"]["high"] if s["interval"] else None,
            "method": s["interval"]["method"] if s["interval"] else None,
        }
        for r, s in zip(rows, summaries)
    ]
    return {
        "levels": list(dict.fromkeys(r.level for r in rows)),
        "level": level,
        "rows": rows,
        "summaries": summaries,
        "claims": claims,
        "measures": measures,
        "points": points,
        "commit": fmt_commits(job_commits(jobs), git_commit(repo_dir)),
        "machine": machine(),
        "job_machines": job_machines(jobs),
        "wall": wall_time(dirs, jobs),
        "settings": settings_of(jobs),
        "sql_dirs": ", ".join(str(f) for f in sql),
        "shell_dirs": ", ".join(str(f) for f in shell) or None,
    }


def write_agents_report(
    sql_dirs: str | Path | Sequence[str | Path],
    out: str | Path = "docs/reproduction.md",
    shell_dirs: str | Path | Sequence[str | Path] | None = None,
    repo_dir: str | Path = ".",
) -> dict:
    """Write the agents section into ``out`` (replacing its block between the markers, else appended; every other
    byte of the file kept; the file is created when absent) and the figure :data:`FIGURE_NAME` next to it
    (held-out success vs episodes generated per task, RAIL Figure 1).

    Returns:
        :func:`build_agents_report`'s dict plus ``out`` (Path) and ``figure`` (the PNG's Path).

    Raises:
        FileNotFoundError: a multirun folder is missing or holds no job.
        ValueError: see :func:`build_agents_report`; ``out``'s markers are malformed
            (:func:`mintrl.analysis.report_blocks.block_span`).
    """
    import matplotlib.pyplot as plt

    report = build_agents_report(sql_dirs, shell_dirs, repo_dir)
    out = Path(out)
    old = out.read_bytes().decode("utf-8") if out.is_file() else ""
    text = put_block(old, render_agents_section(report, FIGURE_NAME), AGENTS)  # checks the markers before writing
    out.parent.mkdir(parents=True, exist_ok=True)
    figure = out.with_name(FIGURE_NAME)
    plt.close(plot_success_vs_episodes(report["points"], figure))
    out.write_bytes(text.encode("utf-8"))
    return {**report, "out": out, "figure": figure}
