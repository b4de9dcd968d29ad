"""``objective=luffy``: LUFFY's mixed-policy GRPO with policy shaping on off-policy tokens.

LUFFY (Yan et al. 2025, "Learning to Reason under Off-Policy Guidance", arXiv 2504.14945, section 3):
off-policy demonstrations join each prompt's group; advantages are group-relative over on- and
off-policy members (eq. 5); on-policy tokens keep the PPO-clip surrogate against the rollout-time
policy; off-policy tokens replace the ratio by the shaped probability ``f(pi_theta) = pi_theta /
(pi_theta + gamma)`` (eq. 6, policy shaping; the demonstrator's probability taken as 1) with no
clipping. The shaping's gradient ``d f / d log pi = f (1 - f) = pi gamma / (pi + gamma)^2`` keeps
low-probability demonstration tokens learnable without letting one token dominate.
"""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_range
from mintrl.objective.grpo import GRPO, masked_mean
from mintrl.objective.policy_gradient import MAX_LOG_RATIO, clipped_surrogate, kl_penalty


def shaped_probability(logprobs: torch.Tensor, gamma: float) -> torch.Tensor:
    """LUFFY's policy shaping ``f(p) = p / (p + gamma)`` of ``p = exp(logprobs)`` (eq. 6).

    Args:
        logprobs: ``[...]`` log pi_theta of the off-policy tokens (nats; differentiable).
        gamma: the shaping constant (> 0; LUFFY: 0.1).

    Returns:
        ``[...]`` in ``(0, 1)``; its derivative w.r.t. ``logprobs`` is ``f (1 - f)``.
    """
    p = logprobs.clamp(min=-MAX_LOG_RATIO).exp()
    return p / (p + gamma)


class LUFFY(GRPO):
    """GRPO over on- and off-policy group members with policy shaping on guide tokens (see module
    docstring). Off-policy tokens are the batch's guide tokens (``guide=demonstration``: whole
    traces; ``guide=prefix``: solution prefixes, the policy's continuation on-policy).

    Per token: on-policy (``response_mask``) ``max(-A r, -A clip(r))`` (+ optional KL), ``r`` against
    the proximal policy; off-policy (``guide_mask``) ``-A f(pi_theta)``, unclipped, no KL. The
    ``off_policy_correction`` weight (GRPO's) multiplies both: under ``tis`` it is 1 on guide tokens
    (no policy sampled them), under ``mis`` a masked row leaves the loss whole.

    Args:
        gamma: the shaping constant (> 0). LUFFY: 0.1.
        **grpo: :class:`mintrl.objective.grpo.GRPO` knobs (LUFFY: clip 0.2, no KL, token mean).

    Raises:
        ValueError: ``gamma <= 0`` or a bad GRPO knob, naming the ``objective.*`` field.
    """

    trains_guide_tokens = True  # off-policy tokens: shaped, unclipped

    def __init__(self, gamma: float = 0.1, **grpo):
        super().__init__(**grpo)
        check_range("objective.gamma", gamma, 0, low_open=True)
        self.gamma = gamma

    def token_loss(self, batch: RolloutBatch, logprobs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``[n, L]`` per-token loss (clipped surrogate on on-policy tokens, shaped and unclipped on
        guide tokens) and detached metrics (``objective/offpolicy_prob``: mean pi_theta of guide
        tokens; ``objective/shaping``: mean ``f``; clip fraction and ratio of on-policy tokens)."""
        mask, off = batch.loss_mask, batch.guide_mask  # [n, L] each
        on = mask & ~off
        adv = batch.extras["advantages"][:, None]  # [n, 1]
        on_loss, clipped, ratio = clipped_surrogate(
            logprobs, self.old_logprobs(batch), adv, self.clip_low, self.clip_high, self.dual_clip
        )
        shaped = shaped_probability(logprobs, self.gamma)  # [n, L]
        loss = torch.where(off, -adv * shaped, on_loss)
        weights, metrics = self.off_policy.weights(batch)  # [n, L] or None; 1 on guide tokens under tis
        if weights is not None:
            loss = loss * weights
        metrics["objective/clip_frac"] = masked_mean(clipped.float(), on)
        metrics["objective/ratio"] = masked_mean(ratio, on)
        metrics["objective/offpolicy_prob"] = masked_mean(logprobs.detach().exp(), mask & off)
        metrics["objective/shaping"] = masked_mean(shaped, mask & off)
        if self.kl_coef > 0:
            kl = kl_penalty(logprobs, batch.extras["ref_logprobs"], self.kl_estimator)
            loss = loss + self.kl_coef * torch.where(off, torch.zeros_like(kl), kl)
            metrics["objective/kl"] = masked_mean(kl, on)
        rows = mask.any(-1)
        metrics["objective/advantage_abs"] = (batch.extras["advantages"].abs() * rows).sum() / rows.sum().clamp(min=1)
        return loss, metrics
