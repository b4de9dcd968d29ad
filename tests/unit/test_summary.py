"""Multirun summary (MInTRL Figure 6), intervals over seeds and sweep configs, on a fabricated multirun with
known numbers (tests/multirun_helpers.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from multirun_helpers import JOBS

from mintrl.analysis import measures, runs, stats, summary, tables
from mintrl.build.config import CONFIG_DIR
from mintrl.cli.summary import main as summary_main
from mintrl.core.verdict import Verdict
from mintrl.judge.base import Judge


def test_jobs_are_read_in_job_order_and_a_job_without_events_is_missing(multirun):
    jobs = runs.read_multirun(multirun)
    assert [j.name for j in jobs] == ["0", "1", "2", "10"]
    assert jobs[1].overrides == JOBS["1"][0]
    assert jobs[3].scalars is None and jobs[0].scalars is not None


def test_summary_rows_offpolicy_fraction_final_pass_and_delta(multirun):
    rows = {r["job"]: r for r in summary.summarize(runs.read_multirun(multirun))}
    assert rows["0"]["no_intervention"] and not rows["1"]["no_intervention"]
    assert rows["0"]["pass_at_1_tag"] == "val/reward" and rows["1"]["pass_at_1_tag"] == "val/pass@1"
    assert rows["0"]["final_pass_at_1"] == pytest.approx(0.30, abs=1e-6)
    assert rows["1"]["offpolicy_frac"] == pytest.approx(0.02, abs=1e-6)
    assert rows["2"]["offpolicy_frac"] == pytest.approx(0.05, abs=1e-6)
    assert rows["1"]["final_pass_at_1"] == pytest.approx(0.35, abs=1e-6)
    assert rows["1"]["delta_pass_at_1"] == pytest.approx(0.05, abs=1e-6)
    assert rows["2"]["delta_pass_at_1"] == pytest.approx(-0.05, abs=1e-6)
    assert rows["0"]["delta_pass_at_1"] == pytest.approx(0.0, abs=1e-9)
    assert rows["10"]["missing"] and rows["10"]["final_pass_at_1"] is None and rows["10"]["delta_pass_at_1"] is None
    assert rows["1"]["varying"] == ["rollout.max_reviews=1"]  # shared overrides are left out


def test_without_a_no_intervention_job_deltas_are_none(multirun):
    jobs = [j for j in runs.read_multirun(multirun) if j.name != "0"]
    assert all(r["delta_pass_at_1"] is None for r in summary.summarize(jobs))
    base = runs.read_job(multirun / "0")  # an explicit baseline run
    rows = summary.summarize(jobs, baseline=base)
    assert rows[0]["delta_pass_at_1"] == pytest.approx(0.05, abs=1e-6)


def test_no_intervention_detection_and_baseline_matching():
    assert runs.is_no_intervention(["judge=always_keep"])
    assert runs.is_no_intervention(["judge=none"])  # the same judge, as runs recorded it before its rename
    assert runs.is_no_intervention(["+rollout.n_semi=0"])
    assert runs.is_no_intervention(["experiment=no_intervention"])
    assert runs.is_no_intervention([], {"judge": {"_target_": "mintrl.judge.always_keep.AlwaysKeepJudge"}})
    assert runs.is_no_intervention([], {"rollout": {"n_semi": 0}})
    assert not runs.is_no_intervention(
        ["judge=rule", "rollout.n_semi=2"], {"judge": {"_target_": "mintrl.judge.rule.RuleJudge"}}
    )
    baselines = [(["seed=0", "judge=always_keep"], 0.3), (["seed=1", "judge=always_keep"], 0.5)]
    assert summary.baseline_pass_at_1(["seed=1", "judge=rule"], baselines) == 0.5
    assert summary.baseline_pass_at_1(["judge=rule"], baselines) == pytest.approx(0.4)  # tie: mean
    assert summary.baseline_pass_at_1(["judge=rule"], []) is None
    assert runs.normalize_override("rollout.progress=False") == "rollout.progress=false"


class NeverRevises(Judge):
    """A judge no analysis code names: it declares that it never revises."""

    finds_errors = False

    def review(self, requests):
        return [Verdict() for _ in requests]


class Revises(Judge):
    """A judge keeping the base class's declaration (it finds errors)."""

    def review(self, requests):
        return [Verdict() for _ in requests]


