"""Rollout records and their padded tensor form, the unit a training step consumes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Rollout:
    """One response to one prompt, built token by token.

    Attributes:
        group: index of its prompt in the step's prompt batch.
        is_control: True for the ``N_c`` pure on-policy control rollouts (MInTRL eq. 8).
        prompt_ids: prompt token ids.
        response_ids: response token ids (policy and intervention tokens, EOS included if sampled).
        logprobs: per response token, log-prob under the policy at rollout time (nats; the
            intervention tokens are filled by a scoring pass at the end of the rollout).
        intervention: per response token, True if intervention-authored.
        finished: ended with EOS (else the length limit).
        reviews, revisions, unparseable: judge counts for this rollout.
        reward: verifiable reward in [0, 1].
    """

    group: int
    is_control: bool
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    intervention: list[bool] = field(default_factory=list)
    finished: bool = False
    reviews: int = 0
    revisions: int = 0
    unparseable: int = 0
    reward: float = 0.0

    def append(self, ids, logprobs, intervention: bool) -> None:
        """Append tokens (ids and their log-probs) with one provenance."""
        ids, logprobs = list(ids), list(logprobs)
        assert len(ids) == len(logprobs)
        self.response_ids += ids
        self.logprobs += logprobs
        self.intervention += [intervention] * len(ids)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` response tokens."""
        del self.response_ids[length:], self.logprobs[length:], self.intervention[length:]


@dataclass
class RolloutBatch:
    """Right-padded tensors of ``N`` rollouts (prompt + response), ``L`` = longest sequence.

    Position ``j`` of the per-token tensors refers to the token ``input_ids[:, j]`` (its log-prob
    is predicted from positions ``< j``); prompt and padding positions hold 0 / False.

    Attributes:
        input_ids: ``[N, L]`` int64. attention_mask: ``[N, L]`` int64.
        response_mask: ``[N, L]`` bool, True on response tokens.
        intervention_mask: ``[N, L]`` bool, True on intervention-authored response tokens.
        rollout_logprobs: ``[N, L]`` float32, log pi_t of each response token at rollout time.
        rewards: ``[N]`` float32. group_index: ``[N]`` int64 in ``[0, G)``. is_control: ``[N]`` bool.
        num_groups: ``G``, prompts in the step. temperature: sampling temperature of the rollouts
        (the trainer's log-probs use the same ``log_softmax(logits / T)``).
        stats: scalar rollout statistics for logging (floats).
        step: the optimizer step whose weights generated the batch.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    intervention_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    rewards: torch.Tensor
    group_index: torch.Tensor
    is_control: torch.Tensor
    num_groups: int
    temperature: float = 1.0
    stats: dict[str, float] = field(default_factory=dict)
    step: int = -1

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def collate_rollouts(rollouts: list[Rollout], num_groups: int, pad_token_id: int, temperature: float) -> RolloutBatch:
    """Pad rollouts into a :class:`RolloutBatch` (right padding).

    Raises:
        ValueError: a rollout with a non-finite log-prob (e.g. an intervention token that was never
            scored), naming the row: it would otherwise turn the loss into NaN silently.
    """
    for i, r in enumerate(rollouts):
        if not all(math.isfinite(x) for x in r.logprobs):
            raise ValueError(f"rollout row {i} (group {r.group}) has non-finite log-probs; were its intervention tokens scored?")
    n = len(rollouts)
    width = max(len(r.prompt_ids) + len(r.response_ids) for r in rollouts)
    batch = RolloutBatch(
        input_ids=torch.full((n, width), pad_token_id, dtype=torch.long),
        attention_mask=torch.zeros((n, width), dtype=torch.long),
        response_mask=torch.zeros((n, width), dtype=torch.bool),
        intervention_mask=torch.zeros((n, width), dtype=torch.bool),
        rollout_logprobs=torch.zeros((n, width), dtype=torch.float32),
        rewards=torch.tensor([r.reward for r in rollouts], dtype=torch.float32),
        group_index=torch.tensor([r.group for r in rollouts], dtype=torch.long),
        is_control=torch.tensor([r.is_control for r in rollouts], dtype=torch.bool),
        num_groups=num_groups,
        temperature=temperature,
    )
    for i, r in enumerate(rollouts):
        p, t = len(r.prompt_ids), len(r.response_ids)
        batch.input_ids[i, : p + t] = torch.tensor(r.prompt_ids + r.response_ids, dtype=torch.long)
        batch.attention_mask[i, : p + t] = 1
        batch.response_mask[i, p : p + t] = True
        batch.intervention_mask[i, p : p + t] = torch.tensor(r.intervention, dtype=torch.bool)
        batch.rollout_logprobs[i, p : p + t] = torch.tensor(r.logprobs, dtype=torch.float32)
    return batch
