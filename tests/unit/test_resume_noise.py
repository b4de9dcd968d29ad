"""A resumed data module draws the same sampling noise as the run that never stopped, also when its
sampler builds something at its first generation that draws random numbers (the HF sampler's
sampling copy is a model initialised from the global torch generator): the data module has the
sampler build it (``Sampler.prepare``) before restoring the generators."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mintrl.data.datamodule import RolloutDataModule


class LazySampler:
    """Builds a "copy" (64 normal draws) at its first generation or at ``prepare``; each
    generation then draws 3 uniforms, as decoding does."""

    def __init__(self):
        self.built = False

    def prepare(self) -> None:
        if not self.built:
            torch.randn(64)
            self.built = True

    def generate(self) -> list[float]:
        self.prepare()
        return torch.rand(3).tolist()

    def release(self) -> None:
        pass


class Rollout:
    def __init__(self):
        self.sampler = LazySampler()

    def generate(self, batch, step: int):
        return self.sampler.generate()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _data_module() -> RolloutDataModule:
    dm = RolloutDataModule(prompts=None, rollout=Rollout(), tokenizer=None)
    dm.trainer = SimpleNamespace(global_rank=0, world_size=1, training=True, global_step=0)
    return dm


def _draw(dm: RolloutDataModule, batches: int) -> list[list[float]]:
    return [dm.on_before_batch_transfer(["prompt"], 0) for _ in range(batches)]


def test_a_resumed_sampler_builds_before_the_generators_are_restored():
    torch.manual_seed(0)
    straight = _data_module()
    _draw(straight, 2)
    state = straight.state_dict()  # a checkpoint after 2 batches
    expected = _draw(straight, 2)
    torch.manual_seed(0)  # the resumed process starts from the run's seed
    resumed = _data_module()
    resumed.load_state_dict(state)
    assert _draw(resumed, 2) == expected
    assert resumed.batches_trained == 4


def test_a_checkpoint_of_two_ranks_is_refused_on_one():
    dm = _data_module()
    own = {"batches_trained": 2, "rng": None, "rollout": {}}
    with pytest.raises(ValueError, match=r"of 2 ranks, this run has 1: resume on 2 devices \(trainer.devices\)"):
        dm.load_state_dict({"batches_trained": 2, "ranks": [own, own]})
    dm.trainer.global_rank, dm.trainer.world_size = 1, 2
    dm.load_state_dict({"batches_trained": 2, "ranks": [own, {**own, "batches_trained": 3}]})
    assert dm.batches_trained == 3  # rank 1's own entry
