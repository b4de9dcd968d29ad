"""The sampler contract shared by every backend.

A sampler continues a batch of token-id prefixes (prompt + accepted response so far) by at most
``max_new_tokens`` tokens (one budget for every row, or one per row) and reports, per row, the sampled token ids, their log-probs under the
sampling distribution ``log_softmax(logits / temperature)`` and whether an EOS id ended the row.

Continuation is the primitive of chunked generation (MInTRL Algorithm 1): the rollout loop calls
``generate`` once per chunk with the accepted prefix. ``cache_keys`` name the rollout each row
belongs to, so that a backend can reuse the KV of the unchanged part of the prefix and recompute
only what changed after a truncation + intervention: vLLM's prefix cache matches whole blocks by
content, ``HFSampler`` keeps each rollout's KV between calls of one rollout batch. The results
are the same either way, up to float rounding.

Every ``generate`` samples from the policy's *current* weights: ``HFSampler`` runs the live module,
``VLLMSampler`` pushes the weights into its engine whenever they changed since its last push.
``tests/test_sampler_contract.py`` runs one contract suite against every backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class Generation:
    """Output of one ``Sampler.generate`` call, one entry per input row.

    Attributes:
        token_ids: ``B`` int64 tensors of shape ``[n_i]``, ``n_i <=`` the row's budget; the EOS token
            that ended a row is included as its last element.
        logprobs: ``B`` float32 tensors of shape ``[n_i]``: ``log_softmax(logits / T)`` of each
            sampled token (nats).
        finished: ``B`` booleans, True where the row ended with an EOS id (not the length limit).
    """

    token_ids: list[torch.Tensor]
    logprobs: list[torch.Tensor]
    finished: list[bool]

    def append_row(self, ids: torch.Tensor, logprobs: torch.Tensor, eos_token_ids: Sequence[int]) -> None:
        """Append one sampled row, cut after its first EOS id (nothing a backend sampled past it is
        kept); the row is finished when it holds one.

        Args:
            ids: ``[n]`` int64 sampled token ids. logprobs: ``[n]`` float32 log-probs of them (nats).
            eos_token_ids: every id that ends a response.
        """
        hits = torch.isin(ids, torch.tensor(list(eos_token_ids), dtype=ids.dtype)).nonzero()
        n = int(hits[0]) + 1 if len(hits) else len(ids)
        self.token_ids.append(ids[:n].clone())
        self.logprobs.append(logprobs[:n].clone())
        self.finished.append(bool(len(hits)))


def eos_ids_of(model, tokenizer=None) -> tuple[int, ...]:
    """Every EOS id of the model's generation config (int or list), else the tokenizer's.

    Raises:
        ValueError: neither defines one.
    """
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the model's generation_config and tokenizer define no eos_token_id")
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


def pad_id_of(tokenizer, eos_token_ids: Sequence[int]) -> int:
    """The id that pads rows: the tokenizer's pad token, else the first EOS id."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else eos_token_ids[0])


def check_generate_args(
    prefixes: Sequence[Sequence[int]],
    max_new_tokens: int | Sequence[int],
    temperature: float,
    top_p: float,
    max_prefix_tokens: int | None = None,
) -> list[int]:
    """The argument checks every ``Sampler.generate`` makes.

    Returns:
        the per-row budgets (tokens): ``max_new_tokens`` for every row, or its entries.

    Raises:
        ValueError: a non-positive budget (row named) or ``temperature``, a budget list of another
            length than ``prefixes``, ``top_p`` outside (0, 1], an empty prefix, or one of
            ``max_prefix_tokens`` or more (row named).
    """
    if isinstance(max_new_tokens, int):
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
        budgets = [max_new_tokens] * len(prefixes)
    else:
        budgets = [int(b) for b in max_new_tokens]
        if len(budgets) != len(prefixes):
            raise ValueError(f"max_new_tokens has {len(budgets)} budgets for {len(prefixes)} prefixes")
        for i, b in enumerate(budgets):
            if b <= 0:
                raise ValueError(f"max_new_tokens of row {i} must be positive, got {b}")
    if temperature <= 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature > 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    for i, p in enumerate(prefixes):
        if len(p) == 0:
            raise ValueError(f"prefix row {i} is empty")
        if max_prefix_tokens is not None and len(p) >= max_prefix_tokens:
            raise ValueError(f"prefix row {i} has {len(p)} tokens, sampler.max_model_len is {max_prefix_tokens}")
    return budgets


