"""LoRA on the embedded model: the memory the shared frozen base saves, the LoRA rows (preset=cpu_lora,
preset=paper_math_lora_1gpu), and a 2-step run of ``method=grpo preset=cpu_lora`` with a KL reference (the
base, adapter off)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import TINY_RUN
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from mintrl.build.components import ModelContext, build_components
from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.model.loading import LoadedPolicy
from mintrl.model.lora import AdapterOff, LoraSettings, apply_lora

# SmolLM2-135M: 30 layers, hidden 576, intermediate 1536, 9 query / 3 KV heads of 64 dims. LoRA r = 16
# on its 7 linear layers adds r (in + out) each: q 576+576, k 576+192, v 576+192, o 576+576,
# gate 576+1536, up 576+1536, down 1536+576 = 10176 per r, per layer
ADAPTER_PARAMS = 30 * 16 * 10176  # 4,884,480


def _unique_parameter_bytes(*models) -> int:
    """Bytes of the distinct parameter storages reachable from ``models`` (shared ones counted once)."""
    seen: dict[int, int] = {}
    for model in models:
        for p in model.parameters():
            seen[p.untyped_storage().data_ptr()] = p.untyped_storage().nbytes()
    return sum(seen.values())


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_the_frozen_step0_policy_costs_no_second_copy_under_lora(embedded, tokenizer):
    base_bytes = _unique_parameter_bytes(embedded.model)
    full = ModelContext(LoadedPolicy(copy.deepcopy(embedded.model), tokenizer, "embedded"))
    full_bytes = _unique_parameter_bytes(full.policy, full.frozen_policy())
    lora = ModelContext(
        LoadedPolicy(apply_lora(copy.deepcopy(embedded.model), LoraSettings(r=16, alpha=32.0)), tokenizer, "embedded")
    )
    frozen = lora.frozen_policy()
    assert isinstance(frozen, AdapterOff) and lora.teacher(None).model is frozen  # one view for every user
    lora_bytes = _unique_parameter_bytes(lora.policy, frozen)
    assert full_bytes == 2 * base_bytes
    assert lora_bytes == base_bytes + 4 * ADAPTER_PARAMS
    saved = (full_bytes - lora_bytes) / 2**20
    print(f"policy + frozen step-0 policy: full {full_bytes / 2**20:.0f} MiB, LoRA {lora_bytes / 2**20:.0f} MiB")
    assert saved > 490  # SmolLM2-135M in fp32 is 513 MiB; the adapter 19 MiB


def test_lora_rows_compose_with_an_adapter_learning_rate():
    rows = (
        ("method=grpo preset=cpu_lora", 2e-4),
        ("method=mintrl_const preset=cpu_lora", 2e-4),
        ("experiment=paper/grpo preset=paper_math_lora_1gpu", 1e-5),
    )
    for row, lr in rows:
        cfg = _compose(*row.split())
        assert cfg.model.lora._target_ == "mintrl.model.lora.LoraSettings" and cfg.module.optimizer.lr == lr, row
    paper = _compose("experiment=paper/mintrl_const", "preset=paper_math_lora_1gpu")
    assert (paper.model.path, paper.model.lora.r, paper.model.lora.alpha) == ("Qwen/Qwen3-1.7B", 64, 128.0)
    assert paper.trainer.devices == 1 and paper.module.gradient_checkpointing is True
    assert paper.rollout.chunk_size == 512 and paper.objective.kappa == -0.2  # the paper row underneath
    assert "lora" not in _compose("method=grpo").model  # full fine-tuning stays the default


def test_fsdp_lora_refuses_a_self_privileged_judge_on_the_step0_policy():
    with pytest.raises(ValueError, match="judge=SelfPrivilegedJudge with judge.teacher=null"):
        check_config(_compose("model/lora=default", "trainer=fsdp", "sampler=vllm", "judge=self_privileged"))
    check_config(_compose("trainer=fsdp", "sampler=vllm", "judge=self_privileged"))  # full weights: a step-0 copy
    check_config(
        _compose(
            "model/lora=default", "trainer=fsdp", "sampler=vllm", "judge=self_privileged", "+judge.teacher=embedded"
        )
    )  # a teacher generates instead
    check_config(
        _compose("model/lora=default", "trainer=fsdp", "sampler=vllm", "judge=teacher", "teacher_model.path=embedded")
    )


@pytest.mark.slow  # 2 steps + validation: 8 min on the shared 2-core machine under load (LoRA decoding is slower on CPU)
def test_grpo_lora_row_trains_two_steps_with_the_base_as_kl_reference(tmp_path):
    cfg = _compose(
        "method=grpo",
        "preset=cpu_lora",
        f"paths.output_dir={tmp_path}",
        "trainer.max_steps=2",
        "validate_at_start=false",
        "rollout.progress=false",
        "objective.kl_coef=0.05",
        *TINY_RUN,
    )
    torch.manual_seed(0)
    c = build_components(cfg)
    assert isinstance(c.module.objective.reference, AdapterOff)
    c.trainer.fit(c.module, datamodule=c.datamodule)
    kl = [h["objective/kl"] for h in c.module.history]
    assert len(kl) == 2
    assert abs(kl[0]) < 1e-6 < kl[1]  # step 1: B = 0, the policy is its base; then the adapter moved
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    policy_keys = [k for k in ckpt["state_dict"] if k.startswith("policy.")]
    assert len(policy_keys) == 2 * 7 * 30 and all(".lora_" in k for k in policy_keys)
    weights = load_file(tmp_path / "hf_policy" / "model.safetensors")
    assert not any("lora" in k for k in weights)
    assert (tmp_path / "hf_adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "hf_policy")
    ids = torch.tensor([[1, 330, 2234, 314, 216]])
    with torch.no_grad():
        assert (merged(ids).logits - c.context.policy.eval()(ids).logits).abs().max().item() < 1e-4
