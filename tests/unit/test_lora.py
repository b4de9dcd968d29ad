"""LoRA adapters (``model/lora=default``) on a tiny random Llama: only the adapter trains, the
adapter-disabled view is the step-0 policy, the merged export equals the adapter model, Lightning
checkpoints hold the adapter and its optimizer state only, and resuming is exact."""

from __future__ import annotations

import copy
import functools
from types import SimpleNamespace

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from update_helpers import RepeatedBatch, cpu_trainer, rollout_batch

from mintrl.model.logprobs import token_logprobs
from mintrl.model.lora import AdapterOff, LoraSettings, apply_lora, base_model, frozen_step0, merge_lora_weights
from mintrl.objective import GRPO
from mintrl.training.callbacks.export import HFExport, adapter_folder_name
from mintrl.training.module import PolicyModule

# the tiny Llama: 2 layers x 7 linear layers (q, k, v, o, gate, up, down), hidden 32, intermediate 64
RANK = 4
# per layer: q 32x32, k 32x16, v 32x16, o 32x32, gate 32x64, up 32x64, down 64x32 (in x out);
# LoRA adds r (in + out) per linear layer
LORA_PARAMS = 2 * RANK * ((32 + 32) + (32 + 16) + (32 + 16) + (32 + 32) + (32 + 64) + (32 + 64) + (64 + 32))


def _lora(model, **kw):
    return apply_lora(model, LoraSettings(r=RANK, alpha=8.0, **kw))


def _module(policy, lr=1e-2):
    return PolicyModule(policy, GRPO(), functools.partial(torch.optim.AdamW, lr=lr), max_grad_norm=None)


def _logprobs(model, batch):
    with torch.no_grad():
        return token_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, batch.temperature)[0]


def test_only_adapter_parameters_change_and_the_optimizer_sees_only_them(tiny_model, tmp_path):
    step0 = copy.deepcopy(tiny_model)
    batch = rollout_batch(tiny_model)
    policy = _lora(tiny_model)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    module = _module(policy)
    trainer = cpu_trainer(tmp_path, max_steps=2)
    trainer.fit(module, datamodule=RepeatedBatch(batch))
    optimized = [p for group in trainer.optimizers[0].param_groups for p in group["params"]]
    assert sum(p.numel() for p in optimized) == LORA_PARAMS == 4096
    changed = {k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])}
    lora_b = {k for k in before if ".lora_B." in k}
    assert len(lora_b) == 14 and lora_b <= changed  # B starts at 0 and must move
    assert all(".lora_A." in k or ".lora_B." in k for k in changed), sorted(changed)[:3]
    # the base weights are the step-0 model's, bit for bit
    base = {k.removeprefix("base_model.model.").replace(".base_layer.", "."): v for k, v in policy.state_dict().items()}
    assert all(torch.equal(base[k], v) for k, v in step0.state_dict().items())


def test_the_base_model_of_a_lora_policy_is_the_wrapped_model_and_a_plain_policy_is_its_own(tiny_model):
    plain = copy.deepcopy(tiny_model)
    assert base_model(plain) is plain
    wrapped = _lora(plain)
    assert base_model(wrapped) is wrapped.base_model.model
    assert type(base_model(wrapped)).__name__ == "LlamaForCausalLM"  # the HF causal LM, its layers now holding adapters


