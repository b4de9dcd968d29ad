"""``objective=grpo`` / ``dr_grpo``: group-relative policy optimisation with PPO clipping."""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_choice, check_range
from mintrl.model.lora import frozen_step0
from mintrl.objective.advantages import group_advantages
from mintrl.objective.aggregation import AGGREGATIONS, StepTotals, aggregate
from mintrl.objective.base import Objective, ObjectiveOutput, Prepared
from mintrl.objective.off_policy import OffPolicyCorrection, proximal_logprobs
from mintrl.objective.policy_gradient import KL_ESTIMATORS, clipped_surrogate, kl_penalty


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Detached mean of ``values`` over ``mask`` (0 when empty)."""
    return torch.where(
        mask, values.detach().float(), torch.zeros_like(values, dtype=torch.float32)
    ).sum() / mask.sum().clamp(min=1)


class GRPO(Objective):
    """GRPO (Shao et al. 2024): group-relative advantages, per-token PPO-clip surrogate against the
    rollout-time log-probs (a stale batch's: the proximal policy's), optional KL to a frozen reference.

    Per token: ``w max(-A r, -A clip(r, 1-clip_low, 1+clip_high)) + kl_coef * KL_est`` with
    ``r = pi_theta / pi_old``, ``pi_old`` the proximal policy (the behaviour policy that sampled the
    batch unless it is stale: :mod:`mintrl.objective.off_policy`) and ``w`` the detached
    ``off_policy_correction`` weight (1 with ``none``); aggregated with ``aggregation`` over the
    optimizer step.
    Dr. GRPO (Liu et al. 2025) is ``scale_std=false, aggregation=seq-mean-token-sum`` with
    ``token_sum_norm`` the maximum response length (its loss ``sum_i sum_t l_it / (rows x max_len)``,
    a constant normaliser: see :func:`mintrl.objective.aggregation.aggregate`).

    Args:
        clip_low, clip_high: PPO clip range below / above 1 (DAPO clip-higher: 0.2 / 0.28).
        dual_clip: cap on the loss of negative-advantage tokens (``c > 1``), or None.
        kl_coef: weight of the KL penalty (0: no reference model is kept).
        kl_estimator: ``k1``, ``k2`` or ``k3`` (see :func:`mintrl.objective.policy_gradient.kl_penalty`).
        scale_std: divide advantages by the group's reward std (False: Dr. GRPO).
        aggregation: ``token-mean``, ``seq-mean-token-sum`` or ``seq-mean-token-mean``.
        token_sum_norm: tokens each row's token sum is divided by under ``seq-mean-token-sum`` (> 0;
            Dr. GRPO: the maximum response length, the configs' ``rollout.max_response_tokens``; 1: none).
        mask_truncated: drop length-truncated responses from the loss.
        eps: added to the group std.
        off_policy_correction: ``none``, ``tis`` or ``mis``: the weight of the behaviour -> proximal
            shift (:class:`mintrl.objective.off_policy.OffPolicyCorrection`).
        tis_cap: the truncation ``C`` of ``tis`` (> 0). mis_threshold: the sequence-ratio threshold
            of ``mis`` (>= 1).

    Raises:
        ValueError: a bad knob, naming the ``objective.*`` field.
    """

    @classmethod
    def context_models(cls, config):
        """The frozen step-0 policy (the KL reference) when ``kl_coef > 0``, else none."""
        return ((None, ""),) if float(config.get("kl_coef", 0.0) or 0.0) > 0 else ()

    def __init__(
        self,
        clip_low: float = 0.2,
        clip_high: float = 0.2,
        dual_clip: float | None = None,
        kl_coef: float = 0.0,
        kl_estimator: str = "k3",
        scale_std: bool = True,
        aggregation: str = "token-mean",
        mask_truncated: bool = False,
        eps: float = 1e-6,
        token_sum_norm: float = 1.0,
        off_policy_correction: str = "none",
        tis_cap: float = 2.0,
        mis_threshold: float = 3.0,
        context=None,
    ):
        super().__init__(mask_truncated=mask_truncated)
        self.off_policy = OffPolicyCorrection(off_policy_correction, tis_cap, mis_threshold)
        check_range("objective.clip_low", clip_low, 0, 1, high_open=True)
        check_range("objective.clip_high", clip_high, 0)
        check_range("objective.dual_clip", dual_clip, 1, low_open=True, none_ok=True)
        check_range("objective.kl_coef", kl_coef, 0)
        check_choice("objective.kl_estimator", kl_estimator, KL_ESTIMATORS)
        check_choice("objective.aggregation", aggregation, AGGREGATIONS)
        check_range("objective.token_sum_norm", token_sum_norm, 0, low_open=True)
        self.clip_low, self.clip_high, self.dual_clip = clip_low, clip_high, dual_clip
        self.kl_coef, self.kl_estimator = kl_coef, kl_estimator
        self.scale_std, self.aggregation, self.eps = scale_std, aggregation, eps
        self.token_sum_norm = token_sum_norm
        self.reference: torch.nn.Module | None = None
        if kl_coef > 0 and context is not None:
            # the step-0 policy, taken now (at build time): a resumed run restores newer weights into
            # the policy before ``setup``, and its reference must still be step 0
            self.reference = context.frozen_policy()

    def setup(self, policy: torch.nn.Module) -> None:
        """Snapshot the KL reference (the policy as training starts; a LoRA policy's base with the
        adapter off) when ``kl_coef > 0`` and no step-0 policy was taken at construction (no ``context``)."""
        if self.kl_coef > 0 and self.reference is None:
            self.reference = frozen_step0(policy)

    def advantages(self, batch: RolloutBatch, rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``[N]`` group-relative advantages over every rollout of each prompt's group, and
        statistics of their computation (none here)."""
        adv = group_advantages(batch.rewards, batch.group_index, batch.num_groups, rows, self.scale_std, self.eps)
        return adv, {}

    def old_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """``[N, L]`` log-probs the ratio is taken against: the proximal policy's (the rollout-time
        policy's unless the batch is stale, :func:`mintrl.objective.off_policy.proximal_logprobs`)."""
        return proximal_logprobs(batch)

    def extra_tensors(self, batch, valid, logprob_fn):
        """``{"advantages": [N]}`` (:meth:`advantages`), with ``kl_coef > 0`` the frozen reference's
        ``[N, L]`` log-probs (``"ref_logprobs"``), and the advantage statistics.

        Raises:
            RuntimeError: ``kl_coef > 0`` before :meth:`setup` built the reference.
        """
        adv, stats = self.advantages(batch, valid)
        extras = {"advantages": adv}
        if self.kl_coef > 0:
            if self.reference is None:
                raise RuntimeError("GRPO with kl_coef > 0 needs setup(policy) before prepare()")
            self.reference.to(batch.input_ids.device)
            extras["ref_logprobs"] = logprob_fn(
                self.reference, batch.input_ids, batch.attention_mask, batch.response_mask, batch.temperature
            )
        return Prepared(extras, stats=stats)

    def token_advantages(self, batch: RolloutBatch) -> torch.Tensor:
        """Advantages the surrogate multiplies, ``[n, 1]`` (one per row here) or ``[n, L]``
        (per token: :class:`mintrl.objective.first_error_credit.FirstErrorCredit`)."""
        return batch.extras["advantages"][:, None]

    def token_loss(self, batch: RolloutBatch, logprobs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``[n, L]`` per-token loss (weighted surrogate + KL) and detached metrics."""
        mask = batch.loss_mask
        adv = self.token_advantages(batch)  # [n, 1] or [n, L]
        loss, clipped, ratio = clipped_surrogate(
            logprobs, self.old_logprobs(batch), adv, self.clip_low, self.clip_high, self.dual_clip
        )
        weights, metrics = self.off_policy.weights(batch)  # [n, L] or None
        if weights is not None:
            loss = loss * weights
        metrics["objective/clip_frac"] = masked_mean(clipped.float(), mask)
        metrics["objective/ratio"] = masked_mean(ratio, mask)
        if self.kl_coef > 0:
            kl = kl_penalty(logprobs, batch.extras["ref_logprobs"], self.kl_estimator)
            loss = loss + self.kl_coef * kl
            metrics["objective/kl"] = masked_mean(kl, mask)
        rows = mask.any(-1)
        metrics["objective/advantage_abs"] = (batch.extras["advantages"].abs() * rows).sum() / rows.sum().clamp(min=1)
        return loss, metrics

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        loss, metrics = self.token_loss(batch, logprobs)
        return ObjectiveOutput(aggregate(loss, batch.loss_mask, self.aggregation, totals, self.token_sum_norm), metrics)
