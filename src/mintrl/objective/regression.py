"""``objective=regression_const`` / ``regression_proxy``: the MInTRL objective component."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mintrl.objective.functional import anchored_log_ratio, control_advantages, regression_loss
from mintrl.rollout.batch import RolloutBatch


@dataclass
class ObjectiveOutput:
    """A scalar ``loss`` to minimise and detached scalar ``metrics`` to log."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


class AdvantageRegression:
    """MInTRL advantage regression with a control baseline and a relaxed anchor (eqs. 7, 10, 11).

    Args:
        beta: ``beta_2``, the regression temperature (> 0). Paper: 1e-3.
        kappa: constant anchor log-prob of intervention tokens (MInTRL-Const, paper: -0.2 math,
            -0.1 code), or None for MInTRL-Proxy (the policy's own rollout-time log-probs).

    Raises:
        ValueError: ``beta <= 0`` or ``kappa >= 0`` (field named).
    """

    def __init__(self, beta: float = 1e-3, kappa: float | None = -0.2):
        if beta <= 0:
            raise ValueError(f"objective.beta must be positive, got {beta}")
        if kappa is not None and kappa >= 0:
            raise ValueError(f"objective.kappa must be negative (a log-prob) or null, got {kappa}")
        self.beta, self.kappa = beta, kappa

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor) -> ObjectiveOutput:
        """Loss over all rollouts of the batch.

        Args:
            batch: the step's rollouts. logprobs: ``[N, L]`` log pi_theta of ``batch.input_ids``.
        """
        adv = control_advantages(batch.rewards, batch.group_index, batch.is_control, batch.num_groups)  # [N]
        log_ratio = anchored_log_ratio(logprobs, batch.rollout_logprobs, batch.response_mask, batch.intervention_mask, self.kappa)
        loss = regression_loss(log_ratio, adv, self.beta)
        return ObjectiveOutput(loss, {
            "objective/advantage_abs": adv.abs().mean().detach(),
            "objective/log_ratio": log_ratio.mean().detach(),
            "objective/log_ratio_abs": log_ratio.abs().mean().detach(),
        })
