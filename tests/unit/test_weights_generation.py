"""The policy's weights generation (:func:`mintrl.sampler.weights.weights_generation`): the counter the
training module advances after every write to the weights and every sampler, cache and copy reads
(tensor version counters miss the writes of a fused or ``foreach`` optimizer). With a fake ``vllm``
(tests/fake_vllm.py): the vLLM sampler's push streams one tensor at a time, the engine's device is
the trainer's accelerator, and the cache is emptied before the KV cache wakes."""

from __future__ import annotations

import copy
import functools
import gc
import os
import sys
from types import SimpleNamespace

import pytest
import torch
from fake_vllm import FakeLLM, fake_vllm_module
from hydra import compose, initialize_config_dir
from update_helpers import RepeatedBatch, cpu_trainer, make_objective, rollout_batch

from mintrl.build.config import CONFIG_DIR
from mintrl.model.lora import LoraSettings, apply_lora, lora_scalings, merge_lora_stream, merge_lora_weights
from mintrl.sampler import HFSampler, VLLMSampler
from mintrl.sampler.weights import full_state_dict, hf_state_dict, weights_generation
from mintrl.training.module import PolicyModule

TOKENIZER = SimpleNamespace(pad_token_id=0, save_pretrained=lambda path: None)
PROMPTS = [[1, 5, 6, 7], [1, 8, 9], [1, 10, 11, 12, 13], [1, 14]]


@pytest.fixture()
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm_module())
    FakeLLM.started.clear()
    for key in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.delenv(key, raising=False)
    return FakeLLM


def test_one_counter_per_model_advanced_by_its_writers(tiny_model):
    generation = weights_generation(tiny_model)
    assert generation.value == 0 and weights_generation(tiny_model) is generation
    assert generation.advance() == 1 and weights_generation(tiny_model).value == 1
    assert weights_generation(copy.deepcopy(tiny_model)).value == 0  # a copy is another model


def test_every_sampler_sees_a_step_that_leaves_the_tensor_versions(tiny_model, tmp_path, fake_vllm):
    """A fused AdamW step (CUDA's fast path; on FSDP2's DTensors the ``foreach`` one does the same)
    moves the weights without bumping their version counters. After one such update through the
    Trainer, the bf16 sampling copy is refreshed to the new weights, the continuation cache is not
    reused, and the vLLM engine receives the new weights."""
    policy = tiny_model
    bf16 = HFSampler(policy, TOKENIZER, dtype="bf16")
    cached = HFSampler(policy, TOKENIZER, dtype="fp32", continuation_cache_mib=16)
    engine = VLLMSampler(policy, TOKENIZER)
    torch.manual_seed(0)
    bf16.generate(PROMPTS, 3)
    first = cached.generate(PROMPTS, 3, cache_keys=[0, 1, 2, 3])
    again = [p + t.tolist() for p, t in zip(PROMPTS, first.token_ids)]
    cached.generate(again, 2, cache_keys=[0, 1, 2, 3])
    reused = cached.reused_tokens
    assert reused > 0, "the second call continues from kept KV (the control for the check below)"
    assert engine.sync_weights() and fake_vllm.started[0].pushes == 1

    versions = [p._version for p in policy.parameters()]
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    module = PolicyModule(
        policy, make_objective("mintrl-const", policy), functools.partial(torch.optim.AdamW, lr=1e-2, fused=True)
    )
    trainer = cpu_trainer(tmp_path, 1)
    trainer.fit(module, datamodule=RepeatedBatch(rollout_batch(policy), times=4))
    assert trainer.global_step == 1
    assert [p._version for p in policy.parameters()] == versions, "the premise: fused AdamW leaves the versions"
    assert not torch.equal(policy.model.layers[0].mlp.up_proj.weight, before["model.layers.0.mlp.up_proj.weight"])

    bf16.generate(PROMPTS, 2)
    assert bf16.copy.refreshes == 2
    copied = bf16.copy.module.state_dict()
    for name, live in policy.state_dict().items():
        assert torch.equal(copied[name], live.to(torch.bfloat16)), name
    cached.generate(again, 2, cache_keys=[0, 1, 2, 3])
    assert cached.reused_tokens == reused, "KV computed with the old weights was reused"
    assert engine.sync_weights() and fake_vllm.started[0].pushes == 2
    pushed = fake_vllm.started[0].weights
    assert all(torch.equal(pushed[name], live) for name, live in policy.state_dict().items() if name in pushed)
    assert not engine.sync_weights(), "no push while the weights stay"


