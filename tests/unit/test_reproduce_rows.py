"""The reproduction report names each row from the job's composed config (`.hydra/config.yaml`: objective,
judge, allocation, guide, sft), so a multirun spelled `method=`, `experiment=` or through a sweep lands in the
paper's row; configs are composed by Hydra from configs/, as `mintrl-train` writes them."""

from __future__ import annotations

import functools

import pytest
from hydra import compose, initialize_config_dir
from multirun_helpers import write_job
from omegaconf import OmegaConf

from mintrl.analysis.report import build_report
from mintrl.analysis.rows import rows_of
from mintrl.analysis.runs import read_multirun, seed_of
from mintrl.build.config import CONFIG_DIR


@functools.cache
def _config(*overrides: str) -> dict:
    """The composed config as Hydra writes it into a job's .hydra/config.yaml (unresolved, no hydra node)."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])
    return OmegaConf.to_container(cfg, resolve=False)


def _final(value: float) -> dict:
    return {"val/pass@1": [(0, 0.05), (12, value)]}


def _write(root, jobs):
    """jobs: [(overrides, config overrides, final pass@1)] -> a multirun folder of numbered jobs."""
    for n, (overrides, composed, final) in enumerate(jobs):
        write_job(root / str(n), overrides, _final(final), _config(*composed))
    return root


METHODS = {  # method config -> the paper's name of its row
    "mintrl_const": "MInTRL-Const",
    "grpo": "GRPO",
    "no_intervention": "no-intervention",
    "mintrl_proxy": "MInTRL-Proxy",
    "mentor": "MENTOR-style",
    "intervention_grpo": "intervention-GRPO",
}


def test_a_method_multirun_gets_the_papers_rows(tmp_path):
    """`mintrl-train -m method=grpo,mintrl_const seed=0,1`: overrides name no experiment."""
    jobs = [
        ([f"method={m}", f"seed={s}"], (f"method={m}", f"seed={s}"), final)
        for m, finals in (("grpo", (0.2, 0.3)), ("mintrl_const", (0.4, 0.5)))
        for s, final in enumerate(finals)
    ]
    rows = rows_of(read_multirun(_write(tmp_path, jobs)))
    assert [r.name for r in rows] == ["GRPO", "MInTRL-Const"]
    assert [[seed_of(j) for j in r.jobs] for r in rows] == [["0", "1"], ["0", "1"]]
    report = build_report([tmp_path], repo_dir=tmp_path)
    assert report["const_minus_grpo"]["diffs"] == pytest.approx([0.2, 0.2])  # paired by seed


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_reproduction_method_is_named_from_its_config_through_the_sweep(tmp_path, method):
    sweep = ("+sweep=reproduce_full", f"method={method}", "seed=0")
    rows = rows_of(read_multirun(_write(tmp_path, [(list(sweep), sweep, 0.3)])))
    assert [r.name for r in rows] == [METHODS[method]]


def test_the_committed_experiment_spelling_and_the_method_spelling_pool_into_one_row(tmp_path):
    """results/ recorded `experiment=math/grpo_cpu` (an alias of method=grpo since deleted); a later seed run
    as `method=grpo` with the same other overrides adds to the same row."""
    jobs = [
        (
            ["experiment=math/grpo_cpu", "seed=0", "+sweep=reproduce_core"],
            ("+sweep=reproduce_core", "method=grpo"),
            0.2,
        ),
        (["method=grpo", "seed=1", "+sweep=reproduce_core"], ("+sweep=reproduce_core", "method=grpo", "seed=1"), 0.3),
    ]
    rows = rows_of(read_multirun(_write(tmp_path, jobs)))
    assert [(r.name, [seed_of(j) for j in r.jobs]) for r in rows] == [("GRPO", ["0", "1"])]
    assert rows[0].stats["final_pass_at_1"]["mean"] == pytest.approx(0.25)


def test_a_swept_knob_stays_in_the_name_and_an_unknown_method_keeps_its_overrides(tmp_path):
    jobs = [
        (
            ["method=mintrl_const", "rollout.max_reviews=1", "seed=0"],
            ("method=mintrl_const", "rollout.max_reviews=1"),
            0.3,
        ),
        (
            ["method=mintrl_const", "rollout.max_reviews=4", "seed=0"],
            ("method=mintrl_const", "rollout.max_reviews=4"),
            0.3,
        ),
        (["method=bread", "rollout.max_reviews=4", "seed=0"], ("method=bread", "rollout.max_reviews=4"), 0.3),
    ]
    rows = rows_of(read_multirun(_write(tmp_path, jobs)))
    assert [r.name for r in rows] == [
        "MInTRL-Const rollout.max_reviews=1",
        "MInTRL-Const rollout.max_reviews=4",
        "method=bread rollout.max_reviews=4 (no-intervention)",  # a guided row: none of the report's (judge=always_keep)
    ]


def test_grpo_with_an_off_policy_correction_is_a_row_of_its_own_beside_grpo(tmp_path):
    """`method=grpo_tis` composes GRPO plus `objective.off_policy_correction=tis`: not the paper's GRPO row.
    At one staleness and seed it is another job than `method=grpo` (at staleness 0 it trains alike, but its
    config differs), so the two are two rows (GRPO-TIS named from its config), not one setting run twice at one seed."""
    jobs = [
        ([f"method={m}", "rollout.max_staleness=0", "seed=100"], (f"method={m}", "rollout.max_staleness=0"), final)
        for m, final in (("grpo", 0.2), ("grpo_tis", 0.2))
    ]
    rows = rows_of(read_multirun(_write(tmp_path, jobs)))
    assert [r.name for r in rows] == ["GRPO", "GRPO-TIS"]


def test_the_report_goes_into_the_first_multirun_folder_unless_told(tmp_path, monkeypatch):
    """`mintrl-reproduce <multirun>` without --out writes <multirun>/reproduction.md, never a docs/ of the
    folder it runs in (the committed report is written only by name: --out docs/reproduction.md)."""
    from mintrl.cli.reproduce import main as reproduce_main

    jobs = [([f"method={m}", "seed=0"], (f"method={m}",), 0.3) for m in ("grpo", "mintrl_const")]
    multirun = _write(tmp_path / "multirun", jobs)
    monkeypatch.chdir(tmp_path)
    assert reproduce_main([str(multirun)]) == 0
    assert not (tmp_path / "docs").exists()
    text = (multirun / "reproduction.md").read_text()
    assert "| MInTRL-Const | 0 (1) |" in text and "| GRPO | 0 (1) |" in text