class Sampler(ABC):
    """What the rollout loop needs from a generation backend (``sampler=`` config group).

    :meth:`generate` checks its arguments and answers an empty call itself; a backend implements
    :meth:`_continue` for the rest.

    Attributes:
        eos_token_ids: every id that ends a response (:func:`eos_ids_of`).
        pad_token_id: the id that pads rows (the tokenizer's pad token, else the first EOS id:
            :func:`pad_id_of`).
        max_prefix_tokens: longest prefix the backend accepts, exclusive (tokens), or None for no
            limit of its own.
        runs_sharded: class-level; True when the backend can sample while the policy's weights are
            sharded by FSDP (it holds its own copy, as vLLM does), which ``trainer=fsdp`` requires.
        runs_pipelined: class-level; True when the backend can sample from its own copy of the
            weights in a producer thread of the trainer's process while the trainer updates
            (``rollout.max_staleness > 0``: :class:`mintrl.sampler.pinned.PinnedSampler`).
        exact_logprobs: True when the log-probs are computed by the policy module itself in fp32,
            as an fp32 trainer computes them (up to float rounding); False for a bf16 copy or an
            engine with its own kernels, whose log-probs the trainer recomputes
            (:mod:`mintrl.training.rollout_logprobs`).
    """

    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    max_prefix_tokens: int | None = None
    runs_sharded: bool = False
    runs_pipelined: bool = False
    exact_logprobs: bool = True

    @torch.no_grad()
    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        max_new_tokens: int | Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        cache_keys: Sequence[int] | None = None,
    ) -> Generation:
        """Continue each prefix by at most ``max_new_tokens`` sampled tokens (see module docstring).

        Args:
            prefixes: ``B`` lists of token ids (prompt + accepted response), each non-empty and
                shorter than :attr:`max_prefix_tokens`.
            max_new_tokens: the budget (tokens, positive): one for every row, or one per row (a
                row that reaches its own budget stops there, unfinished, while others go on).
            temperature: > 0; ``top_p`` in (0, 1].
            cache_keys: one id per row (the rollout's), naming the row for a backend that keeps
                its KV between calls.

        Returns:
            :class:`Generation` with ``B`` rows, in input order; log-probs ``log_softmax(logits / T)``.

        Raises:
            ValueError: an empty or too long prefix (row named), a non-positive budget or
                temperature, a budget list of another length, ``top_p`` outside (0, 1], or ``cache_keys`` of another length.
        """
        budgets = check_generate_args(prefixes, max_new_tokens, temperature, top_p, self.max_prefix_tokens)
        if cache_keys is not None and len(cache_keys) != len(prefixes):
            raise ValueError(f"cache_keys has {len(cache_keys)} entries for {len(prefixes)} prefixes")
        if not prefixes:
            return Generation([], [], [])
        return self._continue(prefixes, budgets, temperature, top_p, cache_keys)

    @abstractmethod
    def _continue(self, prefixes, budgets: list[int], temperature: float, top_p: float, cache_keys) -> Generation:
        """:meth:`generate` for checked arguments and at least one prefix; ``budgets``: per row (tokens)."""

    @abstractmethod
    def score(
        self, sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs ``log_softmax(logits / T)`` of ``sequences[i][prompt_lengths[i]:]``
        under the current weights: ``B`` float32 tensors (nats). Used for tokens the policy did not
        sample (interventions)."""

    def metrics(self) -> dict[str, float]:
        """Counters since the last call (e.g. vLLM weight syncs), logged with the rollout statistics."""
        return {}

    def prepare(self) -> None:
        """Build now what the backend would build at its first generation (a sampling copy), so that
        building draws no random numbers there: a resumed run calls it before restoring the random
        generators its next rollout batch samples with. Default none."""

    def release(self) -> None:
        """Free what generation holds between rollout batches (caches, engine memory); default none."""

    def close(self) -> None:
        """Free for good what the backend holds (an engine, temporary files) at the end of a run (the
        data module calls it when a fit ends). Idempotent: a second call does nothing; default none."""
