"""Chunked log-probs equal the naive full-logits path (values and gradients); bad arguments are refused."""

import pytest
import torch
import torch.nn.functional as F

from mintrl.model.logprobs import token_logprobs


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
