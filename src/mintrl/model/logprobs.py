"""Per-token log-probs and entropies without materialising full-vocabulary logits for the batch.

The naive path ``log_softmax(model(x).logits)`` holds ``N x L x V`` floats (16 x 256 x 49152 fp32
is 0.8 GB, several times that with autograd). Here the transformer body runs once, then the LM
head, log-softmax and gather run over at most ``chunk_tokens`` response positions at a time under
activation checkpointing, so only one ``[chunk_tokens, V]`` logits block is alive, in the forward
and in the backward pass. Prompt positions never go through the LM head.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from mintrl.model.shared_prompts import position_ids_of, shared_prompt_hidden


def _head_and_body(model):
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale"):
        if getattr(config, attr, None) not in (None, 1.0):
            raise NotImplementedError(f"models with config.{attr} are not supported by token_logprobs yet")
    body = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, model.base_model_prefix)
    return model.get_output_embeddings(), body


def head_logits(head: torch.nn.Module, hidden: torch.Tensor, own_unit: bool = False) -> torch.Tensor:
    """``[M, V]`` float32 logits of ``[M, H]`` hidden states. An fp32 head runs in fp32 with
    autocast off (under bf16-mixed the logits would otherwise be rounded to bf16: spacing 0.125
    between 16 and 32, so summed log-probs would drift with length); a head stored in bf16 (a bf16
    model) runs as it is, its output cast to fp32. ``own_unit``: the call runs inside a forward of
    the head's own shard unit (its weights gathered around all blocks), so the head's ``forward``
    runs without the module's hooks, which would gather and free the weights again per block."""
    call = head.forward if own_unit else head
    weight = getattr(head, "weight", None)
    if weight is not None and weight.dtype == torch.float32:
        with torch.autocast(hidden.device.type, enabled=False):
            return call(hidden.float())
    return call(hidden).float()


def _chunk_logprob_entropy(head, hidden, targets, temperature: float, with_entropy: bool = True, own_unit=False):
    # hidden [M, H], targets [M] -> logprob [M], entropy [M] (entropy detached; zeros when not wanted)
    logits = head_logits(head, hidden, own_unit)  # [M, V] float32: the only full-vocabulary block
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # [M]
    logprob = logits.gather(-1, targets[:, None]).squeeze(-1) - logz
    if not with_entropy:
        return logprob, torch.zeros_like(logz)
    with torch.no_grad():  # H = logZ - sum_v p_v z_v, with one more [M, V] buffer (p) and no product tensor
        entropy = logz - torch.linalg.vecdot(torch.softmax(logits, dim=-1), logits)
    return logprob, entropy


def _checkpointed_block(head, hidden, targets, temperature: float, own_unit: bool = False):
    # the LM-head block under activation checkpointing: only hidden and targets are kept for the
    # backward, which recomputes the logits; the recomputation skips the (detached) entropy
    calls = []

    def block(h, t):
        calls.append(1)
        return _chunk_logprob_entropy(head, h, t, temperature, with_entropy=len(calls) == 1, own_unit=own_unit)

    return checkpoint(block, hidden, targets, use_reentrant=False)


ROOT_UNIT_METHOD = "run_in_root_unit"  # set by a sharding strategy on the root unit and on an untied head's unit


