"""Training runs of the embedded model with ``rollout.max_staleness`` (small: 2 prompts, 24 tokens):
at 0 the synchronous path is today's (no producer thread, every scalar equal to a run without the
field), at 1 a 3-step run trains batch ``k + 1`` on weights ``k`` within the bound and leaves no
thread behind."""

from __future__ import annotations

import threading

import pytest
from conftest import TINY_RUN
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import mintrl.data.datamodule as datamodule
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run

TIMING = ("perf/gen_tokens_per_s", "perf/step_seconds", "perf/")  # wall-clock scalars differ between runs


def train(out, *overrides: str) -> dict[str, list[tuple[int, float]]]:
    """Run the tiny job into ``out``; its scalars ``{tag: [(step, value)]}`` (timings left out)."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.output_dir={out}",
                *TINY_RUN,
                "validate_at_start=false",
                "rollout.progress=false",
                *overrides,
            ],
            return_hydra_config=False,
        )
    run(cfg)
    values: dict[str, list[tuple[int, float]]] = {}
    for event in (out / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(event))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            if not any(tag.startswith(t) for t in TIMING):
                values.setdefault(tag, []).extend((s.step, s.value) for s in acc.Scalars(tag))
    return {tag: sorted(v) for tag, v in values.items()}


def producer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollout-producer"]


def test_max_staleness_0_is_the_synchronous_path_bit_for_bit(tmp_path, monkeypatch):
    without = train(tmp_path / "without", "trainer.max_steps=2", "~rollout.max_staleness")

    def no_pipeline(*args, **kwargs):
        raise AssertionError("rollout.max_staleness=0 must not start a rollout pipeline")

    monkeypatch.setattr(datamodule, "RolloutPipeline", no_pipeline)
    zero = train(tmp_path / "zero", "trainer.max_steps=2", "rollout.max_staleness=0")
    assert "rollout/staleness" not in zero and not producer_threads()
    assert zero.keys() == without.keys() and "train/loss" in zero
    for tag in zero:
        assert zero[tag] == without[tag], tag  # every scalar to the last bit


def test_max_staleness_1_trains_batch_k_plus_1_on_weights_k_and_leaves_no_thread(tmp_path):
    values = train(tmp_path, "trainer.max_steps=3", "rollout.max_staleness=1")
    assert [v for _, v in values["rollout/generated_at_step"]] == [0.0, 0.0, 1.0]  # batch k + 1 from version k
    assert [v for _, v in values["rollout/staleness"]] == [0.0, 1.0, 1.0]  # logged for every batch, <= 1
    assert [v for _, v in values["rollout/dropped_stale"]] == [0.0, 0.0, 0.0]
    assert len(values["train/loss"]) == 3 and len(values["val/reward"]) == 1
    assert not producer_threads()


@pytest.mark.parametrize("overrides", [["rollout.max_staleness=1", "sampler=vllm"]])
def test_a_refused_layout_stops_before_any_model_loads(tmp_path, overrides):
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 needs sampler=hf"):
        train(tmp_path, "trainer.max_steps=1", *overrides)
