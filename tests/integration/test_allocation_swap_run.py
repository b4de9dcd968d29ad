"""A method with its allocation swapped trains: ``method=rail allocation=entropy`` runs one optimizer step on the
embedded model at test size, with entropy branching's own knobs and its own decision kind."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir


@pytest.mark.slow
def test_rail_method_with_entropy_allocation_runs_a_step(tmp_path):
    from mintrl.analysis.tensorboard import load_scalars
    from mintrl.build.config import CONFIG_DIR
    from mintrl.build.run import run

    overrides = [
        f"paths.output_dir={tmp_path}",
        "method=rail",
        "allocation=entropy",
        "allocation.budget_per_step=12",  # 2 prompts x 4 initial + up to 2 branches of 2
        "trainer.max_steps=1",
        "data.prompts_per_step=2",
        "data.prompts.val_size=2",
        "data.val_samples_per_prompt=1",
        "rollout.max_response_tokens=32",
        "rollout.progress=false",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    assert "promote_after" not in cfg.allocation
    assert run(cfg)["steps"] == 1
    used = load_scalars(tmp_path / "tensorboard")["allocation/budget_used"]
    assert 8 <= used[0][1] <= 12  # 2 prompts x 4 initial, never above the cap
    kinds_file = tmp_path / "allocation_kinds.json"
    if (tmp_path / "allocation_decisions.jsonl").is_file():  # it branched: only entropy decisions, declared
        kinds = {
            json.loads(line)["kind"] for line in (tmp_path / "allocation_decisions.jsonl").read_text().splitlines()
        }
        assert kinds == {"entropy"}
        assert json.loads(kinds_file.read_text())["allocation"] == "mintrl.allocation.entropy.EntropyAllocation"