def _judge(cls: type) -> dict:
    return {"judge": {"_target_": f"{cls.__module__}.{cls.__qualname__}"}}


def test_the_baseline_is_the_judge_class_that_declares_it_never_revises():
    assert runs.is_no_intervention([], _judge(NeverRevises))  # no override, no class name known to the analysis
    assert not runs.is_no_intervention([], _judge(Revises))
    assert runs.judge_never_revises(f"{NeverRevises.__module__}.NeverRevises") is True
    # committed runs recorded the always-keep judge at its older places: looked up where it lives now
    assert runs.judge_never_revises("mintrl.judge.none.KeepJudge") is True
    assert runs.judge_never_revises("mintrl.judge.keep.KeepJudge") is True
    assert not runs.is_no_intervention([], {"judge": {"_target_": "mintrl.judge.rule.RuleJudge"}})
    # a judge class that no longer imports: a warning names it and the overrides decide
    gone = {"judge": {"_target_": "mintrl.judge.removed_in_a_refactor.GoneJudge"}}
    with pytest.warns(UserWarning, match="removed_in_a_refactor.GoneJudge.*does not import"):
        assert runs.is_no_intervention(["seed=0"], gone) is False
    assert runs.is_no_intervention(["judge=always_keep"], gone) is True
    # a target that imports but is not a Judge declares nothing: a warning, and the overrides decide
    with pytest.warns(UserWarning, match="'collections.OrderedDict' is not a judge class"):
        assert runs.judge_never_revises("collections.OrderedDict") is None


def test_table_lists_the_numbers_and_the_missing_job(multirun):
    table = tables.markdown_table(summary.summarize(runs.read_multirun(multirun)))
    lines = table.splitlines()
    assert lines[0].startswith(
        "| job | overrides | off-policy frac | final val pass@1 | delta pass@1 vs no-intervention"
    )
    assert "| 0 (no-intervention) | judge=always_keep | 0.000 | 0.300 | +0.000 |" in lines
    assert "| 1 | rollout.max_reviews=1 | 0.020 | 0.350 | +0.050 |" in lines
    assert "| 2 | rollout.max_reviews=4 | 0.050 | 0.250 | -0.050 |" in lines
    assert any(line.startswith("| 10 |") and "missing" in line for line in lines)


def test_cli_prints_table_writes_figure_and_json(multirun, tmp_path, capsys):
    fig, rows = tmp_path / "fig" / "intensity.png", tmp_path / "rows.json"
    assert summary_main([str(multirun), "--figure", str(fig), "--json", str(rows)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | rollout.max_reviews=1 | 0.020 | 0.350 | +0.050 |" in out
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 5000
    data = json.loads(rows.read_text())
    assert [r["job"] for r in data] == ["0", "1", "2", "10"]
    assert data[2]["delta_pass_at_1"] == pytest.approx(-0.05, abs=1e-6)


def test_cli_errors_name_the_directory(tmp_path, capsys):
    empty = tmp_path / "empty_multirun"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="empty_multirun"):
        runs.find_jobs(empty)
    with pytest.raises(SystemExit) as e:
        summary_main([str(empty)])
    assert e.value.code == 2 and str(empty) in capsys.readouterr().err
    with pytest.raises(SystemExit):
        summary_main([str(tmp_path / "nowhere")])
    assert "nowhere" in capsys.readouterr().err


# --- sweep configs --------------------------------------------------------------------------------

SWEEPS = {
    "intensity": {"rollout.chunk_size", "rollout.max_reviews", "rollout.continuation_len"},
    "kappa": {"objective.kappa"},
    "anchor": {"objective"},
    "judge": {"judge"},
}


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_sweep_configs_compose_and_every_job_composes(name):
    from omegaconf import OmegaConf

    params = dict(_compose([f"+sweep={name}"]).hydra.sweeper.params)
    assert set(params) == SWEEPS[name]
    grid = [[f"{k}={v}" for v in str(values).split(",")] for k, values in params.items()]
    jobs = list(itertools.product(*grid))
    assert 2 <= len(jobs) <= 8  # CPU-sized
    for job in jobs:
        cfg = _compose([f"+sweep={name}", *job])
        for o in job:
            key, value = o.split("=")
            got = cfg.hydra.runtime.choices[key] if key in ("objective", "judge") else OmegaConf.select(cfg, key)
            assert str(got) == value
    # callbacks=sweep: no Lightning checkpoint (last or best), the policy exported in bf16, summary.json
    assert cfg.hydra.runtime.choices["callbacks"] == "sweep" and "best" not in cfg.callbacks
    assert cfg.callbacks.checkpoint.save_last is False and cfg.callbacks.checkpoint.save_top_k == 0
    assert cfg.callbacks.hf_export.dtype == "bfloat16" and OmegaConf.to_container(cfg.callbacks.summary)[
        "path"
    ].endswith("/summary.json")
    if name == "intensity":
        assert {len(str(v).split(",")) for v in params.values()} == {2}
    if name == "judge":
        assert "always_keep" in str(params["judge"]).split(",")
        assert cfg.hydra.runtime.choices["intervention"] == "self_privileged"
    if name == "kappa":
        assert _compose([f"+sweep={name}"]).hydra.runtime.choices["objective"] == "regression_const"


# --- seeds and intervals (hand-computed on SEEDED_JOBS) -------------------------------------------

# Student t 0.975 quantiles to 4 decimals (statistical tables): df -> t
T_975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 10: 2.2281, 20: 2.0860, 30: 2.0423,
         40: 2.0211, 60: 2.0003, 120: 1.9799}  # fmt: skip


