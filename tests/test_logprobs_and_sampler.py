"""Chunked log-probs equal the naive full-logits path; the HF sampler's log-probs and chunked
continuation agree with one teacher-forced forward pass to 2e-3 (EOS handling and argument checks
of every sampler: tests/test_sampler_contract.py)."""

import pytest
import torch
import torch.nn.functional as F

from mintrl.model.logprobs import token_logprobs
from mintrl.sampler import HFSampler
from mintrl.sampler.hf import score_sequences


def _naive(model, ids, attn, mask, temperature):
    logp = F.log_softmax(model(input_ids=ids, attention_mask=attn).logits.float() / temperature, -1)  # [N, L, V]
    out = torch.zeros(ids.shape)
    out[:, 1:] = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    return out * mask


@pytest.mark.parametrize("chunk_tokens", [1, 3, 1024])
def test_chunked_logprobs_and_gradients_match_naive_path(tiny_model, chunk_tokens):
    torch.manual_seed(1)
    ids = torch.randint(3, 128, (3, 9))
    attn = torch.ones_like(ids)
    attn[2, 7:] = 0  # right padding
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 4:] = True
    mask[2, 7:] = False
    lp, ent = token_logprobs(tiny_model, ids, attn, mask, temperature=0.7, chunk_tokens=chunk_tokens)
    ref = _naive(tiny_model, ids, attn, mask, 0.7)
    assert torch.allclose(lp, ref, atol=1e-5)
    assert (lp[~mask] == 0).all() and (ent[~mask] == 0).all() and (ent[mask] > 0).all()
    g1 = torch.autograd.grad(lp.sum(), tiny_model.model.layers[0].mlp.up_proj.weight)[0]
    g2 = torch.autograd.grad(
        _naive(tiny_model, ids, attn, mask, 0.7).sum(), tiny_model.model.layers[0].mlp.up_proj.weight
    )[0]
    assert torch.allclose(g1, g2, atol=1e-5)


def test_token_logprobs_rejects_bad_arguments(tiny_model):
    ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(tiny_model, ids, ids, ids.bool(), temperature=0.0)


def _prompts(tokenizer):
    texts = ["What is 2 + 3?", "Name a colour."]
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for t in texts
    ]


def test_sampler_logprobs_and_chunked_continuation_match_one_forward_pass(embedded, tokenizer):
    sampler = HFSampler(embedded.model, tokenizer)
    prompts = _prompts(tokenizer)
    torch.manual_seed(3)
    first = sampler.generate(prompts, 6, temperature=0.8)
    prefixes = [p + ids.tolist() for p, ids in zip(prompts, first.token_ids)]
    second = sampler.generate(prefixes, 6, temperature=0.8)  # continue from the prefix (chunk 2)
    for i, p in enumerate(prompts):
        response = first.token_ids[i].tolist() + second.token_ids[i].tolist()
        sampled = torch.cat([first.logprobs[i], second.logprobs[i]])
        scored = score_sequences(embedded.model, [p + response], [len(p)], temperature=0.8)[0]
        assert scored.shape == sampled.shape
        diff = (scored - sampled).abs()
        assert diff.max().item() < 2e-3, f"row {i}: max |sampler - forward| = {diff.max().item():.2e}"
        assert (sampled <= 0).all()
