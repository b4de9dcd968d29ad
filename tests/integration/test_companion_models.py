"""Models that run beside the policy without being the LightningModule's submodules (the frozen
step-0 copy, teachers, judge and intervention models) move to the policy's device at fit start;
Lightning itself moves only the module's own submodules."""

from __future__ import annotations

import functools

import torch
from hydra import compose, initialize_config_dir

from mintrl.build.components import build_components
from mintrl.build.config import CONFIG_DIR
from mintrl.objective import GRPO
from mintrl.training.module import PolicyModule


def test_fit_start_moves_every_companion_to_the_policy_device(tiny_model):
    companions = [torch.nn.Linear(3, 2), torch.nn.Sequential(torch.nn.Linear(2, 2))]
    module = PolicyModule(
        tiny_model, GRPO(), functools.partial(torch.optim.SGD, lr=0.1), companion_models=lambda: companions
    )
    module._device = torch.device("meta")  # where Lightning would have put the policy (a GPU)
    module.on_fit_start()
    assert [p.device.type for m in companions for p in m.parameters()] == ["meta"] * 4


def test_the_built_module_moves_the_teacher_and_the_step0_copy(tmp_path):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.output_dir={tmp_path}",
                "judge=teacher",
                "teacher_model.path=embedded",
                "intervention=self_privileged",  # generates from the frozen step-0 copy
            ],
        )
    c = build_components(cfg, trainer=False)
    models = c.module.companion_models()
    assert len(models) == 2  # the step-0 copy (full fine-tuning: a deep copy) and the embedded teacher
    assert all(m is not c.context.policy for m in models)
    c.module._device = torch.device("meta")
    c.module.on_fit_start()
    for model in models:
        assert {p.device.type for p in model.parameters()} == {"meta"}
    assert {p.device.type for p in c.context.policy.parameters()} == {"cpu"}  # the policy is Lightning's to move