def test_t_quantiles_and_mean_interval_on_hand_values():
    for df, t in T_975.items():
        assert stats.t_quantile_975(df) == pytest.approx(t, abs=5e-5), df
    assert stats.t_quantile_975(35) == pytest.approx(2.0301, abs=5e-5)  # between the tabulated 30 and 40
    assert stats.t_quantile_975(100_000) == pytest.approx(1.9600, abs=5e-5)  # the normal limit
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="df"):
            stats.t_quantile_975(bad)
    # [0.5, 0.6, 0.7]: mean 0.6, s = 0.1, half width 4.3027 * 0.1 / sqrt(3) = 0.24842
    stat = stats.mean_interval([0.5, 0.6, 0.7])
    assert stat["n"] == 3 and stat["mean"] == pytest.approx(0.6) and stat["sd"] == pytest.approx(0.1)
    assert stat["half_width"] == pytest.approx(0.24842, abs=1e-5)
    assert (stat["low"], stat["high"]) == pytest.approx((0.35158, 0.84842), abs=1e-5)
    one = stats.mean_interval([0.45])
    assert one["mean"] == 0.45 and one["half_width"] is None and one["low"] is None
    assert tables.fmt_interval(one) == "0.450 (n=1, no interval)"
    assert tables.fmt_interval(stat) == "0.600 [0.352, 0.848]"
    with pytest.raises(ValueError, match="at least one"):
        stats.mean_interval([])
    with pytest.raises(ValueError, match="non-finite"):
        stats.mean_interval([0.5, float("nan")])


def test_area_under_curve_and_binomial_se_on_hand_values():
    # trapezoids 4 * (0.2 + 0.4) / 2 + 4 * (0.4 + 0.5) / 2 = 3.0 over a span of 8 steps
    assert stats.area_under_curve([(0, 0.2), (4, 0.4), (8, 0.5)]) == pytest.approx(0.375)
    # uneven steps: 2 * (0 + 1) / 2 + 8 * (1 + 1) / 2 = 9 over 10
    assert stats.area_under_curve([(0, 0.0), (2, 1.0), (10, 1.0)]) == pytest.approx(0.9)
    assert stats.area_under_curve([(5, 0.3)]) == 0.3 and stats.area_under_curve([]) is None
    with pytest.raises(ValueError, match="strictly increasing"):
        stats.area_under_curve([(4, 0.1), (4, 0.2)])
    assert measures.pass_at_1_curve({"val/pass@1": [(8, 0.5), (0, 0.2), (8, 0.6)]}) == [(0, 0.2), (8, 0.6)]
    assert stats.binomial_se(0.6, 256) == pytest.approx(0.0306186, abs=1e-6)  # sqrt(0.24 / 256)
    assert stats.binomial_se(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="p must be"):
        stats.binomial_se(1.5, 10)
    with pytest.raises(ValueError, match="n must be"):
        stats.binomial_se(0.5, 0)
    assert measures.heldout_size({"data": {"prompts": {"val_size": 64}, "val_samples_per_prompt": 4}}) == 256
    assert measures.heldout_size({"data": {"prompts": {"val_size": "${x}"}, "val_samples_per_prompt": 4}}) is None
    assert measures.heldout_size(None) is None


