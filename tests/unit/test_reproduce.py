"""`make reproduce`: the report on a fabricated multirun with hand-computed values (tests/multirun_helpers.py's
REPRO_*), the verdicts, and the sweep configs (every row composes with the 3-term task at equal budget)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from make_helpers import run_make
from multirun_helpers import write_intensity_multirun, write_reproduce_multirun
from omegaconf import OmegaConf

from mintrl.analysis.claims import how_to_decide, inverted_u, new_seeds, seed_sweep
from mintrl.analysis.measures import gap_narrowing
from mintrl.analysis.report import build_report, figure_paths
from mintrl.analysis.report_blocks import keep_blocks
from mintrl.analysis.rows import ROW_NAMES, Row, equal_budget, find_row, paper_order, row_budget, rows_of
from mintrl.analysis.runs import Job, job_span, method_from_config, seed_of, wall_time
from mintrl.analysis.stats import paired_difference, seeds_needed, verdict
from mintrl.analysis.tables import fmt_commits, fmt_diff, fmt_interval, fmt_seconds, render_markdown
from mintrl.build.config import CONFIG_DIR
from mintrl.cli.reproduce import main as reproduce_main

T2 = 4.302652729911275  # t(0.975, 2): 3 seeds (scipy.stats.t.ppf(0.975, 2))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def methods(tmp_path_factory):
    return write_reproduce_multirun(tmp_path_factory.mktemp("reproduce") / "methods")


@pytest.fixture(scope="module")
def intensity(tmp_path_factory):
    return write_intensity_multirun(tmp_path_factory.mktemp("reproduce") / "intensity")


def _stat(mean, low, high, n=3, sd=0.05):
    return {"n": n, "mean": mean, "sd": sd, "half_width": (high - low) / 2, "low": low, "high": high}


def test_verdict_from_the_interval():
    assert verdict(_stat(0.2, 0.05, 0.35)) == "holds"
    assert verdict(_stat(-0.2, -0.35, -0.05)) == "does not hold"
    assert verdict(_stat(0.1, -0.02, 0.22)) == "undecided"
    assert verdict(_stat(0.1, 0.0, 0.2)) == "undecided"  # touching 0 is not above it
    assert verdict({"n": 1, "mean": 0.3, "sd": None, "half_width": None, "low": None, "high": None}) == "undecided"
    assert verdict(None) == "undecided"


def test_paired_difference_by_hand():
    a = {"0": 0.30, "1": 0.40, "2": 0.35, "7": 0.9}  # seed 7 has no partner: left out
    b = {"2": 0.30, "0": 0.20, "1": 0.25}
    d = paired_difference(a, b)
    assert d["seeds"] == ["0", "1", "2"]
    assert d["diffs"] == pytest.approx([0.10, 0.15, 0.05])
    assert d["mean"] == pytest.approx(0.10) and d["sd"] == pytest.approx(0.05)
    assert d["half_width"] == pytest.approx(T2 * 0.05 / math.sqrt(3))
    assert (d["low"], d["high"]) == pytest.approx((0.10 - T2 * 0.05 / math.sqrt(3), 0.10 + T2 * 0.05 / math.sqrt(3)))
    assert paired_difference({"0": 1.0}, {"1": 1.0}) is None
    assert paired_difference({"10": 1.0, "2": 0.0}, {"10": 0.0, "2": 0.0})["seeds"] == ["2", "10"]  # numeric order


def test_seeds_needed_at_the_observed_mean_and_sd():
    # mean 0.10, sd 0.05: t(n-1) * 0.05 / sqrt(n) is 0.449 (n=2), 0.124 (3), 0.0796 (4) -> 4 seeds
    assert seeds_needed({"n": 3, "mean": 0.10, "sd": 0.05}) == 4
    assert seeds_needed({"n": 3, "mean": -0.10, "sd": 0.05}) == 4
    assert seeds_needed({"n": 3, "mean": 0.0, "sd": 0.05}) is None
    assert seeds_needed({"n": 1, "mean": 0.1, "sd": None}) is None
    assert seeds_needed({"n": 3, "mean": 1e-6, "sd": 1.0}) is None  # beyond MAX_SEEDS


def test_how_to_decide_names_seeds_not_yet_run():
    # seeds 3-8 run, mean 0.066, sd 0.065: n = 7 (t(6) 2.447 * 0.065 / sqrt 7 = 0.0601 < 0.066; n = 6 gives
    # 2.571 * 0.065 / sqrt 6 = 0.0682), so a new plan of 7 seeds, the smallest not run: 0-2 and 9-12
    stat = {"n": 6, "mean": 0.066, "sd": 0.065}
    assert seeds_needed(stat) == 7
    assert how_to_decide(stat, "paired seeds", ["3", "4", "5", "6", "7", "8"]).endswith(
        "about 7 seeds would give an interval that excludes 0 (now 6): decide it with a new plan of 7 seeds fixed "
        "before its runs (seed=0,1,2,9,10,11,12, in a sweep file of its own as configs/sweep/confirm_core.yaml), not by "
        "adding seeds to these runs."
    )
    # a seed run for one row only (or without the logged value) is not suggested again
    assert "(seed=1,2,9,10,11,12,13," in how_to_decide(stat, "paired seeds", ["0", "3", "4", "5", "6", "7", "8"])
    assert new_seeds(["0", "1", "3"], 3) == [2, 4, 5]
    assert new_seeds(["default"], 2) == [1, 2]  # a job without seed= ran the config's seed 0
    assert new_seeds(["0"], 0) == []
    with pytest.raises(ValueError, match="at least one seed"):
        seed_sweep([])
    assert seed_sweep([9, 10, 11, 12]) == "range(9,13)" and seed_sweep([0, 2]) == "0,2"
    assert seed_sweep([0, 1, 2, 9]) == "0,1,2,9" and seed_sweep([3, 4, 5]) == "3,4,5"


def test_gap_narrowing_first_third_minus_last_third():
    assert gap_narrowing([0.3, 0.3, 0.2, 0.2, 0.1, 0.1]) == pytest.approx(0.2)
    assert gap_narrowing([0.1, 0.5, 0.3, 0.2]) == pytest.approx(0.1 - 0.2)  # thirds of 1 step
    assert gap_narrowing([0.2, 0.4]) == pytest.approx(-0.2)
    assert gap_narrowing([0.2]) is None and gap_narrowing([]) is None


def test_rows_are_named_and_grouped_over_seeds(methods):
    report = build_report(methods, repo_dir=REPO)
    rows = {r.name: r for r in report["rows"]}
    assert list(rows) == ["MInTRL-Const", "GRPO", "no-intervention"]
    const = rows["MInTRL-Const"].stats["final_pass_at_1"]
    assert const["mean"] == pytest.approx(0.35, abs=1e-6) and const["sd"] == pytest.approx(0.05, abs=1e-6)
    assert (
        row_budget(rows["GRPO"])["rollouts_per_prompt"] == 4 == row_budget(rows["MInTRL-Const"])["rollouts_per_prompt"]
    )
    assert report["equal_budget"]
    assert report["wall"]["step_seconds"] == pytest.approx(9 * 6 * 10.0)


def test_claims_on_the_fabricated_multirun(methods):
    report = build_report(methods, repo_dir=REPO)
    c1, c2, c3, c4 = report["claims"]
    diff = report["const_minus_grpo"]
    assert diff["diffs"] == pytest.approx([0.10, 0.15, 0.05], abs=1e-6)
    assert diff["half_width"] == pytest.approx(T2 * 0.05 / math.sqrt(3), abs=1e-5)
    assert c1.verdict == "undecided" and "about 4 seeds" in c1.next_step
    assert c2.verdict == "holds" and "+0.250" in c2.measure and not c2.next_step
    assert c3.verdict == "does not hold" and "-0.250" in c3.measure and "paper's scale" in c3.next_step
    assert c4.verdict == "not measured"


def test_inverted_u_on_the_intensity_sweep(methods, intensity):
    report = build_report(methods, intensity, repo_dir=REPO)
    points = {p["name"]: p for p in report["points"]}
    assert list(points) == [
        "no-intervention",
        "MInTRL-Const rollout.max_reviews=1",
        "MInTRL-Const rollout.max_reviews=4",
        "MInTRL-Const",
    ]
    assert points["MInTRL-Const"]["offpolicy_frac"] == pytest.approx(0.03, abs=1e-6)
    assert points["MInTRL-Const rollout.max_reviews=4"]["delta"]["diffs"] == pytest.approx(
        [-0.02, 0.01, 0.02], abs=1e-6
    )
    c4 = report["claims"][3]
    assert c4.verdict == "holds" and "strictly inside" in c4.measure
    assert report["equal_budget"] and report["wall"]["step_seconds"] == pytest.approx(15 * 60.0)


def test_intensity_seeds_from_several_folders_pool(methods, intensity, tmp_path):
    """Seeds 0-1 of the intensity sweep in one multirun and seed 2 in a later one give the same points and
    verdict as one multirun of seeds 0-2."""
    later = [write_intensity_multirun(tmp_path / "a", (0, 1)), write_intensity_multirun(tmp_path / "b", (2,))]
    pooled, whole = build_report(methods, later, repo_dir=REPO), build_report(methods, intensity, repo_dir=REPO)
    assert pooled["points"] == whole["points"] and len(pooled["points"]) == 4
    assert pooled["claims"][3].verdict == whole["claims"][3].verdict == "holds"
    assert pooled["intensity_dir"] == f"{tmp_path / 'a'}, {tmp_path / 'b'}"
    first = build_report(methods, later[0], repo_dir=REPO)  # seeds 0-1 only: undecided, add seeds 2 and 3
    assert [p["n"] for p in first["points"]] == [3, 2, 2, 3]
    assert first["claims"][3].verdict == "undecided"
    # seed 2 has its no-intervention job (methods: seeds 0-2), seed 3 not: the next step says to run it
    assert "(INTENSITY_ARGS=seed=2,3, with the no-intervention row of seed=3 (method=no_intervention))" in (
        first["claims"][3].next_step
    )


def test_next_step_names_the_seeds_a_stopped_sweep_left_unfinished(methods, tmp_path):
    """Seeds 0-1 of both settings and seed 2 of one (a sweep stopped part-way): the next step first names
    the setting that lacks seed 2, then 2 new seeds; the no-intervention row (seeds 0-2) lacks 3 and 4."""
    folders = [
        write_intensity_multirun(tmp_path / "a", (0, 1)),
        write_intensity_multirun(tmp_path / "b", (2,), settings=("rollout.max_reviews=1",)),
    ]
    step = build_report(methods, folders, repo_dir=REPO)["claims"][3].next_step
    assert step == (
        "Finish seed=2 for 1 of 2 settings (MInTRL-Const rollout.max_reviews=4). Then a new plan, fixed before its "
        "runs, of more seeds per setting (INTENSITY_ARGS=seed=3,4, with the no-intervention row of seed=3,4 "
        "(method=no_intervention)) and settings on both sides of the best fraction, not seeds added until an "
        "interval clears 0."
    )


def _point(name, frac, deltas):
    seeds = [str(i) for i in range(len(deltas))]
    return {
        "name": name,
        "offpolicy_frac": frac,
        "per_seed": dict(zip(seeds, deltas)),
        "delta": paired_difference(dict(zip(seeds, deltas)), dict.fromkeys(seeds, 0.0)),
    }


def test_inverted_u_verdicts_by_hand():
    base = _point("none", 0.0, [0.0, 0.0, 0.0])
    mid = _point("mid", 0.03, [0.10, 0.12, 0.11])
    high = _point("high", 0.08, [0.20, 0.25, 0.22])
    # best at the highest fraction and clearly above the interior one: no inverted U
    assert inverted_u([base, mid, high])[0] == "does not hold"
    # best inside, above both ends
    assert inverted_u([base, high, _point("top", 0.3, [0.0, 0.02, -0.01])])[0] == "holds"
    # best inside but not distinguishable from the high end
    assert inverted_u([base, mid, _point("end", 0.1, [0.12, 0.05, 0.10])])[0] == "undecided"
    # one seed: no interval
    one = [_point("none", 0.0, [0.0]), _point("mid", 0.03, [0.1]), _point("high", 0.08, [0.0])]
    v, why = inverted_u(one)
    assert v == "undecided" and "strictly inside" in why
    assert inverted_u([base, mid])[0] == "not measured"


def test_report_markdown_has_commit_rows_intervals_and_figures(methods, intensity, tmp_path):
    out = tmp_path / "docs" / "reproduction.md"
    assert reproduce_main([str(methods), "--intensity", str(intensity), "--out", str(out), "--repo", str(REPO)]) == 0
    text = out.read_text()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert head in text
    for row in ("| MInTRL-Const |", "| GRPO |", "| no-intervention |"):
        assert row in text
    assert "0.350 [0.226, 0.474]" in text  # Const final pass@1: 0.35 ± 4.3027 * 0.05 / sqrt(3)
    assert "+0.100 [-0.024, +0.224] (n=3)" in text  # Const - GRPO
    assert "| 0 | 0.300 | 0.200 | +0.100 |" in text
    assert "**undecided**" in text and "**holds**" in text and "**does not hold**" in text
    assert f"{os.cpu_count()} logical CPUs" in text and "torch" in text
    assert "9.0 min" in text or "15.0 min" in text  # summed perf/step_seconds
    assert "equal budget" in text and "yes" in text
    for png in ("reproduction_curves.png", "reproduction_training.png", "reproduction_intensity.png"):
        assert (out.parent / png).stat().st_size > 1000 and f"]({png})" in text


def test_seeds_added_by_a_second_multirun_are_pooled_and_their_commits_named(tmp_path):
    """Seeds 0-2 in one multirun, seed 3 in another (same overrides): one row per setting with 4 seeds;
    the commit line names what each job's run manifest recorded (manifest.json, or provenance.json of older
    runs)."""
    import json

    from multirun_helpers import repro_config, write_job

    first = write_reproduce_multirun(tmp_path / "first")
    later = tmp_path / "later"
    for job, (method, final) in enumerate((("mintrl_const", 0.45), ("grpo", 0.25))):
        scalars = {"val/pass@1": [(0, 0.05), (6, final)], "perf/step_seconds": [(s, 10.0) for s in range(1, 7)]}
        config = repro_config(4, 0, method=method) if method == "grpo" else repro_config(2, 2, method=method)
        write_job(later / str(job), [f"method={method}", "seed=3", "+sweep=reproduce_core"], scalars, config)
        (later / str(job) / "manifest.json").write_text(json.dumps({"commit": "b" * 40}))
    (first / "0" / "provenance.json").write_text(json.dumps({"commit": "a" * 40}))  # an older run's name
    report = build_report([first, later], repo_dir=tmp_path)
    const, grpo = find_row(report["rows"], "MInTRL-Const"), find_row(report["rows"], "GRPO")
    assert [seed_of(j) for j in const.jobs] == ["0", "1", "2", "3"] and len(grpo.jobs) == 4
    diff = report["const_minus_grpo"]
    assert diff["seeds"] == ["0", "1", "2", "3"] and diff["diffs"] == pytest.approx([0.10, 0.15, 0.05, 0.20])
    assert diff["mean"] == pytest.approx(0.125) and diff["n"] == 4
    assert (
        report["commit"]
        == f"`{'a' * 40}` (1 job); `{'b' * 40}` (2 jobs); not recorded (8 jobs) (each job's manifest.json)"
    )
    assert report["multirun_dir"] == f"{first}, {later}"
    # nothing recorded: the report's checkout is named instead (here: no repository)
    assert fmt_commits({"not recorded": ["0"]}, "unknown").startswith("`unknown` (the checkout writing the report")


def test_a_seed_run_twice_for_one_row_is_refused(tmp_path):
    first = write_reproduce_multirun(tmp_path / "first")
    again = write_reproduce_multirun(tmp_path / "again")
    with pytest.raises(ValueError, match="seed=0"):
        build_report([first, again])
    with pytest.raises(SystemExit) as e:
        reproduce_main([str(first), str(again), "--out", str(tmp_path / "r.md")])
    assert e.value.code == 2


def test_unequal_budget_is_flagged():
    def job(name, steps):
        from multirun_helpers import repro_config

        return Job(
            name=name, path=Path(name), overrides=[f"method={name}", "seed=0"], config=repro_config(2, 2, steps, name)
        )

    rows = rows_of([job("mintrl_const", 6), job("no_intervention", 12)])
    assert [r.name for r in rows] == ["MInTRL-Const", "no-intervention"] and not equal_budget(rows)
    assert equal_budget(rows_of([job("mintrl_const", 6), job("no_intervention", 6)]))


def test_wall_time_from_file_times(tmp_path):
    for name, t in (("a", 1000.0), ("b", 4600.0)):
        p = tmp_path / "0" / name
        p.parent.mkdir(exist_ok=True)
        p.write_text("x")
        os.utime(p, (t, t))
    assert wall_time([tmp_path / "0"], [])["elapsed"] == pytest.approx(3600.0)
    # a second multirun a day later: its own span (60 s) adds, not the day between them
    for name, t in (("a", 90000.0), ("b", 90060.0)):
        p = tmp_path / "later" / "0" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
        os.utime(p, (t, t))
    assert wall_time([tmp_path / "0", tmp_path / "later" / "0"], [])["elapsed"] == pytest.approx(3660.0)
    # logged scalars carry their own wall times (a git checkout resets file times): the job ran from its
    # manifest's start (1000 s) to its last scalar (1900 s), whatever the files' times say
    import json

    from torch.utils.tensorboard import SummaryWriter

    job = tmp_path / "logged" / "0"
    writer = SummaryWriter(log_dir=str(job / "tensorboard"))
    for step, t in ((0, 1100.0), (1, 1900.0)):
        writer.add_scalar("val/pass@1", 0.1, step, walltime=t)
    writer.close()
    (job / "manifest.json").write_text(json.dumps({"started_utc": "1970-01-01T00:16:40Z"}))  # 1000 s
    assert job_span(job) == (1000.0, 1900.0)
    assert wall_time([job], [])["elapsed"] == pytest.approx(900.0)
    (job / "manifest.json").unlink()
    assert job_span(job) == (1100.0, 1900.0)  # no manifest: from the first scalar

    assert fmt_seconds(3720) == "1 h 02 min" and fmt_seconds(90) == "1.5 min" and fmt_seconds(None) == "n/a"


def test_missing_folder_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as e:
        reproduce_main([str(tmp_path / "nope")])
    assert e.value.code == 2


# --- the sweep configs ------------------------------------------------------------------------------


def _compose(*overrides, hydra_config=False):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            "train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides], return_hydra_config=hydra_config
        )


@pytest.mark.parametrize("sweep", ["reproduce_core", "reproduce_full", "reproduce_intensity"])
def test_every_row_composes_with_the_hard_task_at_equal_budget(sweep):
    params = _compose(f"+sweep={sweep}", hydra_config=True).hydra.sweeper.params
    rows = params.method.split(",")
    assert params.seed == "0,1,2" and "experiment" not in params
    expected = {
        "reproduce_core": ["mintrl_const", "grpo", "no_intervention"],
        "reproduce_full": ["mintrl_const", "grpo", "no_intervention", "mintrl_proxy", "mentor", "intervention_grpo"],
        "reproduce_intensity": ["mintrl_const"],
    }[sweep]  # fmt: skip
    assert rows == expected
    budgets = set()
    for row in rows:
        cfg = _compose(f"+sweep={sweep}", f"method={row}", "seed=2")
        config = OmegaConf.to_container(cfg, resolve=False)
        assert method_from_config(config) == ROW_NAMES[expected.index(row)]  # the report's row, in the paper's order
        kw = cfg.data.prompts.task_kwargs
        assert (kw.min_terms, kw.max_terms, kw.max_digits, list(kw.operators)) == (3, 3, 1, ["+"]), row
        assert cfg.callbacks.checkpoint.save_last is False and cfg.callbacks.get("best") is None  # callbacks=sweep
        assert cfg.task_name == sweep and cfg.seed == 2
        r = cfg.rollout
        budgets.add(
            (r.n_control + r.n_semi, cfg.trainer.max_steps, cfg.data.prompts_per_step, r.max_response_tokens,
             cfg.data.prompts.val_size, cfg.data.val_samples_per_prompt, cfg.trainer.val_check_interval)
        )  # fmt: skip
        if row == "grpo":
            assert (r.n_control, r.n_semi) == (4, 0) and cfg.judge._target_.endswith("AlwaysKeepJudge")
        if row == "no_intervention":
            assert cfg.objective._target_.endswith("AdvantageRegression")
            assert cfg.judge._target_.endswith("AlwaysKeepJudge")
        if row == "mentor":
            assert cfg.objective.alpha_decay_steps == 12  # alpha decays over the whole run
    assert budgets == {(4, 12, 8, 64, 96, 2, 6)}


@pytest.mark.parametrize("sweep", ["guided", "lora"])
def test_guided_and_lora_sweeps_run_their_rows_with_the_core_settings(sweep):
    params = _compose(f"+sweep={sweep}", hydra_config=True).hydra.sweeper.params
    assert params.seed == "0" and "experiment" not in params
    expected = {  # each sweep's rows: methods (configs/method) x presets
        "guided": (["grpo", "mintrl_const", "bread", "prefix_rft", "luffy", "first_error", "int"], [None]),
        "lora": (["grpo", "mintrl_const"], ["cpu_lora", "cpu_math"]),
    }[sweep]  # fmt: skip
    presets = params.preset.split(",") if "preset" in params else [None]
    assert (params.method.split(","), presets) == expected
    core = _compose("+sweep=reproduce_core", "method=mintrl_const")
    settings = (  # the core sweep's settings, repeated in these sweeps' files
        "data.prompts", "data.prompts_per_step", "data.val_samples_per_prompt", "trainer.max_steps",
        "trainer.val_check_interval", "rollout.max_response_tokens", "callbacks",
    )  # fmt: skip
    for method in params.method.split(","):
        for preset in presets:
            cfg = _compose(f"+sweep={sweep}", f"method={method}", *([f"preset={preset}"] if preset else []))
            row = (method, preset)
            kw = cfg.data.prompts.task_kwargs
            assert (kw.min_terms, kw.max_terms, kw.max_digits, list(kw.operators)) == (3, 3, 1, ["+"]), row
            r = cfg.rollout
            # every row samples 4 rollouts per prompt from the policy (guides add theirs on top)
            assert (r.n_control + r.n_semi, cfg.trainer.max_steps, cfg.data.prompts_per_step) == (4, 12, 8), row
            assert (r.max_response_tokens, cfg.data.prompts.val_size, cfg.data.val_samples_per_prompt) == (64, 96, 2)
            assert cfg.task_name == sweep and cfg.callbacks.checkpoint.save_last is False
            assert ("lora" in cfg.model) == (preset == "cpu_lora"), row
            for key in settings:
                assert OmegaConf.select(cfg, key) == OmegaConf.select(core, key), (row, key)


def test_intensity_sweep_varies_the_three_knobs_around_the_core_setting():
    params = _compose("+sweep=reproduce_intensity", hydra_config=True).hydra.sweeper.params
    core = _compose("+sweep=reproduce_core", "method=mintrl_const").rollout
    for knob in ("chunk_size", "max_reviews", "continuation_len"):
        low, high = (int(v) for v in params[f"rollout.{knob}"].split(","))
        assert low < core[knob] < high, knob  # the core rows' setting lies inside the grid


def test_make_targets_run_the_sweeps_then_the_report():
    def dry(target):
        return run_make(target, "REPRO_DIR=/tmp/r", dry=True).stdout

    core = dry("reproduce")
    assert (
        "-m +sweep=reproduce_core hydra.sweep.dir=/tmp/r" in core
        and "mintrl.cli.reproduce /tmp/r --out /tmp/r/reproduction.md" in core  # not the committed report
    )
    assert (
        "mintrl.cli.reproduce /tmp/r --out docs/reproduction.md"
        in run_make("reproduce", "REPRO_DIR=/tmp/r", "REPRO_OUT=docs/reproduction.md", dry=True).stdout
    )  # regenerating the committed report is asked for by name
    assert "--out /tmp/r/reproduction.md" in dry("reproduce-full")
    assert "reproduce-report:" in (REPO / "Makefile").read_text()
    full = dry("reproduce-full")
    assert (
        "+sweep=reproduce_full" in full
        and "+sweep=reproduce_intensity" in full
        and "--intensity /tmp/r/intensity" in full
    )
    smoke = dry("reproduce-smoke")
    assert "trainer.max_steps=1" in smoke and "seed=0" in smoke and "--out /tmp/r/smoke/reproduction.md" in smoke
    report = dry("reproduce-report")  # the committed runs, every folder, in order
    with_intensity = run_make("reproduce-report", "INTENSITY_RESULTS=a/ b/", "RESULTS=c/", dry=True).stdout
    bin_dir = Path(sys.executable).parent
    assert f"{bin_dir}/python -m mintrl.cli.reproduce c/ --intensity a/ b/ --out docs/reproduction.md" in with_intensity
    core, intensity = (committed(sweep) for sweep in ("reproduce_core", "reproduce_intensity"))
    folders = " ".join(f"results/reproduce_core/{p.name}/" for p in core)
    if intensity:
        folders += " --intensity " + " ".join(f"results/reproduce_intensity/{p.name}/" for p in intensity)
    assert f"mintrl.cli.reproduce {folders} --out docs/reproduction.md" in report and "mintrl.cli.train" not in report


def committed(sweep: str) -> list[Path]:
    """The committed multirun folders of one sweep config (results/<sweep>/*), sorted; none when absent."""
    root = REPO / "results" / sweep  # as make's $(wildcard results/<sweep>/*/): no hidden folders
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []


