"""The sampler contract shared by every backend.

A sampler continues a batch of token-id prefixes (prompt + accepted response so far) by at most
``max_new_tokens`` tokens and reports, per row, the sampled token ids, their log-probs under the
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
        token_ids: ``B`` int64 tensors of shape ``[n_i]``, ``n_i <= max_new_tokens``; the EOS token
            that ended a row is included as its last element.
        logprobs: ``B`` float32 tensors of shape ``[n_i]``: ``log_softmax(logits / T)`` of each
            sampled token (nats).
        finished: ``B`` booleans, True where the row ended with an EOS id (not the length limit).
    """

    token_ids: list[torch.Tensor]
    logprobs: list[torch.Tensor]
    finished: list[bool]


def check_generate_args(
    prefixes: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    max_prefix_tokens: int | None = None,
) -> None:
    """The argument checks every ``Sampler.generate`` makes.

    Raises:
        ValueError: non-positive ``max_new_tokens`` (tokens) or ``temperature``, ``top_p`` outside
            (0, 1], an empty prefix, or one of ``max_prefix_tokens`` or more (row named).
    """
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
    if temperature <= 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature > 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    for i, p in enumerate(prefixes):
        if len(p) == 0:
            raise ValueError(f"prefix row {i} is empty")
        if max_prefix_tokens is not None and len(p) >= max_prefix_tokens:
            raise ValueError(f"prefix row {i} has {len(p)} tokens, sampler.max_model_len is {max_prefix_tokens}")


class Sampler(ABC):
    """What the rollout loop needs from a generation backend (``sampler=`` config group).

    Attributes:
        eos_token_ids: every id that ends a response.
        pad_token_id: the id that pads rows (the tokenizer's pad token, else the first EOS id).
        runs_sharded: class-level; True when the backend can sample while the policy's weights are
            sharded by FSDP (it holds its own copy, as vLLM does), which ``trainer=fsdp`` requires.
    """

    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    runs_sharded: bool = False

    @abstractmethod
    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        cache_keys: Sequence[int] | None = None,
    ) -> Generation:
        """Continue each prefix by at most ``max_new_tokens`` tokens (see module docstring)."""

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

    def release(self) -> None:
        """Free what generation holds between rollout batches (caches, engine memory); default none."""
