"""CPU sampler on the live policy (``sampler=hf``): Hugging Face ``generate`` or the lean decode
loop of :mod:`mintrl.sampler.decode` (``sampler.engine``), in fp32 or on a bf16 copy (``sampler.dtype``)."""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from mintrl.core.checks import check_choice, check_int, check_range
from mintrl.core.precision import has_fast_bf16
from mintrl.model.kv_cache import check_kv_budget
from mintrl.model.logprobs import token_logprobs
from mintrl.model.shared_prompts import CACHE_ARG
from mintrl.sampler.base import Generation, Sampler, eos_ids_of, pad_id_of
from mintrl.sampler.decode import decode, left_pad, sampling_logprobs
from mintrl.sampler.sampling_copy import SamplingCopy
from mintrl.sampler.weights import is_sharded, weights_generation

ENGINES = ("generate", "loop")
DTYPES = ("auto", "fp32", "bf16")


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
        # [B, V] recorded log-probs, and the top-p-masked ones generate samples from
        self.previous, masked = sampling_logprobs(scores, self.temperature, self.top_p)
        return masked


class HFSampler(Sampler):
    """Batched, left-padded sampling on the live policy weights, with Hugging Face ``generate``
    (``engine="generate"``, the reference) or the lean decode loop of :mod:`mintrl.sampler.decode`
    (``engine="loop"``: finished rows leave the batch and the KV cache; same distribution).

    The sampler holds a reference to the policy module itself (not a copy), so every call samples
    from the current weights; with ``dtype="bf16"`` it samples from a bfloat16 copy
    (:class:`mintrl.sampler.sampling_copy.SamplingCopy`) refreshed whenever the weights changed. The
    log-probs then carry bf16 rounding (:attr:`exact_logprobs` is False: the trainer recomputes
    them); :meth:`score` runs the same module. A policy sharded by FSDP2 (``trainer=fsdp``) is
    sampled from such a copy in its own dtype (``fp32``) or in bf16: the full weights are gathered
    once per update, and decoding needs no collective, so ranks generate independently.

    **Continuation cache.** With ``cache_keys`` (the rollout loop passes one per rollout), the keys
    and values a call computed for each row are kept under its key, and a later call whose prefix
    starts with that row's tokens continues from them instead of re-encoding the prefix (a row
    without kept KV of its own takes the longest shared prefix of another kept row, e.g. a group's
    prompt). The rows
    of a call share one left-padded cache, so every row re-encodes the same number of trailing
    tokens, the largest number any row needs. Kept KV is dropped when the weights change (the
    policy's :func:`mintrl.sampler.weights.weights_generation` moved) and at :meth:`release` (end of a rollout
    batch); rows that ended with EOS are not kept, nor rows past ``continuation_cache_mib``.
    Samples equal the uncached ones up to float rounding of the reused KV.

    Args:
        model: the causal LM to sample from.
        tokenizer: its tokenizer (for the pad id).
        max_batch_size: rows per forward batch (memory bound); larger calls are split.
        continuation_cache_mib: most KV kept between calls (MiB; 0 turns the cache off). A
            token's KV takes ``2 x layers x kv_heads x head_dim x bytes``: 45 KiB for SmolLM2-135M
            in fp32, so the default 1024 MiB holds ~23k tokens (a CPU batch many times over).
        engine: ``"generate"`` (Hugging Face ``generate``) or ``"loop"`` (:func:`mintrl.sampler.decode.decode`).
        dtype: ``"fp32"`` (the policy as it is), ``"bf16"`` (a bfloat16 copy of it), or ``"auto"``:
            bf16 where the policy's device computes bf16 at speed
            (:func:`mintrl.core.precision.has_fast_bf16`) and the policy is in fp32, else the
            policy as it is; decided at the first call, on the device the policy is on then.
        max_kv_gb: KV cache one batch may take (GB); None: no check.
        prompt_tokens, response_tokens: the longest prompt and response (tokens; the config reads
            them from ``data.prompts.max_prompt_tokens`` and ``rollout.max_response_tokens``); with
            both given, :func:`mintrl.model.kv_cache.check_kv_budget` runs at construction.
        own_process: with ``rollout.max_staleness >= 1``, the rollout producer samples from a worker
            process holding its copy of the weights (:class:`mintrl.sampler.process.ProcessSampler`)
            instead of a copy in the trainer's process (:class:`mintrl.sampler.pinned.PinnedSampler`);
            refused at staleness 0 (no producer; ``mintrl.build.config_checks``).
        own_device: that worker's device (``"cpu"``, ``"cuda:1"``); None: the policy's.

    Raises:
        ValueError: non-positive ``max_batch_size``, negative ``continuation_cache_mib``, an
            unknown ``engine`` or ``dtype``, a non-positive ``max_kv_gb``, a batch whose KV cache
            exceeds ``max_kv_gb`` (the message says what to change), or a non-boolean ``own_process``.

    Log-probs are ``log_softmax(logits / temperature)`` of the sampled token over the full
    vocabulary: with ``top_p < 1`` the token was drawn from the renormalised nucleus, but the
    recorded value (like the trainer's) is of the temperature-scaled full distribution.
    """

    runs_sharded = True  # a sharded policy is sampled from a gathered full-weight copy (SamplingCopy)
    runs_pipelined = True  # a producer thread samples a PinnedSampler's copy (rollout.max_staleness > 0)

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer,
        max_batch_size: int = 128,
        continuation_cache_mib: int = 1024,
        engine: str = "loop",
        dtype: str = "auto",
        max_kv_gb: float | None = 40.0,
        prompt_tokens: int | None = None,
        response_tokens: int | None = None,
        own_process: bool = False,
        own_device: str | None = None,
    ):
        # KV budget (GB) of one batch of max_batch_size rows of prompt + response tokens, in the sampling
        # dtype (auto counts the policy's: the larger); refused here, before any generation
        check_range("sampler.max_kv_gb", max_kv_gb, 0, low_open=True, none_ok=True)
        if max_kv_gb is not None and prompt_tokens is not None and response_tokens is not None:
            width = 2 if dtype == "bf16" else next(model.parameters()).element_size()
            tokens = prompt_tokens + response_tokens
            check_kv_budget(model.config, rows=max_batch_size, tokens=tokens, dtype_bytes=width, max_kv_gb=max_kv_gb)
        check_int("sampler.max_batch_size", max_batch_size)
        check_int("sampler.continuation_cache_mib", continuation_cache_mib, 0)
        check_choice("sampler.engine", engine, ENGINES)
        check_choice("sampler.dtype", dtype, DTYPES)
        if not isinstance(own_process, bool):
            raise ValueError(f"sampler.own_process must be true or false, got {own_process!r}")
        self.own_process, self.own_device = own_process, own_device
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.engine = engine
        self.dtype = dtype
        self._copy: SamplingCopy | None = None
        self.eos_token_ids = eos_ids_of(model, tokenizer)
        self.pad_token_id = pad_id_of(tokenizer, self.eos_token_ids)
        self.cache_bytes = int(continuation_cache_mib * 2**20)
        self._kept_bytes = 0
        self._kept: dict[
            int, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]
        ] = {}  # key -> (tokens, per-layer K, V [kvh, n, d])
        self._kept_generation: int | None = None  # the policy's weights generation the kept KV was computed at
        self.reused_tokens = 0  # prefix tokens served from kept KV instead of re-encoded (perf/prefix_reused_tokens)

    def sampling_model(self) -> torch.nn.Module:
        """The module that samples: the policy, or its copy refreshed to the current weights."""
        return self.copy.current() if self.copy is not None else self.model

    def prepare(self) -> None:
        """Build (or refresh) the sampling copy now: building it initialises a model, which draws
        from the global torch generator (see :meth:`Sampler.prepare`)."""
        self.sampling_model()

    @property
    def copy(self) -> SamplingCopy | None:
        """The copy the sampler runs (bf16, or the sharded policy's full weights), or None when it
        samples from the policy itself (``dtype`` ``"auto"`` is decided here, at the first use)."""
        param = next(self.model.parameters())
        if self.dtype == "auto":
            device = param.to_local().device if hasattr(param, "to_local") else param.device
            fast = has_fast_bf16(device.type) and param.dtype == torch.float32
            self.dtype = "bf16" if fast else "fp32"
        if self._copy is None and (self.dtype == "bf16" or is_sharded(self.model)):
            self._copy = SamplingCopy(self.model, torch.bfloat16 if self.dtype == "bf16" else param.dtype)
        return self._copy

    @property
    def exact_logprobs(self) -> bool:
        """True when sampling in the policy's own dtype (the policy itself, or the full-weight
        copy of a sharded policy; see :class:`Sampler`)."""
        return self.copy is None or self.copy.dtype == next(self.model.parameters()).dtype

    def _continue(self, prefixes, budgets: list[int], temperature: float, top_p: float, cache_keys) -> Generation:
        """Continue each prefix (see :meth:`Sampler.generate`) in calls of at most
        ``max_batch_size`` rows; with ``cache_keys`` (and the cache on) each row's KV is kept for
        the next call with its key. Per-row budgets: the loop drops a row from the batch at its
        own budget (its KV is then not kept); ``generate`` runs every row to the largest budget
        and cuts the others after.
        """
        keys = list(cache_keys) if cache_keys is not None and self.cache_bytes > 0 else None
        generation = weights_generation(self.model).value
        if generation != self._kept_generation:  # KV computed with other weights must not be reused
            self.release()
            self._kept_generation = generation
        model = self.sampling_model()
        out = Generation([], [], [])
        for start in range(0, len(prefixes), self.max_batch_size):
            sl = slice(start, start + self.max_batch_size)
            part = self._generate(
                model, prefixes[sl], budgets[sl], temperature, top_p, keys[sl] if keys is not None else None
            )
            out.token_ids += part.token_ids
            out.logprobs += part.logprobs
            out.finished += part.finished
        return out

    def score(
        self, sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Log-probs of ``sequences[i][prompt_lengths[i]:]`` under the current weights (see
        :func:`score_sequences`), by the module that samples (the bf16 copy with ``dtype`` bf16,
        whose values the trainer recomputes); used for intervention tokens, which the policy did
        not sample."""
        model = self.sampling_model()
        out = []
        for start in range(0, len(sequences), self.max_batch_size):
            sl = slice(start, start + self.max_batch_size)
            out += score_sequences(
                model, sequences[sl], prompt_lengths[sl], temperature, pad_token_id=self.pad_token_id
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

    def _keep(self, keys, rows_tokens, finished, row_kv) -> None:
        """Keep the KV of each unfinished row under its key, within ``continuation_cache_mib``.

        Args:
            row_kv: ``row_kv(i)`` gives row ``i``'s per-layer ``(K, V)`` views ``[kvh, n, d]`` of
                its real tokens (after its left padding; its last sampled token has no KV yet),
                or None when the row has no KV.
        """
        for i, (k, tokens) in enumerate(zip(keys, rows_tokens)):
            old = self._kept.pop(k, None)
            if old is not None:
                self._kept_bytes -= sum(a.nbytes + b.nbytes for a, b in old[1])
            if finished[i]:
                continue  # ended with EOS: never continued
            kv = row_kv(i)
            if kv is None:
                continue
            size = sum(kk.nbytes + vv.nbytes for kk, vv in kv)
            if self._kept_bytes + size > self.cache_bytes:
                continue
            self._kept[k] = (tokens, [(kk.clone(), vv.clone()) for kk, vv in kv])
            self._kept_bytes += size

    def _generate(self, model, prefixes, budgets, temperature, top_p, keys=None) -> Generation:
        """One batch of at most ``max_batch_size`` rows on ``model`` with the configured engine."""
        device = next(model.parameters()).device
        input_ids, attention_mask = left_pad(prefixes, self.pad_token_id)  # [B, W] each
        cache = self._reusable(prefixes, keys) if keys is not None and self._kept else None
        was_training = model.training
        model.eval()
        try:
            run = self._run_loop if self.engine == "loop" else self._run_generate
            out, row_kv = run(
                model, input_ids.to(device), attention_mask.to(device), budgets, temperature, top_p, cache, keys
            )
        finally:
            model.train(was_training)
        if keys is not None and row_kv is not None:
            tokens = [list(p) + t.tolist() for p, t in zip(prefixes, out.token_ids)]
            self._keep(keys, tokens, out.finished, row_kv)
        return out

    def _run_loop(self, model, input_ids, attention_mask, budgets, temperature, top_p, cache, keys):
        """:func:`mintrl.sampler.decode.decode`; returns the rows and their KV views (``_keep``'s ``row_kv``)."""
        result = decode(
            model, input_ids, attention_mask, budgets, self.eos_token_ids, temperature, top_p,
            self.pad_token_id, cache,
        )  # fmt: skip
        tokens, logprobs, lengths = result.tokens.cpu(), result.logprobs.cpu(), result.lengths.tolist()
        out = Generation([], [], [])
        for i, n in enumerate(lengths):
            out.append_row(tokens[i, :n], logprobs[i, :n], self.eos_token_ids)
        slot = {int(r): j for j, r in enumerate(result.cache_rows.tolist())}  # input row -> cache row
        layers = [(layer.keys, layer.values) for layer in result.cache.layers]
        pads = result.cache_pad.tolist()

        def row_kv(i):
            if i not in slot:
                return None
            j = slot[i]
            return [(kk[j, :, pads[j] :], vv[j, :, pads[j] :]) for kk, vv in layers]

        return out, (row_kv if keys is not None else None)

    def _run_generate(self, model, input_ids, attention_mask, budgets, temperature, top_p, cache, keys):
        """Hugging Face ``generate``; returns the rows and their KV views (``_keep``'s ``row_kv``)."""
        width = input_ids.shape[1]
        recorder = _SampledTokenLogprobs(temperature, top_p)
        # A fresh config: no model-shipped top_k / repetition penalty / min_length can alter the
        # distribution; the recorder is the only processor.
        config = GenerationConfig(
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max(budgets),
            eos_token_id=list(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            use_cache=True,
            return_dict_in_generate=keys is not None,  # the output's cache is kept per rollout
        )
        extra = {CACHE_ARG: cache} if cache is not None else {}
        result = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=config,
            logits_processor=LogitsProcessorList([recorder]),
            **extra,
        )
        sequences = result.sequences if keys is not None else result
        new = sequences[:, width:].cpu()  # [B, n]
        if new.shape[1] > 0:
            recorder.record(new[:, -1].to(recorder.previous.device))
        logprobs = torch.stack(recorder.recorded, dim=1).float().cpu() if recorder.recorded else new.float()
        out = Generation([], [], [])
        for i in range(new.shape[0]):  # each row cut to its own budget
            out.append_row(new[i, : budgets[i]], logprobs[i, : budgets[i]], self.eos_token_ids)
        kept_cache = getattr(result, CACHE_ARG, None) if keys is not None else None
        if kept_cache is None:
            return out, None
        layers = [(layer.keys, layer.values) for layer in kept_cache.layers]
        starts = (attention_mask == 0).sum(-1).tolist()  # left padding of each row

        def row_kv(i):
            n = min(int(attention_mask[i].sum()) + len(out.token_ids[i]), layers[0][0].shape[2] - starts[i])
            return [(kk[i, :, starts[i] : starts[i] + n], vv[i, :, starts[i] : starts[i] + n]) for kk, vv in layers]

        return out, row_kv


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
