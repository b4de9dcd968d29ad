"""Every model is on the trainer's device before anything generates: the SFT stage (``sft_grpo``'s
demonstrations, InT's rollouts) and the step-0 validation run before ``fit`` moves anything. A
trainer whose strategy's root device is ``meta`` stands in for a GPU: the fakes that generate record
where each model is when they are called (and stop the stage there)."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import SingleDeviceStrategy
from omegaconf import OmegaConf

from mintrl.build.run import _run
from mintrl.objective import GRPO
from mintrl.sft import InterventionSFTStage, SFTStage
from mintrl.sft.stage import stage_device
from mintrl.training.module import PolicyModule

META = torch.device("meta")  # the trainer's root device here; a GPU's cuda:<local rank> in a real run
# a trainer config whose strategy's root device is META (the stage builds its trainer from it)
META_TRAINER = {
    "_target_": "lightning.pytorch.Trainer",
    "accelerator": "cpu",
    "strategy": {"_target_": "lightning.pytorch.strategies.SingleDeviceStrategy", "device": "meta"},
}


class Generated(Exception):
    """Raised by a fake at its first generation, after recording where the models were."""


def devices(models) -> list[str]:
    return [next(m.parameters()).device.type for m in models]


def components(tiny_llama_factory, events: list, with_trainer: bool):
    """Fake run components: a tiny policy, a teacher beside it (the module's companion), an
    intervention whose ``demonstrate`` and a sampler whose ``generate`` record the models' devices."""
    policy, teacher = tiny_llama_factory(), torch.nn.Linear(4, 4)
    module = PolicyModule(
        policy, GRPO(), functools.partial(torch.optim.SGD, lr=0.1), companion_models=lambda: [teacher]
    )

    def generates(*args, **kwargs):
        events.append(("generate", devices([policy, teacher])))
        raise Generated

    rollout = SimpleNamespace(
        intervention=SimpleNamespace(demonstrate=generates),
        sampler=SimpleNamespace(generate=generates),
        reward=None,
        tokenizer=None,
        temperature=1.0,
        top_p=1.0,
        pad_token_id=0,
    )
    datamodule = SimpleNamespace(
        setup=lambda stage: None, train_items=[SimpleNamespace(prompt_ids=[5, 6], question="q", reference="r")] * 2
    )
    trainer = None
    if with_trainer:
        trainer = Trainer(strategy=SingleDeviceStrategy(device=META), accelerator="cpu", logger=False)
    return SimpleNamespace(
        context=SimpleNamespace(policy=policy, tokenizer=SimpleNamespace(eos_token_id=2), source="tiny"),
        module=module,
        rollout=rollout,
        datamodule=datamodule,
        trainer=trainer,
    )


@pytest.fixture()
def tiny_llama_factory():
    from conftest import tiny_llama

    return tiny_llama


@pytest.mark.parametrize("stage", [SFTStage(prompts=2, per_prompt=1), InterventionSFTStage(prompts=2, per_prompt=1)])
@pytest.mark.parametrize("with_trainer", [True, False])
def test_the_sft_stage_moves_every_model_before_generating(tiny_llama_factory, stage, with_trainer):
    events = []
    c = components(tiny_llama_factory, events, with_trainer)
    assert devices([c.context.policy, c.module.companion_models()[0]]) == ["cpu", "cpu"]
    with pytest.raises(Generated):
        stage.run(c, OmegaConf.create(META_TRAINER))
    # the first generation saw the policy and the teacher on the trainer's root device
    assert events == [("generate", ["meta", "meta"])]


def test_stage_device_is_the_trainers_root_device(tiny_llama_factory):
    c = components(tiny_llama_factory, [], with_trainer=True)
    assert stage_device(c, None) == META  # the run's own trainer, its config not needed
    c.trainer = None
    assert stage_device(c, OmegaConf.create(META_TRAINER)) == META


def test_the_step0_validation_sees_every_model_on_the_trainers_device(tiny_llama_factory, tmp_path):
    events = []
    c = components(tiny_llama_factory, events, with_trainer=True)

    def validate(module, datamodule, verbose):
        events.append(("validate", devices([c.context.policy, c.module.companion_models()[0]])))
        return [{"val/reward": 0.25}]

    c.trainer.validate = validate
    c.datamodule.val_items = [None] * 4
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path)}, "train": False, "sft": None})
    assert _run(cfg, c)["val_reward_first"] == 0.25
    assert events == [("validate", ["meta", "meta"])]


def test_a_process_that_only_starts_the_ranks_moves_nothing(tiny_llama_factory):
    """Under ddp_spawn / ddp_fork the ranks are created from this process (CUDA must not be
    initialised before a fork): no device, and the models stay where they are."""
    from mintrl.sft.stage import models_device, place_models

    for strategy, expected in (("ddp_spawn", None), ("ddp", torch.device("cpu")), ("auto", torch.device("cpu"))):
        trainer = Trainer(strategy=strategy, accelerator="cpu", devices=2 if strategy != "auto" else 1, logger=False)
        assert models_device(trainer) == expected, strategy
    c = components(tiny_llama_factory, [], with_trainer=False)
    place_models(c, None)
    assert devices([c.context.policy, c.module.companion_models()[0]]) == ["cpu", "cpu"]
    place_models(c, META)
    assert devices([c.context.policy, c.module.companion_models()[0]]) == ["meta", "meta"]


def test_a_sharding_strategy_gets_the_policy_where_it_was_and_the_companions_on_its_device(
    tiny_llama_factory, tmp_path
):
    """Under ``trainer=fsdp`` the strategy shards the policy in ``configure_model`` and moves only the
    shards: the run must not move the full policy to the device first (every rank would hold all of
    its weights); the companions, which Lightning does not move, still go to the root device."""
    from mintrl.sft.stage import strategy_places_policy
    from mintrl.training.distributed import FullyShardedStrategy

    events = []
    c = components(tiny_llama_factory, events, with_trainer=True)
    assert not strategy_places_policy(c.trainer)
    sharding = Trainer(strategy=FullyShardedStrategy(), accelerator="cpu", devices=1, logger=False)
    assert strategy_places_policy(sharding)

    class OnMeta(FullyShardedStrategy):
        @property
        def root_device(self):
            return META

    c.trainer = Trainer(strategy=OnMeta(), accelerator="cpu", devices=1, logger=False)

    def validate(module, datamodule, verbose):
        events.append(("validate", devices([c.context.policy, c.module.companion_models()[0]])))
        return [{"val/reward": 0.5}]

    c.trainer.validate = validate
    c.datamodule.val_items = [None] * 2
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path)}, "train": False, "sft": None})
    assert _run(cfg, c)["val_reward_first"] == 0.5
    assert events == [("validate", ["cpu", "meta"])]
