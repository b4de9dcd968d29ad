"""``objective=regression_const`` / ``regression_proxy``: the MInTRL objective component."""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_range
from mintrl.objective.advantages import control_advantages
from mintrl.objective.aggregation import StepTotals, sequence_mean
from mintrl.objective.base import Objective, ObjectiveOutput, Prepared
from mintrl.objective.functional import anchored_log_ratio, regression_terms


class AdvantageRegression(Objective):
    """MInTRL advantage regression with a control baseline and a relaxed anchor (eqs. 7, 10, 11).

    No importance weights: the anchor ``log pi~_t`` is the rollout-time log-prob of each policy
    token (fixed for all updates on the batch) and ``kappa`` (Const) or the policy's rollout-time
    log-prob (Proxy) on intervention tokens. The anchor is always the behaviour policy's, the weights
    version that sampled the batch (``RolloutBatch.step``), also for a stale batch: the regression
    needs no proximal policy and takes no ``off_policy_correction`` (not a field: the config is
    refused with the field's name; :mod:`mintrl.objective.off_policy` is for the ratio-based
    objectives). Guide tokens (a reference solution's prefix,
    :mod:`mintrl.guide`) are anchored exactly like intervention tokens (``trains_guide_tokens``). The loss is the mean over the optimizer step's
    sequences of ``(beta * log_ratio - A)^2``; rows without a reward or whose group has no valid
    control rollout are left out (counted in ``objective/rows_without_signal``).

    Args:
        beta: ``beta_2``, the regression temperature (> 0). Paper: 1e-3.
        kappa: constant anchor log-prob of intervention tokens (MInTRL-Const, paper: -0.2 math,
            -0.1 code), or None for MInTRL-Proxy.
        mask_truncated: see :class:`mintrl.objective.base.Objective`.

    Raises:
        ValueError: ``beta <= 0`` or ``kappa >= 0`` (field named).
    """

    trains_guide_tokens = True  # anchored like intervention tokens (kappa / pi_t)

    def __init__(self, beta: float = 1e-3, kappa: float | None = -0.2, mask_truncated: bool = False, context=None):
        super().__init__(mask_truncated=mask_truncated)
        check_range("objective.beta", beta, 0, low_open=True)
        check_range("objective.kappa", kappa, high=0, high_open=True, none_ok=True)  # nats: a log-prob
        self.beta, self.kappa = beta, kappa

    def extra_tensors(self, batch, valid, logprob_fn):
        adv, has_signal = control_advantages(
            batch.rewards, batch.group_index, batch.is_control, batch.num_groups, valid
        )
        return Prepared({"advantages": adv}, rows=has_signal)

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        adv = batch.extras["advantages"]  # [n]
        rows = batch.loss_mask.any(-1)  # [n]
        off_policy = batch.intervention_mask | batch.guide_mask  # [n, L] anchored at kappa (Const)
        log_ratio = anchored_log_ratio(
            logprobs, batch.rollout_logprobs, batch.scored_mask, off_policy, self.kappa
        )  # [n]
        loss = sequence_mean(regression_terms(log_ratio, adv, self.beta), rows, totals)
        n = rows.sum().clamp(min=1)
        return ObjectiveOutput(
            loss,
            {
                "objective/advantage_abs": (adv.abs() * rows).sum().detach() / n,
                "objective/log_ratio": (log_ratio * rows).sum().detach() / n,
                "objective/log_ratio_abs": (log_ratio.abs() * rows).sum().detach() / n,
            },
        )