def test_a_checkpoint_load_advances_the_generation(tiny_model):
    module = PolicyModule(tiny_model, make_objective("mintrl-const", tiny_model), torch.optim.SGD)
    module.on_load_checkpoint({"state_dict": {}})
    assert weights_generation(tiny_model).value == 1


def test_the_push_streams_one_tensor_and_a_tied_head_from_one_tensor(tiny_llama_tied, fake_vllm):
    """The in-process push hands the engine an iterator: one received tensor is alive at a time (a
    list of all of them held every full tensor at once), and a tied LM head, the embedding's
    tensor, is sent under both names right after each other (vLLM's CPU backend keeps its own copy
    of the head, which a reload without ``lm_head.weight`` leaves stale: test_vllm.py's gaps);
    under inference mode (Lightning's validation) too."""
    policy = tiny_llama_tied
    sampler = VLLMSampler(policy, TOKENIZER)
    with torch.inference_mode():
        sampler.sync_weights()
    llm = fake_vllm.started[0]
    assert llm.pushed_in_inference_mode == [True]
    assert llm.peak_alive == 1
    names = llm.pushed_names[0]
    assert len(names) == len(set(names)) and sorted(names) == sorted(policy.state_dict())
    assert names.index("lm_head.weight") == names.index("model.embed_tokens.weight") + 1
    assert "lm_head.weight" not in llm.loaded  # the engine's start folder drops the tie (its config re-ties it)
    assert sorted(llm.loaded) == sorted(n for n in names if n != "lm_head.weight")


@pytest.fixture()
def tiny_llama_tied():
    from conftest import tiny_llama

    return tiny_llama(tie_word_embeddings=True)


@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_the_engine_runs_where_the_trainer_accelerator_says(tiny_model, fake_vllm, accelerator):
    """The policy's tensors are on the CPU in both cases (an SFT stage may generate before the
    policy reaches the GPU): the engine's backend is the trainer's accelerator's."""
    VLLMSampler(tiny_model, TOKENIZER, accelerator=accelerator, gpu_memory_utilization=0.4).engine()
    kwargs = fake_vllm.started[0].kwargs
    if accelerator == "gpu":
        assert kwargs["gpu_memory_utilization"] == 0.4 and "block_size" not in kwargs
        assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    else:
        assert "gpu_memory_utilization" not in kwargs and kwargs["block_size"] == 32


def test_the_config_passes_the_trainer_accelerator():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        gpu = compose("train", overrides=["sampler=vllm", "trainer=gpu"])
        cpu = compose("train", overrides=["sampler=vllm", "trainer=cpu"])
    assert (gpu.sampler.accelerator, cpu.sampler.accelerator) == ("gpu", "cpu")
    with pytest.raises(ValueError, match="sampler.accelerator"):
        VLLMSampler(torch.nn.Linear(1, 1), None, accelerator="tpu")


def test_the_cache_is_emptied_before_the_kv_cache_wakes(tiny_model, fake_vllm, monkeypatch):
    """Sleep mode (GPU): after the weights are pushed, unreachable tensors are collected and torch's
    cache emptied before the KV cache wakes, so the KV cache finds the memory the push used."""
    sampler = VLLMSampler(tiny_model, TOKENIZER, accelerator="gpu", sleep_mode=True)
    llm = sampler.engine()
    assert llm.kwargs["enable_sleep_mode"]
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: llm.events.append(("empty_cache",)))
    monkeypatch.setattr(gc, "collect", lambda *a: llm.events.append(("gc",)) or 0)
    sampler.release()
    weights_generation(tiny_model).advance()
    sampler._ready()
    assert llm.events == [
        ("sleep", 1),
        ("gc",),
        ("empty_cache",),
        ("wake_up", ["weights"]),
        ("rpc", "reload_weights"),
        ("reset_prefix_cache",),
        ("gc",),
        ("empty_cache",),
        ("wake_up", ["kv_cache"]),
    ]


def test_the_streamed_lora_merge_equals_the_dict_merge(tiny_model):
    """A LoRA policy's Hugging Face weights as a stream equal the merge of the whole state dict; an
    adapter tensor whose base weight never comes is an error."""
    policy = apply_lora(tiny_model, LoraSettings(r=2, alpha=4.0))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    scalings = lora_scalings(policy)
    expected = merge_lora_weights(dict(full_state_dict(policy)), scalings)
    streamed = hf_state_dict(policy)
    assert sorted(streamed) == sorted(expected)
    assert all(torch.equal(streamed[k], expected[k]) for k in streamed)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(streamed[q], policy.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight)

    with pytest.raises(ValueError, match="without a base weight or adapter"):
        list(merge_lora_stream([("base_model.model.lin.lora_A.default.weight", torch.ones(1, 2))], {}))
