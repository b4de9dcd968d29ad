"""A lean decode loop for ``sampler=hf`` (``sampler.engine=loop``): only what sampling needs.

Hugging Face ``generate`` keeps a finished row in the batch (and its KV in the cache) until the
longest row ends, and runs its general machinery (logits processors, stopping criteria) every step.
:func:`decode` instead runs

1. one prefill forward of all left-padded prefixes (continuing from a given cache of their first
   columns, the sampler's kept continuation KV, when there is one); without such a cache each
   distinct prefix is encoded once and its KV copied to the rows that share it (a group's
   rollouts start from the same prompt: the main job's 32 rows are 8 prompts);
2. per step, one forward of the rows still running: a row that sampled an EOS id leaves the batch
   and the KV cache (``index_select`` on the batch dimension), and leading cache columns that are
   padding in every remaining row are cut;
3. sampling from one log-softmax: ``log_softmax(logits / T)`` gives the recorded log-prob, top-p
   masks it, and the token is drawn from the renormalised rest by inverting its cumulative sum
   (:func:`sample`, :func:`inverse_cdf_draw`), the same
   distribution as :class:`mintrl.sampler.hf.HFSampler`'s ``generate`` engine.

Positions follow ``generate``: ``cumsum(mask) - 1`` over each row's real tokens (padding gets 0),
then one more per step, so models with absolute position embeddings (GPT-2) decode as they do alone.
Shapes: ``B`` rows of the call, ``A`` rows still running, ``W`` prefix width, ``S`` cache columns,
``V`` vocabulary, ``N`` the budget (``max_new_tokens``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from mintrl.model.lora import base_model
from mintrl.model.shared_prompts import CACHE_ARG


def left_pad(prefixes: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both ``[B, W]`` int64: each prefix right-aligned after
    ``pad_token_id`` padding (mask 0 there, 1 on its tokens); ``W`` is the longest prefix."""
    width = max(len(p) for p in prefixes)
    input_ids = torch.full((len(prefixes), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prefixes), width), dtype=torch.long)
    for i, p in enumerate(prefixes):
        input_ids[i, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
        attention_mask[i, width - len(p) :] = 1
    return input_ids, attention_mask


def generation_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, W]`` int64 positions as ``generate`` gives them: ``cumsum(mask) - 1``, 0 on padding."""
    return (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The two ``[A, V]`` float32 views of one step's logits ``[A, V]``: ``log_softmax(logits / T)``
    (what is recorded, nats) and the same with the tokens outside the top-p nucleus at ``-inf``
    (what is sampled from; the same tensor when ``top_p >= 1``). The nucleus is the smallest set
    of most likely tokens whose probability reaches ``top_p``."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return logp, logp
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    probs = sorted_logp.exp()
    drop_sorted = probs.cumsum(-1) - probs >= top_p  # the mass before a token already reaches top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logp, logp.masked_fill(drop, float("-inf"))


def sample(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``[A, V]`` logits (temperature ``T``, top-p; torch's global RNG).

    Returns:
        ``(tokens [A] int64, logprobs [A] float32)``: each token's ``log_softmax(logits / T)``
        over the full vocabulary (nats), also when top-p renormalised the draw.
    """
    logp, scores = sampling_logprobs(logits, temperature, top_p)
    tokens = inverse_cdf_draw(scores.softmax(-1))  # [A]
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def inverse_cdf_draw(probs: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``[A, V]`` probabilities (rows sum to ~1; zeros allowed) by inverting
    the cumulative sum at ``u ~ U[0, 1)`` (torch's global RNG): ``[A]`` int64, never a
    zero-probability token. One uniform per row instead of ``torch.multinomial``'s exponential
    variate per vocabulary entry (about 13% of a CPU decode step for a 49k vocabulary)."""
    cdf = probs.cumsum(-1)  # [A, V], non-decreasing
    u = torch.rand(probs.shape[0], 1, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]  # [A, 1]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # first index whose cdf exceeds u
    # u rounded up to the total (probability ~2^-24): the last token with positive probability
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)  # [A]
    return torch.minimum(tokens, last)


@dataclass
class Decoded:
    """What :func:`decode` sampled, and the KV of the rows it did not end.

    Attributes:
        tokens: ``[B, N]`` int64 sampled ids; row ``i`` holds ``lengths[i]`` of them (its EOS last
            when it sampled one), then ``pad_token_id``.
        logprobs: ``[B, N]`` float32, ``log_softmax(logits / T)`` of each sampled token (0 after a row's end).
        lengths: ``[B]`` int64 tokens sampled per row.
        cache: the KV of the rows that sampled no EOS and ran to the largest budget (their last
            token has no KV yet), ``R`` rows.
        cache_rows: ``[R]`` int64, the input row of each cache row.
        cache_pad: ``[R]`` int64, leading padding columns of each cache row (its tokens follow them).
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    lengths: torch.Tensor
    cache: DynamicCache
    cache_rows: torch.Tensor
    cache_pad: torch.Tensor


def _forward(model, input_ids, attention_mask, position_ids, cache, slim: bool) -> torch.Tensor:
    # one forward continuing ``cache`` (updated in place); ids/positions [A, q], mask [A, S + q] -> logits [A, V]
    extra = {"logits_to_keep": 1} if slim else {}
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        **{CACHE_ARG: cache},
        **extra,
    )
    return out.logits[:, -1]


def _takes_logits_to_keep(model) -> bool:
    base = base_model(model)  # a peft model passes the argument on
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def drop_rows(cache: DynamicCache, keep: torch.Tensor) -> None:
    """Keep only the rows ``keep`` (``[A']`` int64 indices, repeats allowed: a repeated row is
    copied) of every layer of ``cache``, in place."""
    cache.batch_select_indices(keep)


def cut_leading_columns(cache: DynamicCache, columns: int) -> bool:
    """Drop the first ``columns`` cache columns of every layer (padding in every row), in place.

    Returns:
        False, and leaves the cache as it is, when a layer is not a plain growing
        :class:`~transformers.cache_utils.DynamicLayer` (sliding-window and other layers keep
        their own column bookkeeping).
    """
    if columns <= 0 or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return False
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keys = layer.keys[:, :, columns:]
            layer.values = layer.values[:, :, columns:]
    return True


def distinct_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first [U], inverse [B])`` int64: the first row of each distinct left-padded prefix (same
    ids and mask), and for each row the index into ``first`` of its prefix; ``U <= B``."""
    key = torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=-1)  # [B, 2W]
    _, inverse = torch.unique(key, dim=0, return_inverse=True)  # [B] in [0, U)
    first = torch.full((int(inverse.max()) + 1,), key.shape[0], dtype=torch.long, device=key.device)
    first = first.scatter_reduce(0, inverse, torch.arange(key.shape[0], device=key.device), "amin")
    return first, inverse


def _shared_prefill(model, input_ids, attention_mask, positions, cache, slim: bool) -> torch.Tensor:
    # prefill of an empty cache that encodes each distinct prefix once (a group's rollouts start from
    # the same prompt), then gives every row its prefix's KV and logits -> [B, V]
    first, inverse = distinct_rows(input_ids, attention_mask)  # [U], [B]
    if len(first) == input_ids.shape[0]:
        return _forward(model, input_ids, attention_mask, positions, cache, slim)
    logits = _forward(model, input_ids[first], attention_mask[first], positions[first], cache, slim)  # [U, V]
    drop_rows(cache, inverse)  # [U] -> [B] rows: each row's copy of its prefix's KV
    return logits[inverse]


@torch.no_grad()
def decode(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int | Sequence[int],
    eos_token_ids: Sequence[int],
    temperature: float,
    top_p: float,
    pad_token_id: int,
    cache: DynamicCache | None = None,
) -> Decoded:
    """Sample up to ``max_new_tokens`` per left-padded row, dropping each row from the batch and the
    KV cache once it samples an EOS id (see the module docstring).

    Args:
        model: a Hugging Face causal LM (or peft model) in eval mode.
        input_ids: ``[B, W]`` int64 left-padded prefixes (:func:`left_pad`), on the model's device.
        attention_mask: ``[B, W]``, 1 on tokens.
        max_new_tokens: the budget (tokens, positive), for every row or one per row: a row leaves
            the batch (and the cache) at its own budget as at an EOS, unfinished.
        eos_token_ids: every id that ends a row.
        temperature: > 0; ``top_p`` in (0, 1].
        pad_token_id: what fills :attr:`Decoded.tokens` after a row's end.
        cache: KV of the first ``C < W`` columns of the batch (the kept continuation KV), or None:
            the prefill then encodes columns ``C..W`` only.

    Returns:
        :class:`Decoded`, on the model's device.
    """
    device = input_ids.device
    batch = input_ids.shape[0]
    eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)
    slim = _takes_logits_to_keep(model)
    cache = cache if cache is not None else DynamicCache(config=model.config)
    done_columns = cache.get_seq_length()  # C: columns the cache already holds
    positions = generation_positions(attention_mask)  # [B, W]
    if isinstance(max_new_tokens, int):
        max_new_tokens = [max_new_tokens] * batch
    budget = torch.as_tensor(list(max_new_tokens), dtype=torch.long, device=device)  # [B]
    max_new_tokens = int(budget.max())  # N
    tokens = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device)
    lengths = budget.clone()
    rows = torch.arange(batch, device=device)  # [A]: the input row of each running row
    mask = attention_mask  # [A, S]: the mask over the cache's columns (+ the next input)
    next_position = positions[:, -1]  # [A]: of the last input token
    if done_columns == 0:
        logits = _shared_prefill(model, input_ids, attention_mask, positions, cache, slim)  # [B, V]
    else:
        logits = _forward(model, input_ids[:, done_columns:], mask, positions[:, done_columns:], cache, slim)  # [B, V]
    for step in range(max_new_tokens):
        token, logprob = sample(logits, temperature, top_p)  # [A], [A]
        tokens[rows, step] = token
        logprobs[rows, step] = logprob
        # [A]: an EOS, or a budget below the largest reached (rows at the largest stay in the cache)
        ended = torch.isin(token, eos) | ((budget[rows] == step + 1) & (budget[rows] < max_new_tokens))
        if ended.any():
            lengths[rows[ended]] = step + 1
            keep = (~ended).nonzero().squeeze(-1)  # [A']
            rows, token, mask, next_position = rows[keep], token[keep], mask[keep], next_position[keep]
            drop_rows(cache, keep)
            lead = int(mask.argmax(-1).min()) if len(rows) else 0  # columns that are padding in every row
            if cut_leading_columns(cache, lead):
                mask = mask[:, lead:]
        if step == max_new_tokens - 1 or len(rows) == 0:
            break
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=-1)  # [A, S + 1]
        next_position = next_position + 1
        logits = _forward(model, token[:, None], mask, next_position[:, None], cache, slim)  # [A, V]
    pad = mask[:, : cache.get_seq_length()].argmax(-1) if len(rows) else rows  # [R]
    return Decoded(tokens, logprobs, lengths, cache, rows, pad)