def test_jobs_are_grouped_by_seed_with_intervals(seeded_multirun):
    jobs = runs.read_multirun(seeded_multirun)
    assert [[j.name for j in g] for g in runs.group_by_seed(jobs)] == [["0", "1", "2"], ["3", "4"], ["5", "6"]]
    const, none, grpo = summary.summarize_seeds(jobs)
    assert const["varying"] == ["objective=regression_const"] and const["seeds"] == ["0", "1", "2"]
    assert const["n"] == 3 and not const["missing"] and not const["no_intervention"]
    assert const["final_pass_at_1"]["mean"] == pytest.approx(0.6)
    assert const["final_pass_at_1"]["half_width"] == pytest.approx(0.24842, abs=1e-5)
    # areas 0.375, 0.45, 0.525: mean 0.45, s = 0.075, half width 4.3027 * 0.075 / sqrt(3) = 0.18631
    assert const["area_under_curve"]["mean"] == pytest.approx(0.45)
    assert const["area_under_curve"]["half_width"] == pytest.approx(0.18631, abs=1e-5)
    assert const["heldout_n"] == 256 and const["run_se"] == pytest.approx(0.0306186, abs=1e-6)
    # the mean curve: step 4 has 0.4 / 0.5 / 0.6 (same spread as the finals); step 0 has no spread
    curve = {p["step"]: p for p in const["curve"]}
    assert curve[4]["mean"] == pytest.approx(0.5) and curve[4]["half_width"] == pytest.approx(0.24842, abs=1e-5)
    assert curve[0]["half_width"] == pytest.approx(0.0)
    # 2 seeds (val/reward): finals 0.3, 0.5 -> s = 0.1414, half width 12.7062 * 0.1414 / sqrt(2) = 1.27062
    assert none["no_intervention"] and none["n"] == 2
    assert none["final_pass_at_1"]["mean"] == pytest.approx(0.4)
    assert none["final_pass_at_1"]["half_width"] == pytest.approx(1.27062, abs=1e-5)
    assert none["area_under_curve"]["mean"] == pytest.approx(0.3)
    assert none["area_under_curve"]["half_width"] == pytest.approx(0.63531, abs=1e-5)
    # one seed ran, one is missing: no interval, stated
    assert grpo["n"] == 1 and grpo["missing"] == ["6"] and grpo["final_pass_at_1"]["half_width"] is None
    assert grpo["area_under_curve"]["mean"] == pytest.approx(0.3125)
    per_job = {r["job"]: r for r in summary.summarize(jobs)}
    assert per_job["0"]["area_under_curve"] == pytest.approx(0.375) and per_job["0"]["heldout_n"] == 256
    assert per_job["0"]["binomial_se"] == pytest.approx((0.5 * 0.5 / 256) ** 0.5)


def test_seed_table_states_intervals_and_how_they_are_computed(seeded_multirun):
    table = tables.seed_table(summary.summarize_seeds(runs.read_multirun(seeded_multirun)))
    assert (
        "| objective=regression_const | 0,1,2 (3) | 0.600 [0.352, 0.848] | 0.450 [0.264, 0.636] | 0.031 (N=256) |"
        in table
    )
    assert "| judge=always_keep (no-intervention) | 0,1 (2) | 0.400 [-0.871, 1.671] |" in table
    assert (
        "| objective=grpo | 0 (1); no event files: job 6 (seed=1) | 0.450 (n=1, no interval) | 0.313 (n=1, no interval) |"
        in table
    )
    assert "t(0.975, n-1) · s / sqrt(n)" in table and "n = 1: no interval" in table


def test_cli_prints_seed_table_and_writes_curves(seeded_multirun, tmp_path, capsys):
    curves, seeds = tmp_path / "curves" / "heldout.png", tmp_path / "seeds.json"
    assert summary_main([str(seeded_multirun), "--curves", str(curves), "--seeds-json", str(seeds)]) == 0
    out = capsys.readouterr().out
    assert "0.600 [0.352, 0.848]" in out and "95% interval over seeds" in out
    assert curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and curves.stat().st_size > 5000
    data = json.loads(seeds.read_text())
    assert [r["jobs"] for r in data] == [["0", "1", "2"], ["3", "4"], ["5", "6"]]
    assert data[0]["final_pass_at_1"]["half_width"] == pytest.approx(0.24842, abs=1e-5)
