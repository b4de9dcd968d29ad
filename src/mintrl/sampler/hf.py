"""CPU sampler on Hugging Face ``generate`` (``sampler=hf``)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from mintrl.core.checks import check_int
from mintrl.model.logprobs import token_logprobs
from mintrl.model.shared_prompts import CACHE_ARG
from mintrl.sampler.base import Generation, Sampler, eos_ids_of, pad_id_of
from mintrl.sampler.weights import is_sharded, weights_version


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


class HFSampler(Sampler):
    """Batched, left-padded sampling with Hugging Face ``generate`` on the live policy weights.

    The sampler holds a reference to the policy module itself (not a copy), so every call samples
    from the current weights.

    **Continuation cache.** With ``cache_keys`` (the rollout loop passes one per rollout), the keys
    and values a call computed for each row are kept under its key, and a later call whose prefix
    starts with that row's tokens continues from them instead of re-encoding the prefix (a row
    without kept KV of its own takes the longest shared prefix of another kept row, e.g. a group's
    prompt). The rows
    of a call share one left-padded cache, so every row re-encodes the same number of trailing
    tokens, the largest number any row needs. Kept KV is dropped when the weights change
    (:func:`mintrl.sampler.weights.weights_version`) and at :meth:`release` (end of a rollout
    batch); rows that ended with EOS are not kept, nor rows past ``continuation_cache_mib``.
    Samples equal the uncached ones up to float rounding of the reused KV.

    Args:
        model: the causal LM to sample from.
        tokenizer: its tokenizer (for the pad id).
        max_batch_size: rows per ``generate`` call (memory bound); larger batches are split.
        continuation_cache_mib: most KV kept between calls (MiB; 0 turns the cache off). A
            token's KV takes ``2 x layers x kv_heads x head_dim x bytes``: 45 KiB for SmolLM2-135M
            in fp32, so the default 1024 MiB holds ~23k tokens (a CPU batch many times over).

    Raises:
        ValueError: non-positive ``max_batch_size``, negative ``continuation_cache_mib``.

    Log-probs are ``log_softmax(logits / temperature)`` of the sampled token over the full
    vocabulary: with ``top_p < 1`` the token was drawn from the renormalised nucleus, but the
    recorded value (like the trainer's) is of the temperature-scaled full distribution.
    """

    def __init__(self, model: PreTrainedModel, tokenizer, max_batch_size: int = 64, continuation_cache_mib: int = 1024):
        check_int("sampler.max_batch_size", max_batch_size)
        check_int("sampler.continuation_cache_mib", continuation_cache_mib, 0)
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_token_ids = eos_ids_of(model, tokenizer)
        self.pad_token_id = pad_id_of(tokenizer, self.eos_token_ids)
        self.cache_bytes = int(continuation_cache_mib * 2**20)
        self._kept_bytes = 0
        self._kept: dict[
            int, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]
        ] = {}  # key -> (tokens, per-layer K, V [kvh, n, d])
        self._kept_version = None
        self.reused_tokens = 0  # prefix tokens served from kept KV instead of re-encoded (perf/prefix_reused_tokens)

    def _continue(self, prefixes, max_new_tokens: int, temperature: float, top_p: float, cache_keys) -> Generation:
        """Continue each prefix (see :meth:`Sampler.generate`) in calls of at most
        ``max_batch_size`` rows; with ``cache_keys`` (and the cache on) each row's KV is kept for
        the next call with its key.

        Raises:
            RuntimeError: the policy is FSDP-sharded (use ``sampler=vllm``).
        """
        if is_sharded(self.model):
            raise RuntimeError(
                "sampler=hf cannot generate from an FSDP-sharded policy (each rank would need the full "
                "weights at every step of decoding): use sampler=vllm with trainer=fsdp"
            )
        keys = list(cache_keys) if cache_keys is not None and self.cache_bytes > 0 else None
        version = weights_version(self.model)
        if version != self._kept_version:  # KV computed with other weights must not be reused
            self.release()
            self._kept_version = version
        out = Generation([], [], [])
        for start in range(0, len(prefixes), self.max_batch_size):
            sl = slice(start, start + self.max_batch_size)
            part = self._generate(
                prefixes[sl], max_new_tokens, temperature, top_p, keys[sl] if keys is not None else None
            )
            out.token_ids += part.token_ids
            out.logprobs += part.logprobs
            out.finished += part.finished
        return out

    def score(
        self, sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Log-probs of ``sequences[i][prompt_lengths[i]:]`` under the current weights (see
        :func:`score_sequences`); used for intervention tokens, which the policy did not sample."""
        out = []
        for start in range(0, len(sequences), self.max_batch_size):
            sl = slice(start, start + self.max_batch_size)
            out += score_sequences(
                self.model, sequences[sl], prompt_lengths[sl], temperature, pad_token_id=self.pad_token_id
            )
        return out

    def release(self) -> None:
        """Drop the kept continuation KV (called after every rollout batch)."""
        self._kept, self._kept_bytes = {}, 0

    def metrics(self) -> dict[str, float]:
        """``perf/prefix_reused_tokens``: prefix tokens continued from kept KV so far."""
        return {"perf/prefix_reused_tokens": float(self.reused_tokens)}

    def _reusable(self, prefixes, keys) -> DynamicCache | None:
        """A cache holding the first ``C`` columns of the left-padded batch from kept KV, or None
        when nothing can be reused. Row ``i`` (``n_i`` tokens, batch width ``W``) takes its first
        ``n_i - (W - C)`` tokens from its kept KV (zeros under its padding), so every row
        re-encodes its last ``W - C`` tokens, the most any row needs."""
        width = max(len(p) for p in prefixes)
        usable, source = [], []
        for p, k in zip(prefixes, keys):
            # its own rollout's KV first; else any kept row sharing a prefix (a group shares its prompt)
            best = (0, None)
            for key in ([k] if k in self._kept else []) + [key for key in self._kept if key != k]:
                tokens, kv = self._kept[key]
                m = _common_prefix(tokens, p, min(len(p) - 1, kv[0][0].shape[1]))  # at least one token is encoded
                if m > best[0]:
                    best = (m, key)
                if key == k and m == len(p) - 1:
                    break
            usable.append(best[0])
            source.append(best[1])
        fresh = max(len(p) - m for p, m in zip(prefixes, usable))  # columns every row re-encodes
        columns = width - fresh
        if columns <= 0:
            return None
        template = next(iter(self._kept.values()))[1]  # per-layer (K, V) of some kept row: shapes and dtype
        layers = []
        for layer, (k0, v0) in enumerate(template):
            keys_l = k0.new_zeros(len(prefixes), k0.shape[0], columns, k0.shape[2])
            values_l = v0.new_zeros(len(prefixes), v0.shape[0], columns, v0.shape[2])
            for i, (p, k) in enumerate(zip(prefixes, source)):
                n = len(p) - fresh  # this row's cached tokens (<= usable[i]); padding before them
                if n > 0:
                    kk, vv = self._kept[k][1][layer]
                    keys_l[i, :, columns - n :] = kk[:, :n]
                    values_l[i, :, columns - n :] = vv[:, :n]
            layers.append((keys_l, values_l))
        cache = DynamicCache(config=self.model.config)
        for layer, (k, v) in enumerate(layers):
            cache.update(k, v, layer)
        self.reused_tokens += sum(max(len(p) - fresh, 0) for p in prefixes)
        return cache

    def _keep(self, keys, rows_tokens, finished, cache, width: int, lengths) -> None:
        """Keep the KV of each unfinished row (its real tokens only: after its left padding) under
        its key, within ``continuation_cache_mib``."""
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        for i, (k, tokens) in enumerate(zip(keys, rows_tokens)):
            old = self._kept.pop(k, None)
            if old is not None:
                self._kept_bytes -= sum(a.nbytes + b.nbytes for a, b in old[1])
            if finished[i]:
                continue  # ended with EOS: never continued
            start = width - lengths[i]
            n = min(len(tokens), layers[0][0].shape[2] - start)  # the last sampled token has no KV yet
            size = sum((kk[i, :, :n].nbytes + vv[i, :, :n].nbytes) for kk, vv in layers)
            if self._kept_bytes + size > self.cache_bytes:
                continue
            self._kept[k] = (
                tokens,
                [(kk[i, :, start : start + n].clone(), vv[i, :, start : start + n].clone()) for kk, vv in layers],
            )
            self._kept_bytes += size

    def _generate(self, prefixes, max_new_tokens, temperature, top_p, keys=None) -> Generation:
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
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            eos_token_id=list(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            use_cache=True,
            return_dict_in_generate=keys is not None,  # the output's cache is kept per rollout
        )
        extra = {}
        if keys is not None and self._kept:
            cache = self._reusable(prefixes, keys)
            if cache is not None:
                extra[CACHE_ARG] = cache
        was_training = self.model.training
        self.model.eval()
        try:
            result = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder]),
                **extra,
            )
        finally:
            self.model.train(was_training)
        sequences = result.sequences if keys is not None else result
        new = sequences[:, width:].cpu()  # [B, n]
        if new.shape[1] > 0:
            recorder.record(new[:, -1].to(recorder.previous.device))
        logprobs = torch.stack(recorder.recorded, dim=1).float().cpu() if recorder.recorded else new.float()
        out = Generation([], [], [])
        for i in range(new.shape[0]):
            out.append_row(new[i], logprobs[i], self.eos_token_ids)
        if keys is not None and getattr(result, CACHE_ARG, None) is not None:
            self._keep(
                keys,
                [list(p) + t.tolist() for p, t in zip(prefixes, out.token_ids)],
                out.finished,
                getattr(result, CACHE_ARG),
                width,
                [len(p) for p in prefixes],
            )
        return out


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``."""
    m, limit = 0, min(limit, len(a), len(b))
    while m < limit and a[m] == b[m]:
        m += 1
    return m


def score_sequences(
    model, sequences, prompt_lengths, temperature: float = 1.0, chunk_tokens: int = 256, pad_token_id: int = 0
):
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
