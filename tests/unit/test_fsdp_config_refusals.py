"""What ``check_config`` refuses under ``trainer=fsdp`` before any model loads: CPU offload (it
cannot run on a GPU as built: Lightning moves the sharded policy to the GPU after sharding, and FSDP2
refuses offloaded shards off the CPU), while a LoRA policy with a KL reference on its adapter-off
base is accepted (tests/integration/test_fsdp_lora_reference.py runs it on 2 ranks)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config


def composed(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", "trainer=fsdp", *overrides])


def test_cpu_offload_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"trainer.strategy.cpu_offload=true is refused: Lightning moves the sharded"):
        check_config(composed("trainer.strategy.cpu_offload=true"))
    check_config(composed("trainer.strategy.cpu_offload=false"))


def test_lora_with_a_kl_reference_is_accepted_under_fsdp():
    check_config(composed("method=grpo", "model/lora=default", "objective.kl_coef=0.05"))
