"""CPU sampler on Hugging Face ``generate`` (``sampler=hf``)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from mintrl.logprobs import token_logprobs
from mintrl.sampler.base import Generation, check_generate_args
from mintrl.sampler.weights import is_sharded


def eos_ids_of(model: PreTrainedModel, tokenizer=None) -> tuple[int, ...]:
    """Every EOS id of the model's generation config (int or list), else the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the model's generation_config and tokenizer define no eos_token_id")
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


class _SampledTokenLogprobs(LogitsProcessor):
    """The only logits processor of a call: temperature, top-p, and log-prob recording.

    ``generate`` calls it once per new token with the ids so far; the token sampled at the previous
    call is ``input_ids[:, -1]``, so its log-prob is gathered from the distribution kept from that
    call. Only one ``[B, V]`` distribution is alive at a time.
    """

    def __init__(self, temperature: float, top_p: float):
        self.temperature, self.top_p = temperature, top_p
        self.previous: torch.Tensor | None = None  # [B, V] log-probs of the last call
        self.recorded: list[torch.Tensor] = []  # each [B]

    def record(self, sampled: torch.Tensor) -> None:
        assert self.previous is not None
        self.recorded.append(self.previous.gather(-1, sampled[:, None]).squeeze(-1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.previous is not None:
            self.record(input_ids[:, -1])
        logp = F.log_softmax(scores.float() / self.temperature, dim=-1)  # [B, V]
        self.previous = logp
        if self.top_p >= 1.0:
            return logp
        # nucleus: keep the smallest set of tokens whose probability reaches top_p
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        drop_sorted = sorted_logp.exp().cumsum(-1) - sorted_logp.exp() >= self.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        return logp.masked_fill(drop, float("-inf"))


class HFSampler:
    """Batched, left-padded sampling with Hugging Face ``generate`` on the live policy weights.

    The sampler holds a reference to the policy module itself (not a copy), so every call samples
    from the current weights. ``cache_keys`` are accepted and ignored: prefixes are re-encoded on
    each call (the contract allows it; vLLM's prefix cache makes continuation cheap there).

    Args:
        model: the causal LM to sample from.
        tokenizer: its tokenizer (for the pad id).
        max_batch_size: rows per ``generate`` call (memory bound); larger batches are split.

    Log-probs are ``log_softmax(logits / temperature)`` of the sampled token over the full
    vocabulary: with ``top_p < 1`` the token was drawn from the renormalised nucleus, but the
    recorded value (like the trainer's) is of the temperature-scaled full distribution.
    """

    def __init__(self, model: PreTrainedModel, tokenizer, max_batch_size: int = 64):
        if max_batch_size <= 0:
            raise ValueError(f"sampler.max_batch_size must be positive, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_token_ids = eos_ids_of(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])

    @torch.no_grad()
    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        cache_keys: Sequence[int] | None = None,
    ) -> Generation:
        """Continue each prefix by at most ``max_new_tokens`` sampled tokens.

        Args:
            prefixes: ``B`` lists of token ids (prompt + accepted response), each non-empty.
            max_new_tokens: per-row budget (tokens), positive.
            temperature: > 0; ``top_p`` in (0, 1].
            cache_keys: rollout ids (ignored here, see class docstring).

        Returns:
            :class:`Generation` with ``B`` rows, in input order.

        Raises:
            ValueError: empty prefix, non-positive budget or temperature, top_p outside (0, 1].
            RuntimeError: the policy is FSDP-sharded (use ``sampler=vllm``).
        """
        check_generate_args(prefixes, max_new_tokens, temperature, top_p)
        if is_sharded(self.model):
            raise RuntimeError("sampler=hf cannot generate from an FSDP-sharded policy (each rank would need the full "
                               "weights at every step of decoding): use sampler=vllm with trainer=fsdp")
        out = Generation([], [], [])
        for start in range(0, len(prefixes), self.max_batch_size):
            part = self._generate(prefixes[start : start + self.max_batch_size], max_new_tokens, temperature, top_p)
            out.token_ids += part.token_ids
            out.logprobs += part.logprobs
            out.finished += part.finished
        return out

    def score(self, sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int], temperature: float = 1.0) -> list[torch.Tensor]:
        """Log-probs of ``sequences[i][prompt_lengths[i]:]`` under the current weights (see
        :func:`score_sequences`); used for intervention tokens, which the policy did not sample."""
        out = []
        for start in range(0, len(sequences), self.max_batch_size):
            sl = slice(start, start + self.max_batch_size)
            out += score_sequences(self.model, sequences[sl], prompt_lengths[sl], temperature, pad_token_id=self.pad_token_id)
        return out

    def release(self) -> None:
        """Nothing to free: generation runs on the live policy."""

    def _generate(self, prefixes, max_new_tokens, temperature, top_p) -> Generation:
        if not prefixes:
            return Generation([], [], [])
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prefixes)
        input_ids = torch.full((len(prefixes), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prefixes), width), dtype=torch.long)
        for i, p in enumerate(prefixes):  # left padding
            input_ids[i, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            attention_mask[i, width - len(p) :] = 1
        recorder = _SampledTokenLogprobs(temperature, top_p)
        # A fresh config: no model-shipped top_k / repetition penalty / min_length can alter the
        # distribution; the recorder is the only processor.
        config = GenerationConfig(
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
            eos_token_id=list(self.eos_token_ids), pad_token_id=self.pad_token_id,
        )
        was_training = self.model.training
        self.model.eval()
        try:
            sequences = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                generation_config=config, logits_processor=LogitsProcessorList([recorder]),
            )
        finally:
            self.model.train(was_training)
        new = sequences[:, width:].cpu()  # [B, n]
        if new.shape[1] > 0:
            recorder.record(new[:, -1].to(recorder.previous.device))
        logprobs = torch.stack(recorder.recorded, dim=1).float().cpu() if recorder.recorded else new.float()
        eos = torch.tensor(self.eos_token_ids)
        is_eos = torch.isin(new, eos)  # [B, n]
        out = Generation([], [], [])
        for i in range(new.shape[0]):
            hits = is_eos[i].nonzero()
            n = int(hits[0]) + 1 if len(hits) else new.shape[1]
            out.token_ids.append(new[i, :n].clone())
            out.logprobs.append(logprobs[i, :n].clone())
            out.finished.append(bool(len(hits)))
        return out


def score_sequences(model, sequences, prompt_lengths, temperature: float = 1.0, chunk_tokens: int = 256, pad_token_id: int = 0):
    """Teacher-forced log-probs of the response part of each sequence (no grad).

    Args:
        sequences: ``B`` lists of token ids (prompt + response).
        prompt_lengths: ``B`` prompt lengths; tokens from there on are scored.

    Returns:
        ``B`` float32 tensors of shape ``[len(seq) - prompt_len]`` (nats).
    """
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    target = torch.zeros_like(ids, dtype=torch.bool)
    for i, (s, p) in enumerate(zip(sequences, prompt_lengths)):
        ids[i, : len(s)] = torch.as_tensor(list(s))
        attn[i, : len(s)] = 1
        target[i, p : len(s)] = True
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids.to(device), attn.to(device), target.to(device), temperature, chunk_tokens)
    finally:
        model.train(was_training)
    return [lp[i, p : len(s)].cpu() for i, (s, p) in enumerate(zip(sequences, prompt_lengths))]