def test_the_committed_report_is_what_the_committed_runs_give():
    """docs/reproduction.md is `make reproduce-report` over results/reproduce_core/*: every row's final
    pass@1 with its interval, the paired difference and each seed's values come from those runs."""
    folders, intensity = committed("reproduce_core"), committed("reproduce_intensity")
    assert len(folders) >= 3
    report = build_report(folders, intensity or None, repo_dir=REPO)
    doc = (REPO / "docs" / "reproduction.md").read_text()
    diff = report["const_minus_grpo"]
    rows = {r.name: {seed_of(j) for j in r.jobs} for r in report["rows"]}
    assert diff["n"] == len(rows["MInTRL-Const"] & rows["GRPO"]) >= 9 and fmt_diff(diff) in doc
    for row in report["rows"]:
        assert f"| {row.name} |" in doc and fmt_interval(row.stats["final_pass_at_1"]) in doc
    for seed, d in zip(diff["seeds"], diff["diffs"]):
        assert f"| {seed} |" in doc and f"{d:+.3f} |" in doc
    assert report["commit"] in doc


def test_the_committed_report_is_the_whole_text_make_reproduce_report_writes(monkeypatch):
    """Every line of docs/reproduction.md, apart from the date it was written and the machine writing it,
    is what `make reproduce-report` renders from the committed runs (verdicts, next steps, wall time)."""
    monkeypatch.chdir(REPO)  # the report names the folders as make passes them: relative, with a slash
    folders = [f"results/reproduce_core/{p.name}/" for p in committed("reproduce_core")]
    intensity = [f"results/reproduce_intensity/{p.name}/" for p in committed("reproduce_intensity")]
    report = build_report(folders, intensity or None, repo_dir=REPO)
    doc = (REPO / "docs" / "reproduction.md").read_text()
    figures = {c: p.name for c, p in figure_paths("docs/reproduction.md", bool(report["points"])).items()}
    assert all((REPO / "docs" / name).is_file() for name in figures.values())
    rendered = keep_blocks(render_markdown(report, figures), doc)  # as write_report: the agents, confirm sections stay

    def lines(text):
        return [x for x in text.splitlines() if not x.startswith(("Written by", "- **machine**"))]

    assert lines(rendered) == lines(doc)


def test_rows_follow_the_papers_order_whatever_the_folder_order():
    rows = [Row(name, [], {}) for name in ("no-intervention", "sweep x=1", "GRPO", "MInTRL-Const")]
    assert [r.name for r in sorted(rows, key=paper_order)] == [
        "MInTRL-Const",
        "GRPO",
        "no-intervention",
        "sweep x=1",
    ]
