"""`mintrl-pilot` on the embedded model: one tiny grid point per judge kind, values in range."""

import math

import pytest
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.core.verdict import FAILED, KEEP, REVISE, UNPARSEABLE, Verdict
from mintrl.eval.pilot import format_table, run_pilot, verdicts_agree


def test_verdicts_agree():
    assert verdicts_agree(Verdict(KEEP), Verdict(UNPARSEABLE)) and verdicts_agree(Verdict(FAILED), Verdict(KEEP))
    assert verdicts_agree(Verdict(REVISE, step=1), Verdict(REVISE, step=1))
    assert not verdicts_agree(Verdict(REVISE, step=1), Verdict(REVISE, step=0))
    assert not verdicts_agree(Verdict(REVISE, step=0), Verdict(KEEP))


@pytest.mark.parametrize("judge,reviews", [("rule", "[1,2]"), ("self_privileged", "[1]")])
def test_pilot_grid_point(judge, reviews, tmp_path):
    overrides = [
        f"paths.output_dir={tmp_path}",
        f"judge={judge}",
        "pilot.chunk_sizes=[8]",
        f"pilot.max_reviews={reviews}",
        "pilot.continuation_lens=[8]",
        "pilot.prompts=2",
        "rollout.n_control=1",
        "rollout.n_semi=2",
        "rollout.max_response_tokens=16",
        "rollout.progress=false",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("pilot", overrides=overrides)
    rows = run_pilot(cfg)
    expected = [(8, 1, 8), (8, 2, 8)] if judge == "rule" else [(8, 1, 8)]
    assert [(r["chunk"], r["reviews"], r["continuation"]) for r in rows] == expected
    for r in rows:
        assert (
            0 <= r["control"] <= 1 and 0 <= r["semi"] <= 1 and 0 <= r["offpolicy"] <= 1 and r["seconds_per_rollout"] > 0
        )
        assert r["revisions"] <= r["reviews"]
        if judge == "rule":
            assert math.isnan(r["agreement"])  # the reference itself
            assert math.isnan(r["kappa_estimate"]) or r["kappa_estimate"] == 0.0  # deterministic writer: log 1
        else:
            assert 0 <= r["agreement"] <= 1
    table = format_table(rows)
    assert table.count("\n") == len(rows) + 1 and "| 8 | 1 | 8 |" in table
