"""The staleness study's report (``mintrl-reproduce-staleness``, ``make staleness-report``): the committed plan is
what Hydra composes, rows read from job folders laid out as ``make staleness`` writes them, final pass@1 and the
off-policy measures per row, the cost of staleness paired by seed (hand-computed), interim while a planned job is
missing, and the writers keep each other's blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from multirun_helpers import write_job

from mintrl.analysis.confirm import read_plan, sweep_file
from mintrl.analysis.report_blocks import CONFIRM, STALENESS, block_span, markers
from mintrl.analysis.staleness_report import render_staleness_section, write_staleness
from mintrl.analysis.staleness_study import STALENESS_SWEEP, build_study, row_parts
from mintrl.cli.reproduce_staleness import main as staleness_main

T2 = 4.302652729911275  # t(0.975, 2): 3 seeds
SEEDS = (100, 101, 102)
COMMIT = "c" * 40
# final held-out pass@1 at seeds 100, 101, 102
FINALS = {
    ("mintrl_const", 0): (0.40, 0.45, 0.42),
    ("mintrl_const", 2): (0.38, 0.44, 0.40),  # costs -0.02, -0.01, -0.02
    ("grpo", 0): (0.30, 0.35, 0.32),
    ("grpo", 2): (0.20, 0.25, 0.24),  # costs -0.10, -0.10, -0.08
}


def small_plan(folder: Path) -> Path:
    """A staleness sweep file: MInTRL-Const and GRPO at staleness 0 and 2, seeds 100-102 (12 jobs)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{STALENESS_SWEEP}.yaml"
    params = ["method: mintrl_const,grpo", "rollout.max_staleness: 0,2", "seed: 100,101,102"]
    path.write_text("hydra:\n  sweeper:\n    params:\n" + "".join(f"      {p}\n" for p in params))
    return path


def staleness_job(root: Path, method: str, s: int, seed: int, final: float, finished: bool = True) -> Path:
    """One job as ``make staleness`` lays it out (``<root>/<method>_st<s>_s<seed>_<commit>/0/``): held-out pass@1
    ending at ``final``; at ``s > 0`` train/staleness 0, 1, 2, 2 (mean 1.25) and, for GRPO, importance weights whose
    largest is 2.5."""
    folder = root / f"{method}_st{s}_s{seed}_{COMMIT[:7]}"
    scalars = {"val/pass@1": [(0, 0.05), (4, final)], "train/staleness": [(k, min(k, s)) for k in range(4)]}
    if s and method == "grpo":
        scalars["objective/is_weight_max"] = [(1, 1.5), (2, 2.5), (3, 2.0)]
    overrides = [f"method={method}", f"rollout.max_staleness={s}", f"seed={seed}", f"+sweep={STALENESS_SWEEP}"]
    write_job(folder / "0", overrides, scalars)
    (folder / "0" / "manifest.json").write_text(json.dumps({"commit": COMMIT}))
    if finished:
        (folder / "0" / "summary.json").write_text("{}")
    (folder / "multirun.yaml").write_text("hydra: {}\n")
    return folder


def all_jobs(root: Path, skip: tuple | None = None) -> list[Path]:
    return [
        staleness_job(root, method, s, seed, finals[i], finished=(method, s, seed) != skip)
        for (method, s), finals in FINALS.items()
        for i, seed in enumerate(SEEDS)
    ]


def test_the_committed_plan_is_three_methods_at_three_staleness_levels_and_three_seeds():
    plan = read_plan(sweep_file(STALENESS_SWEEP))
    assert plan.keys == ("method", "rollout.max_staleness") and plan.seeds == ("100", "101", "102")
    assert [row_parts(r) for r in plan.rows] == [
        (m, s) for m in ("mintrl_const", "grpo", "grpo_tis") for s in (0, 1, 2)
    ]
    assert len(plan.pairs) == 27


def test_the_rows_and_the_cost_of_staleness_paired_by_seed_by_hand(tmp_path):
    study = build_study(all_jobs(tmp_path / "runs"), small_plan(tmp_path / "plan"))
    assert study.blocked is None and list(study.commits) == [COMMIT]
    by = {(r.method, r.staleness): r for r in study.rows}
    assert by["grpo", 2].pass_stat["mean"] == pytest.approx(0.23)
    assert by["grpo", 2].measures == pytest.approx({"train/staleness": 1.25, "objective/is_weight_max": 2.5})
    assert by["mintrl_const", 0].measures == {"train/staleness": 0.0}
    costs = {(c["method"], c["staleness"], c.get("vs")): c["cost"] for c in study.costs}
    assert costs["mintrl_const", 2, None]["diffs"] == pytest.approx([-0.02, -0.01, -0.02])
    assert costs["grpo", 2, None]["diffs"] == pytest.approx([-0.10, -0.10, -0.08])
    # MInTRL-Const's cost minus GRPO's: 0.08, 0.09, 0.06; mean 0.076667, sd 0.015275, half-width t2 x sd / sqrt 3
    vs = costs["grpo", 2, "mintrl_const"]
    assert vs["diffs"] == pytest.approx([0.08, 0.09, 0.06])
    assert vs["mean"] == pytest.approx(0.0766667, abs=1e-6)
    assert vs["half_width"] == pytest.approx(T2 * 0.0152753 / 3**0.5, rel=1e-4)
    text = render_staleness_section(study)
    assert "**final**" in text and "| `grpo` | 2 | 3 | 0.230 [" in text and "| 1.250 |" in text and "2.500" in text
    assert "| `mintrl_const`'s cost minus `grpo`'s | 2 | +0.077 [+0.039, +0.115] (n=3) |" in text


def test_a_missing_job_leaves_the_numbers_interim(tmp_path):
    folders = all_jobs(tmp_path / "runs", skip=("grpo", 2, 101))
    study = build_study(folders, small_plan(tmp_path / "plan"))
    assert study.blocked == "pending: 11 of 12 jobs finished"
    passes = [r.passes for r in study.rows if (r.method, r.staleness) == ("grpo", 2)]
    assert passes == [pytest.approx({"100": 0.20, "102": 0.24})]  # float32 in TensorBoard
    assert "**interim (pending: 11 of 12 jobs finished)**" in render_staleness_section(study)


def test_the_writer_keeps_the_other_blocks_and_the_cli_reports(tmp_path, capsys):
    out = tmp_path / "reproduction.md"
    confirm = "\n".join([markers(CONFIRM)[0], "## confirm\r\nkept as is ", markers(CONFIRM)[1]])
    out.write_bytes(f"# head\n\n{confirm}\n\ntail\n".encode())
    plan = small_plan(tmp_path / "plan")
    write_staleness([], out, plan)  # nothing finished yet
    assert (
        staleness_main(["--runs", *map(str, all_jobs(tmp_path / "runs")), "--out", str(out), "--sweep", str(plan)]) == 0
    )
    text = out.read_bytes().decode()  # byte for byte: the \r\n kept
    assert text.startswith(f"# head\n\n{confirm}\n\ntail\n") and block_span(text, STALENESS) is not None
    assert text.count(markers(STALENESS)[0]) == 1
    assert "staleness: 12 of 12 planned jobs finished, 0 not in the plan; numbers final" in capsys.readouterr().out
