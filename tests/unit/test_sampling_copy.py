"""The sampling copy (sampler/sampling_copy.py) is built without drawing random weights: every
parameter is the policy's after the copy, the head is tied where the config ties it, and the
rotary frequencies the state dict does not hold equal those of a model built with its random draw."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_llama
from transformers import AutoModelForCausalLM

from mintrl.model.heads import is_tied
from mintrl.sampler.sampling_copy import SamplingCopy, plain_model


@pytest.mark.parametrize("tied", [True, False])
def test_the_copy_holds_the_policys_weights_and_the_configs_buffers(tied):
    policy = tiny_llama(tie_word_embeddings=tied)
    copy = SamplingCopy(policy, torch.bfloat16).current()
    assert is_tied(copy) is tied is is_tied(policy)
    weights = dict(copy.named_parameters(remove_duplicate=False))
    for name, p in policy.named_parameters(remove_duplicate=False):
        assert torch.equal(weights[name], p.detach().to(torch.bfloat16)), name
    drawn = AutoModelForCausalLM.from_config(policy.config, dtype=torch.bfloat16)  # the random draw
    buffers = dict(copy.named_buffers())
    assert sorted(buffers) == ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
    for name, b in drawn.named_buffers():
        assert buffers[name].dtype == torch.float32 and torch.equal(buffers[name], b), name
    # the same tokens give the same log-probs as the policy, within bf16 rounding
    ids = torch.randint(3, 128, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = policy(ids).logits.log_softmax(-1)
        got = copy(ids).logits.float().log_softmax(-1)
    assert (got - ref).abs().max() < 0.05


def test_no_weight_is_drawn_at_random():
    config = tiny_llama().config
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    plain_model(config, torch.bfloat16, "cpu")
    assert torch.equal(torch.rand(1), before)  # the global generator did not move: nothing was drawn
