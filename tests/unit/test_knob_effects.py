"""Main effects of a factorial sweep's knobs (mintrl.analysis.knob_effects), by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from multirun_helpers import write_intensity_multirun, write_reproduce_multirun

from mintrl.analysis.knob_effects import knob_value, main_effects, swept_knobs
from mintrl.analysis.report import build_report
from mintrl.analysis.runs import Job, seed_of
from mintrl.analysis.tables import render_markdown

REPO = Path(__file__).resolve().parents[2]
# (max_reviews, chunk_size) -> {seed: final pass@1}; (2, 8) sits between the levels of max_reviews and has
# no chunk-32 partner; seed 2 ran only (1, 8) and (4, 8)
GRID = {
    (1, 8): {0: 0.10, 1: 0.20, 2: 0.30},
    (4, 8): {0: 0.05, 1: 0.25, 2: 0.10},
    (1, 32): {0: 0.30, 1: 0.20},
    (4, 32): {0: 0.15, 1: 0.30},
    (2, 8): {0: 0.90},
}


def grid_jobs() -> tuple[list[Job], dict[str, float]]:
    jobs, finals = [], {}
    for (reviews, chunk), by_seed in GRID.items():
        for seed, final in by_seed.items():
            name = f"r{reviews}_c{chunk}_s{seed}"
            overrides = ["method=mintrl_const", f"seed={seed}", f"rollout.max_reviews={reviews}"]
            overrides.append(f"rollout.chunk_size={chunk}")
            jobs.append(Job(name, Path(name), overrides, config={"rollout": {"continuation_len": 16}}))
            finals[name] = final
    return jobs, finals


def test_main_effects_by_hand():
    jobs, finals = grid_jobs()
    effects = main_effects(jobs, lambda j: finals[j.name], seed_of)
    reviews, chunk = effects
    assert (reviews["knob"], reviews["low"], reviews["high"], reviews["pairs"]) == ("rollout.max_reviews", "1", "4", 2)
    # seed 2 is not in the chunk-32 pair, so it is left out; per seed the mean over the two pairs:
    # seed 0: ((0.05 - 0.10) + (0.15 - 0.30)) / 2 = -0.10; seed 1: ((0.25 - 0.20) + (0.30 - 0.20)) / 2 = +0.075
    assert reviews["effect"]["seeds"] == ["0", "1"]
    assert reviews["effect"]["diffs"] == pytest.approx([-0.10, 0.075])
    assert reviews["effect"]["mean"] == pytest.approx(-0.0125)
    # sd = 0.175 / sqrt(2); half width = t(0.975, 1) * sd / sqrt(2) = 12.7062 * 0.0875
    assert reviews["effect"]["half_width"] == pytest.approx(12.7062 * 0.0875, rel=1e-4)
    # chunk 8 -> 32 at reviews 1 and 4: seed 0: (0.20 + 0.10) / 2; seed 1: (0.00 + 0.05) / 2
    assert (chunk["knob"], chunk["low"], chunk["high"], chunk["pairs"]) == ("rollout.chunk_size", "8", "32", 2)
    assert chunk["effect"]["diffs"] == pytest.approx([0.15, 0.025])


def test_knobs_come_from_overrides_or_the_config():
    jobs, _ = grid_jobs()
    assert swept_knobs(jobs) == ["rollout.max_reviews", "rollout.chunk_size"]  # experiment is no knob
    assert knob_value(jobs[0], "rollout.continuation_len") == "16"  # not overridden: the composed config
    assert knob_value(jobs[0], "rollout.max_reviews") == "1"
    assert knob_value(jobs[0], "rollout.kappa") is None
    # the config's value joins the override's levels: 16 is a level of continuation_len with 32 the other
    core = Job("core", Path("core"), ["seed=0"], config={"rollout": {"continuation_len": 16}})
    other = Job("long", Path("long"), ["seed=0", "rollout.continuation_len=32"])
    assert swept_knobs([core, other]) == ["rollout.continuation_len"]
    [effect] = main_effects([core, other], lambda j: {"core": 0.1, "long": 0.4}[j.name], seed_of)
    assert (effect["low"], effect["high"], effect["pairs"]) == ("16", "32", 1)
    assert effect["effect"]["diffs"] == pytest.approx([0.3]) and effect["effect"]["half_width"] is None


def test_no_common_seed_or_no_value_gives_no_effect_and_a_repeated_seed_is_refused():
    a = Job("a", Path("a"), ["seed=0", "rollout.chunk_size=8"])
    b = Job("b", Path("b"), ["seed=1", "rollout.chunk_size=32"])
    c = Job("c", Path("c"), ["seed=1", "rollout.chunk_size=8"])
    assert main_effects([a, b], lambda j: {"a": 0.1, "b": 0.2}[j.name], seed_of)[0]["effect"] is None  # seeds differ
    [e] = main_effects([a, b, c], lambda j: {"a": 0.1, "b": 0.2, "c": None}[j.name], seed_of)  # c has no curve
    assert e["pairs"] == 1 and e["effect"] is None
    twin = Job("twin", Path("twin"), ["seed=0", "rollout.chunk_size=8"])
    with pytest.raises(ValueError, match="a and twin run the same setting with seed=0"):
        main_effects([a, b, twin], lambda j: 0.1, seed_of)


def test_the_report_has_the_main_effects_of_the_fabricated_sweep(tmp_path):
    methods = write_reproduce_multirun(tmp_path / "methods")
    intensity = write_intensity_multirun(tmp_path / "intensity")
    report = build_report(methods, intensity, repo_dir=REPO)
    [reviews] = report["effects"]
    # REPRO_INTENSITY: reviews 4 minus 1 per seed: 0.20 - 0.25, 0.28 - 0.30, 0.22 - 0.25
    assert reviews["effect"]["diffs"] == pytest.approx([-0.05, -0.02, -0.03])
    sd = math.sqrt(((-0.05 + 0.1 / 3) ** 2 + (-0.02 + 0.1 / 3) ** 2 + (-0.03 + 0.1 / 3) ** 2) / 2)
    assert reviews["effect"]["half_width"] == pytest.approx(4.3027 * sd / math.sqrt(3), rel=1e-4)
    text = render_markdown(report, {})
    assert (
        "| rollout.max_reviews | 1 -> 4 | 1 | -0.033 [-0.071, +0.005] (n=3) | 0: -0.050, 1: -0.020, 2: -0.030 " in text
    )
    assert text.count("| undecided |") == 1