def in_root_unit(model, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run as a forward of ``model``'s root shard unit when ``model`` is
    sharded and its strategy gave it a ``run_in_root_unit`` method
    (:meth:`mintrl.training.distributed.FullyShardedStrategy.shard_policy`): the root's weights
    (embeddings, final norm, a tied head) are gathered around the call and again for its backward,
    as for ``model(...)``; otherwise a plain call."""
    method = getattr(model, ROOT_UNIT_METHOD, None)
    return fn(*args, **kwargs) if method is None else method(fn, *args, **kwargs)


def head_blocks(head, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, chunk_tokens: int):
    """Log-probs and entropies of ``targets`` ``[M]`` from ``hidden`` ``[M, H]``, at most
    ``chunk_tokens`` positions through the LM head at a time (under activation checkpointing when
    grad is enabled). Returns ``([M], [M])`` float32, the entropy detached.

    An untied head that is its own shard unit (FSDP: the strategy gave it a ``run_in_root_unit``
    method) runs every block inside one forward of that unit: its weights are gathered once per
    call, and once for its backward, whatever the number of blocks (a per-rank count, since response
    lengths differ across ranks; a per-block gather would also move the whole head once per block).
    """
    own_unit = getattr(head, ROOT_UNIT_METHOD, None) is not None
    return in_root_unit(head, _head_blocks, head, hidden, targets, temperature, chunk_tokens, own_unit)


def _head_blocks(head, hidden, targets, temperature, chunk_tokens, own_unit):
    parts_lp, parts_ent = [], []
    for s in range(0, targets.numel(), chunk_tokens):
        h, t = hidden[s : s + chunk_tokens], targets[s : s + chunk_tokens]  # [m, H], [m]
        if torch.is_grad_enabled():
            lp, ent = _checkpointed_block(head, h, t, temperature, own_unit)
        else:
            lp, ent = _chunk_logprob_entropy(head, h, t, temperature, own_unit=own_unit)
        parts_lp.append(lp)
        parts_ent.append(ent)
    if not parts_lp:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(parts_lp), torch.cat(parts_ent)


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    target_mask: torch.Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = 256,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs ``log_softmax(logits / T)`` of each target token under ``model``.

    Args:
        model: a Hugging Face causal LM whose logits are ``lm_head(last_hidden_state)``.
        input_ids: ``[N, L]`` int64, right- or left-padded (each row's tokens one contiguous span).
        attention_mask: ``[N, L]``; positions are counted over attended tokens
            (:func:`mintrl.model.shared_prompts.position_ids_of`), so a padded row scores as it does alone.
        target_mask: ``[N, L]`` bool, positions whose token's log-prob is wanted (position 0 is
            never a target: nothing predicts it).
        temperature: the sampling temperature ``T`` (> 0).
        chunk_tokens: at most this many positions go through the LM head at once.
        share_prompts: forward each distinct prompt (the tokens before a row's first target) once
            and the rows' responses from its KV cache (:mod:`mintrl.model.shared_prompts`); same result
            up to float rounding, less work when rows share prompts (a group), also under activation
            checkpointing (the prompt pass then runs outside it). Ignored, i.e. the plain forward
            runs, when no prompt repeats.

    Returns:
        ``(logprobs, entropy)``, both ``[N, L]`` float32 with zeros off ``target_mask``; entry ``j``
        is ``log p(input_ids[:, j] | input_ids[:, :j])`` (nats) and the entropy (nats, detached) of
        that predictive distribution. Gradients flow into ``logprobs`` when grad is enabled.

    Raises:
        ValueError: non-positive ``temperature`` or ``chunk_tokens``.
        NotImplementedError: models with logit soft-capping or scaling.
    """
    if temperature <= 0 or chunk_tokens <= 0:
        raise ValueError(f"need temperature > 0 and chunk_tokens > 0, got {temperature}, {chunk_tokens}")
    return in_root_unit(
        model, _token_logprobs, model, input_ids, attention_mask, target_mask, temperature, chunk_tokens, share_prompts
    )


def _token_logprobs(model, input_ids, attention_mask, target_mask, temperature, chunk_tokens, share_prompts):
    # the body of token_logprobs: the body's forward, then the LM head in blocks of target positions
    head, body = _head_and_body(model)
    mask = target_mask.clone()
    mask[:, 0] = False
    hidden = None
    if share_prompts:
        hidden = shared_prompt_hidden(body, input_ids, attention_mask, mask)  # None: no prompt repeats
    if hidden is None:
        hidden = body(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_of(attention_mask),  # left-padded rows: absolute positions as alone
            use_cache=False,
        ).last_hidden_state  # [N, L, H]
    rows, cols = mask.nonzero(as_tuple=True)  # target positions, [M] each
    logprobs = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    entropy = torch.zeros_like(logprobs)
    # hidden[rows, cols - 1]: the states that predict the targets, [M, H]; the head's unit runs even
    # for M = 0, so that every rank gathers a sharded head as often
    lp, ent = head_blocks(head, hidden[rows, cols - 1], input_ids[rows, cols], temperature, chunk_tokens)
    if rows.numel():
        logprobs = logprobs.index_put((rows, cols), lp)
        entropy[rows, cols] = ent
    return logprobs, entropy
