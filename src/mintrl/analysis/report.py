"""The report behind ``make reproduce`` and ``mintrl-reproduce``: the paper's comparison on the 3-term task
(``data=arithmetic_3terms``: three one-digit terms, ``+``), with
intervals over seeds and a measured verdict for each of the paper's claims.

Input: a Hydra multirun of ``configs/sweep/reproduce_core.yaml`` (or ``reproduce_full.yaml``), i.e. rows
``method=<row>`` crossed with ``seed=0,1,2``, and for the full reproduction a second multirun of
``reproduce_intensity.yaml`` (MInTRL-Const with chunk size x reviews x correction length); several folders of
each are pooled (:func:`mintrl.analysis.runs.read_multiruns`: seeds added by a later multirun). Jobs are grouped
by seed into rows named as the paper names its methods (:mod:`mintrl.analysis.rows`).

Output (:func:`write_report`): a markdown file (``mintrl-reproduce``: ``reproduction.md`` in the first multirun
folder unless ``--out`` names another, e.g. the committed ``docs/reproduction.md``;
:func:`mintrl.analysis.tables.render_markdown`) with the table (per row the mean and 95% interval over seeds
of the final held-out pass@1 and of the area under the held-out curve, pass@1 units 0-1), the paired
MInTRL-Const minus GRPO difference, the commits the jobs' run manifests recorded, the machine, the wall time,
the budget each row ran with (steps, rollouts per prompt, read from the jobs' configs), the claims with their
verdicts (:mod:`mintrl.analysis.claims`), which knob of the intensity sweep moves pass@1
(:func:`mintrl.analysis.knob_effects.main_effects`), and figures (PNG next to the markdown,
:mod:`mintrl.analysis.plots`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mintrl.analysis.claims import (
    NOT_MEASURED,
    Claim,
    claim_beats_grpo,
    claim_entropy,
    claim_gap_narrows,
    intensity_next_step,
    intensity_points,
    inverted_u,
)
from mintrl.analysis.knob_effects import main_effects
from mintrl.analysis.measures import final_pass
from mintrl.analysis.plots import plot_curves, plot_intensity_points, plot_training
from mintrl.analysis.report_blocks import keep_blocks
from mintrl.analysis.rows import CONST, GRPO, NO_INTERVENTION, Row, equal_budget, find_row, paper_order, rows_of
from mintrl.analysis.runs import folder_list, job_commits, read_multiruns, seed_of, wall_time
from mintrl.analysis.stats import FAILS, HOLDS
from mintrl.analysis.tables import fmt_commits, render_markdown
from mintrl.core.manifest import git_commit, machine


def build_report(
    multirun_dir: str | Path | Sequence[str | Path],
    intensity_dir: str | Path | Sequence[str | Path] | None = None,
    repo_dir: str | Path = ".",
) -> dict:
    """Read the multirun(s) and compute everything the report says (no files written).

    Args:
        multirun_dir: the methods multirun (``+sweep=reproduce_core`` or ``reproduce_full``), or a list of
            such folders whose jobs are pooled (:func:`mintrl.analysis.runs.read_multiruns`: seeds added by a
            later multirun).
        intensity_dir: the ``+sweep=reproduce_intensity`` multirun, or a list of such folders whose jobs are
            pooled (seeds added later), or None (claim (iv) not measured).
        repo_dir: where ``git rev-parse HEAD`` runs (named when the jobs recorded no commit).

    Returns:
        ``{"rows", "intensity_rows", "claims", "const_minus_grpo", "points", "effects", "commit", "machine",
        "wall", "equal_budget", "multirun_dir", "intensity_dir"}``; ``effects`` is the intensity sweep's
        :func:`~mintrl.analysis.knob_effects.main_effects` on final pass@1 (empty without a sweep), ``commit`` the
        markdown of :func:`mintrl.analysis.tables.fmt_commits`, ``multirun_dir`` the folders joined by ``, ``.

    Raises:
        FileNotFoundError: a folder is missing or holds no Hydra job (:func:`mintrl.analysis.runs.find_jobs`).
        ValueError: a seed is run twice for one row (:func:`mintrl.analysis.runs.read_multiruns`), or a job's run
            manifest is not valid JSON.
    """
    folders = folder_list(multirun_dir)
    dirs, jobs = read_multiruns(folders)
    rows = sorted(rows_of(jobs), key=paper_order)  # folders added later (a baseline's seed) keep the table's order
    const, grpo = find_row(rows, CONST), find_row(rows, GRPO)
    c1, diff = claim_beats_grpo(const, grpo)
    c2, _ = claim_gap_narrows(const)
    c3, _ = claim_entropy(const, grpo)
    intensity_rows: list[Row] = []
    points: list[dict] = []
    effects: list[dict] = []
    text4 = "The off-policy intensity sweep shows an inverted U in the off-policy token fraction (paper: 2-4% best)."
    all_jobs = list(jobs)
    ifolders = folder_list(intensity_dir)
    if ifolders:
        ipaths, ijobs = read_multiruns(ifolders)
        dirs += ipaths
        all_jobs += ijobs
        intensity_rows = rows_of(ijobs)
        settings = intensity_rows + ([const] if const is not None else [])
        baseline = find_row(rows, NO_INTERVENTION)
        points = intensity_points(settings, baseline)
        v4, why4 = inverted_u(points)
        effects = main_effects(ijobs, final_pass, seed_of)
        c4 = Claim("iv", text4, v4, why4, "" if v4 in (HOLDS, FAILS) else intensity_next_step(intensity_rows, baseline))
    else:
        c4 = Claim("iv", text4, NOT_MEASURED, "no intensity sweep (make reproduce-full runs it)")
    return {
        "rows": rows,
        "intensity_rows": intensity_rows,
        "claims": [c1, c2, c3, c4],
        "const_minus_grpo": diff,
        "points": points,
        "effects": effects,
        "commit": fmt_commits(job_commits(all_jobs), git_commit(repo_dir)),
        "machine": machine(),
        "wall": wall_time(dirs, all_jobs),
        "equal_budget": equal_budget(rows + intensity_rows),
        "multirun_dir": ", ".join(str(f) for f in folders),
        "intensity_dir": ", ".join(str(f) for f in ifolders) or None,
    }


def figure_paths(out: str | Path, intensity: bool) -> dict[str, Path]:
    """The report's figures, caption -> PNG path next to ``out``: ``<stem>_curves.png`` (held-out curves
    with bands), ``<stem>_training.png`` (reward gap and entropy) and, with an intensity sweep
    (``intensity``), ``<stem>_intensity.png``."""
    out = Path(out)
    figures = {
        "Held-out pass@1 per row, mean over seeds with the 95% interval band": out.with_name(f"{out.stem}_curves.png"),
        "reward/gap and train/policy_entropy per row, mean over seeds with the 95% interval band": out.with_name(
            f"{out.stem}_training.png"
        ),
    }
    if intensity:
        figures["Off-policy intensity: delta final pass@1 vs off-policy token fraction"] = out.with_name(
            f"{out.stem}_intensity.png"
        )
    return figures


def write_report(
    multirun_dir: str | Path | Sequence[str | Path],
    out: str | Path = "docs/reproduction.md",
    intensity_dir: str | Path | Sequence[str | Path] | None = None,
    repo_dir: str | Path = ".",
) -> dict:
    """Write the reproduction report: the markdown at ``out`` and its figures next to it
    (``<stem>_curves.png``: held-out curves with bands; ``<stem>_training.png``: reward gap and entropy;
    ``<stem>_intensity.png`` with an intensity sweep). The sections that ``out`` already holds between the
    markers of :mod:`mintrl.analysis.report_blocks` (the agents section of ``mintrl-reproduce-agents``, the
    confirmation section of ``mintrl-reproduce-confirm``) are kept, unchanged and in their order, at the end of
    the rewritten file.

    Returns:
        :func:`build_report`'s dict plus ``out`` (Path) and ``figures`` (caption -> PNG path).

    Raises:
        FileNotFoundError: a multirun folder is missing or holds no job.
        ValueError: see :func:`build_report`; ``out``'s block markers are malformed.
    """
    import matplotlib.pyplot as plt

    report = build_report(multirun_dir, intensity_dir, repo_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figures = figure_paths(out, bool(report["points"]))
    paths = list(figures.values())
    # plot_curves labels a row by its "varying" overrides: give it the row's name instead
    named = [{**r.stats, "varying": [r.name.replace("=", ":")], "no_intervention": False} for r in report["rows"]]
    plt.close(plot_curves(named, paths[0], title="Held-out pass@1 (3-term task)"))
    plt.close(plot_training(report["rows"], paths[1]))
    if report["points"]:
        plt.close(plot_intensity_points(report["points"], paths[2]))
    text = render_markdown(report, {c: p.name for c, p in figures.items()})
    if out.is_file():  # the agents and confirmation sections stay, unchanged, at the end
        text = keep_blocks(text, out.read_bytes().decode("utf-8"))
    out.write_text(text)
    return {**report, "out": out, "figures": figures}