def test_adapter_disabled_view_is_the_step0_policy(tiny_model):
    step0 = copy.deepcopy(tiny_model)
    batch = rollout_batch(tiny_model)
    policy = _lora(tiny_model)
    with torch.no_grad():  # a trained adapter: B no longer 0
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.5)
    policy.train()
    frozen = frozen_step0(policy)
    assert isinstance(frozen, AdapterOff)
    gap_to_step0 = (_logprobs(frozen, batch) - _logprobs(step0, batch)).abs().max().item()
    moved = (_logprobs(policy, batch) - _logprobs(step0, batch)).abs().max().item()
    assert gap_to_step0 < 1e-5 and moved > 0.05
    # generation on the view: the base's tokens; the policy's mode and adapter come back afterwards
    torch.manual_seed(3)
    a = frozen.generate(input_ids=batch.input_ids[:2, :3], max_new_tokens=4, do_sample=False, pad_token_id=0)
    b = step0.eval().generate(input_ids=batch.input_ids[:2, :3], max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(a, b)
    assert policy.training and (_logprobs(policy, batch) - _logprobs(step0, batch)).abs().max().item() == moved
    assert sum(p.numel() for p in frozen.parameters()) == sum(p.numel() for p in policy.parameters())  # no copy


def test_merge_is_w_plus_scaled_b_a():
    """W = I (2x2), A = [[1, 2]] (r = 1), B = [[1], [0]], scaling 2: W + 2 B A = [[3, 4], [0, 1]]."""
    tensors = {
        "base_model.model.lin.base_layer.weight": torch.eye(2),
        "base_model.model.lin.lora_A.default.weight": torch.tensor([[1.0, 2.0]]),
        "base_model.model.lin.lora_B.default.weight": torch.tensor([[1.0], [0.0]]),
        "base_model.model.norm.weight": torch.ones(2),
    }
    merged = merge_lora_weights(tensors, {"base_model.model.lin": 2.0})
    assert sorted(merged) == ["lin.weight", "norm.weight"]
    assert merged["lin.weight"].tolist() == [[3.0, 4.0], [0.0, 1.0]]
    assert merged["norm.weight"] is tensors["base_model.model.norm.weight"]
    with pytest.raises(ValueError, match="lora_embedding_A"):
        merge_lora_weights({"x.lora_embedding_A.default": torch.ones(1)}, {})


def test_merged_export_equals_the_adapter_model_and_the_adapter_folder_loads(tiny_model, tmp_path):
    base_copy = copy.deepcopy(tiny_model)
    batch = rollout_batch(tiny_model)
    policy = _lora(tiny_model)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.5)
    expected = _logprobs(policy, batch)
    out = HFExport(str(tmp_path / "hf_policy")).export(None, SimpleNamespace(policy=policy, tokenizer=None))
    weights = load_file(out / "model.safetensors")
    assert not any("lora" in k or "base_layer" in k for k in weights)
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert (_logprobs(merged, batch) - expected).abs().max().item() < 1e-5
    adapter = tmp_path / "hf_adapter"
    assert sorted(p.name for p in adapter.iterdir() if p.suffix in (".json", ".safetensors")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    reloaded = PeftModel.from_pretrained(base_copy, adapter)
    assert (_logprobs(reloaded, batch) - expected).abs().max().item() < 1e-5


def test_checkpoint_holds_the_adapter_only_and_resume_is_exact(tiny_model, tmp_path):
    batch = rollout_batch(tiny_model)
    base = copy.deepcopy(tiny_model)

    def fit(steps, ckpt=None, save=None):
        torch.manual_seed(0)  # the same adapter initialisation (A is random, B = 0) in every run
        policy = _lora(copy.deepcopy(base))
        module = _module(policy)
        trainer = cpu_trainer(tmp_path, steps)
        trainer.fit(module, datamodule=RepeatedBatch(batch), ckpt_path=ckpt)
        if save:
            trainer.save_checkpoint(save)
        return policy

    straight = fit(4)
    fit(2, save=tmp_path / "lora.ckpt")
    resumed = fit(4, ckpt=tmp_path / "lora.ckpt")
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in straight.state_dict().items())
    ckpt = torch.load(tmp_path / "lora.ckpt", weights_only=True)
    assert ckpt["global_step"] == 2
    policy_keys = [k for k in ckpt["state_dict"] if k.startswith("policy.")]
    assert len(policy_keys) == 28 and all(".lora_A." in k or ".lora_B." in k for k in policy_keys)
    adam = ckpt["optimizer_states"][0]["state"]
    assert sum(s["exp_avg"].numel() for s in adam.values()) == LORA_PARAMS
    # against full fine-tuning: the same run without LoRA
    full = _module(copy.deepcopy(base))
    trainer = cpu_trainer(tmp_path, 2)
    trainer.fit(full, datamodule=RepeatedBatch(batch))
    trainer.save_checkpoint(tmp_path / "full.ckpt")
    lora_size, full_size = ((tmp_path / n).stat().st_size for n in ("lora.ckpt", "full.ckpt"))
    # weights + 2 Adam moments in fp32: 3 x 4 x (4096 vs 26784) bytes, plus the same fixed overhead
    assert full_size - lora_size > 0.9 * 12 * (26784 - 4096)
    assert lora_size < 0.5 * full_size


def test_a_lora_checkpoint_refuses_a_full_weight_run(tiny_model):
    module = _module(tiny_model)
    with pytest.raises(ValueError, match="same model/lora setting"):
        module.on_load_checkpoint({"mintrl_frozen_base_omitted": 10, "state_dict": {}})


@pytest.mark.parametrize(
    "field, value", [("r", 0), ("r", 2.5), ("alpha", 0.0), ("dropout", 1.0), ("target_modules", [])]
)
def test_lora_settings_name_a_bad_field(field, value):
    with pytest.raises(ValueError, match=f"model.lora.{field}"):
        LoraSettings(**{field: value})


def test_adapter_folder_sits_next_to_its_policy_folder():
    assert [adapter_folder_name(n) for n in ("hf_policy", "hf_sft_policy", "export")] == [
        "hf_adapter",
        "hf_sft_adapter",
        "export_adapter",
    ]


def test_mintrl_eval_loads_an_adapter_only_checkpoint_into_a_lora_policy(tiny_model, tmp_path):
    from mintrl.eval.evaluate import load_lightning_policy

    trained = _lora(copy.deepcopy(tiny_model))
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if ".lora_B." in name:
                p.normal_()
    adapter = {f"policy.{k}": v for k, v in trained.state_dict().items() if ".lora_" in k}
    torch.save({"state_dict": adapter, "mintrl_frozen_base_omitted": 17}, tmp_path / "lora.ckpt")
    fresh = _lora(copy.deepcopy(tiny_model))
    load_lightning_policy(fresh, str(tmp_path / "lora.ckpt"))
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in trained.state_dict().items())
    with pytest.raises(ValueError, match="evaluate it with model/lora=default"):
        load_lightning_policy(copy.deepcopy(tiny_model), str(tmp_path / "lora.ckpt"))


def test_a_tied_lm_head_is_left_out_of_the_adapter_checkpoint_and_restored_on_load(tiny_model, tmp_path):
    # SmolLM2 ties lm_head to embed_tokens: named_parameters() lists the shared tensor once (as the
    # embedding), state_dict() under both names; the checkpoint must drop both and resume must restore both
    config = copy.deepcopy(tiny_model.config)
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    tied = type(tiny_model)(config).eval()
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    module = _module(_lora(tied))
    state = module.state_dict()
    checkpoint = {"state_dict": state}
    module.on_save_checkpoint(checkpoint)
    kept = list(checkpoint["state_dict"])
    assert len(kept) == 28 and all(".lora_A." in k or ".lora_B." in k for k in kept)
    assert checkpoint["mintrl_frozen_base_omitted"] == len(state) - 28
    module.on_load_checkpoint(checkpoint)
    assert checkpoint["state_dict"].keys() == state.keys()
    head = "policy.base_model.model.lm_head.weight"
    assert torch.equal(checkpoint["state_dict"][head], state[head])
