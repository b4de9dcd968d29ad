"""The training entry point closes the sampler (frees a vLLM engine) when a run ends: after an
evaluation-only run, and when the run fails, so a Hydra multirun in one process never holds two
engines."""

from __future__ import annotations

import closing_sampler
import pytest
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run

SMALL = [
    "data.prompts.val_size=2",
    "data.val_samples_per_prompt=1",
    "rollout.max_response_tokens=8",
    "rollout.chunk_size=8",
    "sampler._target_=closing_sampler.CountingSampler",
]


def _cfg(tmp_path, *overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=[f"paths.output_dir={tmp_path}", *SMALL, *overrides])


def test_an_evaluation_only_run_closes_its_sampler_once(tmp_path):
    closing_sampler.CLOSED.clear()
    run(_cfg(tmp_path, "train=false"))
    assert closing_sampler.CLOSED == [1]


def test_a_failing_run_closes_its_sampler(tmp_path):
    closing_sampler.CLOSED.clear()
    with pytest.raises(FileNotFoundError):
        run(_cfg(tmp_path, "train=false", "ckpt_path=/nonexistent/last.ckpt"))
    assert closing_sampler.CLOSED == [1]
