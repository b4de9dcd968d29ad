"""The objective contract the LightningModule trains with (``objective=`` config group).

An objective is used in three phases per rollout batch, so that several optimizer updates
(epochs x mini-batches) and any micro-batching give the same result:

1. ``setup(policy)`` once when training starts (e.g. snapshot a KL reference);
2. ``prepare(batch, logprob_fn)`` once per rollout batch, without gradients: advantages, reference
   or teacher log-probs and the ``loss_mask`` go into ``batch.extras``; counters into ``batch.stats``;
3. ``__call__(micro_batch, logprobs, totals)`` per micro-batch: its share of the optimizer step's
   loss, normalised by the step's ``totals`` (see :mod:`mintrl.objective.aggregation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from mintrl.objective.advantages import valid_rows
from mintrl.objective.aggregation import StepTotals
from mintrl.rollout.batch import RolloutBatch

# (model, input_ids [N, L], attention_mask [N, L], target_mask [N, L], temperature) -> log-probs [N, L], no grad
LogprobFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]


@dataclass
class ObjectiveOutput:
    """A scalar ``loss`` (this micro-batch's share of the step loss) and detached scalar ``metrics``."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


class Objective:
    """Base class: the loss mask and the three-phase contract (see module docstring).

    Args:
        mask_truncated: drop responses that hit the length limit (no EOS) from the loss, numerator
            and denominator (DAPO's overlong filtering); they still count in group statistics.
        uses_reward: False for objectives that ignore rewards (distillation, SFT): rows with a
            missing reward then still train.
    """

    def __init__(self, mask_truncated: bool = False, uses_reward: bool = True):
        self.mask_truncated, self.uses_reward = mask_truncated, uses_reward

    def setup(self, policy: torch.nn.Module) -> None:
        """Called once when training starts, with the policy being trained."""

    def valid_mask(self, batch: RolloutBatch) -> torch.Tensor:
        """``[N]`` bool rows with a usable sample: non-empty response and, when ``uses_reward``,
        a reward. Only these enter group statistics."""
        return valid_rows(batch.rewards, batch.response_mask) if self.uses_reward else batch.response_mask.any(-1)

    def extra_tensors(self, batch: RolloutBatch, valid: torch.Tensor, logprob_fn: LogprobFn) -> dict[str, torch.Tensor]:
        """Per-row tensors the loss needs (override). ``valid`` is :meth:`valid_mask`; an entry
        ``rows`` (``[N]`` bool) further restricts the rows that train."""
        return {}

    @torch.no_grad()
    def prepare(self, batch: RolloutBatch, logprob_fn: LogprobFn) -> RolloutBatch:
        """Adds ``extras['loss_mask']`` ``[N, L]`` and the objective's tensors. Rows train when
        valid, not dropped by the objective, and (with ``mask_truncated``) finished; truncated
        rows still count in group statistics. Counts go to ``stats``:
        ``objective/truncated_masked`` and ``objective/rows_without_signal``."""
        valid = self.valid_mask(batch)
        extras = self.extra_tensors(batch, valid, logprob_fn)
        rows = valid & extras.pop("rows", valid)
        if self.mask_truncated:
            batch.stats["objective/truncated_masked"] = float((rows & ~batch.finished).sum())
            rows = rows & batch.finished
        batch.extras.update(extras)
        batch.extras["loss_mask"] = batch.response_mask & rows[:, None]
        batch.stats["objective/rows_without_signal"] = float((~rows).sum())
        return batch

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        """This micro-batch's share of the step loss; ``logprobs`` ``[n, L]`` under pi_theta."""
        raise NotImplementedError
