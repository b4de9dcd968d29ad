"""Training runs of the embedded model with ``rollout.max_staleness`` (small: 2 prompts, 24 tokens):
at 0 the synchronous path is today's (no producer thread, every scalar equal to a run without the
field), at 1 a 3-step run trains batch ``k + 1`` on weights ``k`` within the bound and leaves no
thread behind, a producer that raises stops the run with its error in the trainer's thread, and a run
resumed from a checkpoint written with a batch in flight generates that batch again from the restored
weights, and a sampler worker process (``sampler.own_process``) that dies stops the run with the
checkpoints kept (slow tier: all but the 3-step run)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading

import pytest
import torch
from conftest import TINY_RUN
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import mintrl.data.datamodule as datamodule
from mintrl.analysis.rollouts import read_records
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.data.pipeline import ProducerError
from mintrl.rollout.records import record_path
from mintrl.rollout.single_turn import SingleTurnRollout
from mintrl.sampler.process import SamplerProcessDied

TIMING = ("_seconds", "_per_s")  # wall-clock scalars (perf/*_seconds, perf/gen_tokens_per_s) differ between runs


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
    return scalars(out)


def scalars(out) -> dict[str, list[tuple[int, float]]]:
    """The scalars a run wrote into ``out / "tensorboard"``: ``{tag: [(step, value)]}`` (timings left out)."""
    values: dict[str, list[tuple[int, float]]] = {}
    for event in (out / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(event))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            if not tag.endswith(TIMING):
                values.setdefault(tag, []).extend((s.step, s.value) for s in acc.Scalars(tag))
    return {tag: sorted(v) for tag, v in values.items()}


def producer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollout-producer"]


@pytest.mark.slow  # 2 runs of one step: 5.5 min on the shared 2-core machine (generation in the main thread is slow there)
def test_max_staleness_0_is_the_synchronous_path_bit_for_bit(tmp_path, monkeypatch):
    without = train(tmp_path / "without", "trainer.max_steps=1", "~rollout.max_staleness")

    def no_pipeline(*args, **kwargs):
        raise AssertionError("rollout.max_staleness=0 must not start a rollout pipeline")

    monkeypatch.setattr(datamodule, "RolloutPipeline", no_pipeline)
    zero = train(tmp_path / "zero", "trainer.max_steps=1", "rollout.max_staleness=0")
    assert "rollout/dropped_stale" not in zero and not producer_threads()
    assert zero.keys() == without.keys() and "train/loss" in zero
    for tag in zero:
        assert zero[tag] == without[tag], tag  # every scalar to the last bit


def test_max_staleness_1_trains_batch_k_plus_1_on_weights_k_and_leaves_no_thread(tmp_path):
    values = train(tmp_path, "trainer.max_steps=3", "rollout.max_staleness=1")
    assert [v for _, v in values["rollout/generated_at_step"]] == [0.0, 0.0, 1.0]  # batch k + 1 from version k
    assert [v for _, v in values["train/staleness"]] == [0.0, 1.0, 1.0]  # logged for every batch, <= 1
    assert [v for _, v in values["rollout/dropped_stale"]] == [0.0, 0.0, 0.0]
    assert len(values["train/loss"]) == 3 and len(values["val/reward"]) == 1
    # one record file per training step, named by the step it trained from (two batches share version 0)
    root = tmp_path / "rollouts"
    assert sorted((root / "train").iterdir()) == [record_path(root, "train", k) for k in range(3)]
    assert not producer_threads()


@pytest.mark.slow  # 40-60 s on the shared 2-core machine
def test_max_staleness_2_trains_batch_k_on_weights_k_minus_2(tmp_path):
    values = train(tmp_path, "trainer.max_steps=3", "rollout.max_staleness=2")
    assert [v for _, v in values["rollout/generated_at_step"]] == [0.0, 0.0, 0.0]  # two batches in flight
    assert [v for _, v in values["train/staleness"]] == [0.0, 1.0, 2.0]
    assert not producer_threads()


@pytest.mark.slow  # 55-70 s on the shared 2-core machine; tests/unit/test_rollout_pipeline.py checks the same on a fake engine
def test_a_producer_that_raises_stops_the_run_with_its_error_in_the_trainers_thread(tmp_path, monkeypatch):
    original = SingleTurnRollout.generate

    def generate(self, items, *args, step=0, **kwargs):
        if threading.current_thread().name == "rollout-producer" and step == 1:
            raise ConnectionError("the judge server went away")
        return original(self, items, *args, step=step, **kwargs)

    monkeypatch.setattr(SingleTurnRollout, "generate", generate)
    with pytest.raises(ProducerError, match=r"failed generating the rollout batch of weights version 1") as err:
        train(tmp_path, "trainer.max_steps=3", "rollout.max_staleness=1")
    assert threading.current_thread() is threading.main_thread()  # raised here, in the trainer's thread
    assert "ConnectionError: the judge server went away" in str(err.value)
    assert isinstance(err.value.__cause__, ConnectionError) and not producer_threads()


@pytest.mark.slow  # 85-110 s on the shared 2-core machine
def test_a_resumed_run_samples_its_first_batch_from_the_restored_weights(tmp_path):
    # the step-1 checkpoint is written while batch 1 (of weights version 0) is in flight
    first = train(
        tmp_path / "first",
        "trainer.max_steps=2",
        "rollout.max_staleness=1",
        "callbacks.checkpoint.every_n_train_steps=1",
        "callbacks.checkpoint.save_top_k=-1",
    )
    assert [v for _, v in first["rollout/generated_at_step"]] == [0.0, 0.0]
    checkpoint = tmp_path / "step1.ckpt"  # a name without '=' for the override
    shutil.copy(next((tmp_path / "first" / "checkpoints").glob("*step=1.ckpt")), checkpoint)
    resumed = train(tmp_path / "resumed", "trainer.max_steps=2", "rollout.max_staleness=1", f"ckpt_path={checkpoint}")
    # batch 1 again (the same prompts: the data position is the one before the batch in flight), from version 1
    assert [v for _, v in resumed["rollout/generated_at_step"]] == [1.0]
    assert [v for _, v in resumed["train/staleness"]] == [0.0]
    questions = [
        read_records(record_path(d / "rollouts", "train", 1)) for d in (tmp_path / "first", tmp_path / "resumed")
    ]
    assert [r["question"] for r in questions[0]] == [r["question"] for r in questions[1]]
    assert not producer_threads()


@pytest.mark.parametrize("overrides", [["rollout.max_staleness=1", "sampler=vllm"]])
def test_a_refused_layout_stops_before_any_model_loads(tmp_path, overrides):
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 needs sampler=hf"):
        train(tmp_path, "trainer.max_steps=1", *overrides)


@pytest.mark.slow  # 60-120 s on the shared 2-core machine; tests/unit/test_process_sampler.py kills a worker on a tiny model
def test_a_sampler_process_that_dies_stops_the_run_with_a_clear_error_and_the_checkpoints_kept(tmp_path, monkeypatch):
    original = SingleTurnRollout.generate

    def generate(self, items, *args, step=0, **kwargs):
        if threading.current_thread().name == "rollout-producer" and step == 1:
            os.kill(self.sampler.process.pid, signal.SIGKILL)  # the worker dies as batch 2 starts
        return original(self, items, *args, step=step, **kwargs)

    monkeypatch.setattr(SingleTurnRollout, "generate", generate)
    overrides = ("trainer.max_steps=3", "rollout.max_staleness=1", "sampler.own_process=true")
    with pytest.raises(ProducerError, match=r"weights version 1 .*SamplerProcessDied: the sampler process") as err:
        train(tmp_path, *overrides, "callbacks.checkpoint.every_n_train_steps=1")
    assert "ended with exit code -9" in str(err.value) and isinstance(err.value.__cause__, SamplerProcessDied)
    values = scalars(tmp_path)  # batches 0 and 1 came from the worker, from weights version 0
    assert [v for _, v in values["rollout/generated_at_step"]] == [0.0, 0.0]
    assert [v for _, v in values["train/staleness"]] == [0.0, 1.0]
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 2  # the last trained step's checkpoint is kept
    assert not producer_threads() and not [p for p in multiprocessing.active_children() if p.name == "mintrl-sampler"]
