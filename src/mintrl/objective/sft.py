"""``objective=sft``: supervised fine-tuning on given trajectories (the SFT stage of SFT+GRPO)."""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_choice
from mintrl.objective.aggregation import AGGREGATIONS, StepTotals, aggregate
from mintrl.objective.base import Objective, ObjectiveOutput
from mintrl.objective.grpo import masked_mean


class SupervisedNLL(Objective):
    """Negative log-likelihood ``-log pi_theta(y_t)`` of every response token, aggregated over the
    optimizer step (token mean by default). Rewards are not used: the SFT stage keeps only
    positive-reward trajectories before training.

    Args:
        aggregation: see :func:`mintrl.objective.aggregation.aggregate`.
    """

    trains_guide_tokens = True  # imitation: a demonstration's tokens are what SFT learns

    def __init__(self, aggregation: str = "token-mean", context=None):
        super().__init__(uses_reward=False)
        check_choice("objective.aggregation", aggregation, AGGREGATIONS)
        self.aggregation = aggregation

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        mask = batch.loss_mask
        return ObjectiveOutput(
            aggregate(-logprobs, mask, self.aggregation, totals), {"objective/nll": masked_mean(-logprobs, mask)}
        )
