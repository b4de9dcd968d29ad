"""The policy trains with dropout off: its training-mode forward equals its evaluation-mode forward, the
one the rollout log-probs came from, so the first update's ratio on unchanged weights is exactly 1."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from mintrl.model.lora import LoraSettings, apply_lora
from mintrl.objective.grpo import GRPO
from mintrl.training.module import PolicyModule


def _gpt2():
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.5
    return GPT2LMHeadModel(config)


def _llama():
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, attention_dropout=0.5,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def _llama_lora():
    """A LoRA policy with adapter dropout 0.5 and nonzero ``B`` (a fresh adapter's ``B = 0`` would hide
    the dropout: its branch adds nothing)."""
    policy = apply_lora(_llama(), LoraSettings(r=4, alpha=8.0, dropout=0.5))
    for name, param in policy.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    return policy


@pytest.mark.parametrize(
    "build", [_gpt2, _llama, _llama_lora], ids=["gpt2-dropout-modules", "llama-attention-dropout", "lora-dropout"]
)
def test_the_training_forward_is_the_evaluation_forward(build):
    torch.manual_seed(0)
    policy = build()
    ids = torch.randint(0, 64, (2, 12))
    policy.eval()
    with torch.no_grad():
        reference = policy(ids).logits
    module = PolicyModule(policy, GRPO(), functools.partial(torch.optim.SGD, lr=0.1))
    module.train()
    assert module.policy.training
    with torch.no_grad():
        first, second = module.policy(ids).logits, module.policy(ids).logits
    assert torch.equal(first, reference) and torch.equal(second, reference)
