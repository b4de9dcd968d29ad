"""The trainer's log-probs on a CUDA device equal the CPU values (skipped where no GPU is visible:
the ``gpu`` marker, tests/conftest.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from mintrl.model.logprobs import token_logprobs

pytestmark = pytest.mark.gpu


def test_trainer_logprobs_on_cuda_match_the_cpu(embedded, tokenizer):
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Calculate 3 + 4."}], add_generation_prompt=True, tokenize=True
    )
    response = tokenizer("3 + 4 = 7, so the answer is <answer>7</answer>.", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + response])  # [1, L]
    attention = torch.ones_like(ids)
    target = torch.zeros_like(ids, dtype=torch.bool)
    target[0, len(prompt) :] = True
    cpu, _ = token_logprobs(embedded.model, ids, attention, target, 0.8)  # [1, L] nats
    gpu_model = copy.deepcopy(embedded.model).to("cuda")
    gpu, _ = token_logprobs(gpu_model, ids.cuda(), attention.cuda(), target.cuda(), 0.8)
    assert (gpu.cpu() - cpu).abs().max().item() < 1e-3
    assert cpu[target].sum().item() < -0.1  # a real response, not a row of zeros
