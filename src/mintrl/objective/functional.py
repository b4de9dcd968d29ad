"""The MInTRL regression objective as small pure functions (MInTRL section 2.2-2.3)."""

from __future__ import annotations

import torch


def anchor_logprobs(
    rollout_logprobs: torch.Tensor, intervention_mask: torch.Tensor, kappa: float | None
) -> torch.Tensor:
    """Per-token anchor ``log pi~_t`` (MInTRL eq. 11).

    Args:
        rollout_logprobs: ``[N, L]`` log pi_t of each token at rollout time.
        intervention_mask: ``[N, L]`` bool, intervention-authored tokens.
        kappa: constant anchor for intervention tokens (MInTRL-Const, kappa < 0), or None to keep
            the policy's own rollout-time log-probs there (MInTRL-Proxy).

    Returns:
        ``[N, L]`` anchor log-probs (nats).
    """
    if kappa is None:
        return rollout_logprobs
    return torch.where(intervention_mask, torch.full_like(rollout_logprobs, kappa), rollout_logprobs)


def anchored_log_ratio(
    logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    intervention_mask: torch.Tensor,
    kappa: float | None,
) -> torch.Tensor:
    """Sequence log-ratio ``log pi_theta(y|x) - log pi~_t(y|x)`` summed over response tokens
    (MInTRL eqs. 7 and 11).

    Args:
        logprobs: ``[N, L]`` log pi_theta of each token (differentiable).
        rollout_logprobs: ``[N, L]`` log pi_t at rollout time. response_mask, intervention_mask:
            ``[N, L]`` bool. kappa: see :func:`anchor_logprobs`.

    Returns:
        ``[N]`` log-ratios (nats).
    """
    anchor = anchor_logprobs(rollout_logprobs, intervention_mask, kappa)
    return ((logprobs - anchor) * response_mask).sum(-1)


def regression_terms(log_ratio: torch.Tensor, advantages: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-sequence squared residuals ``(beta * log_ratio_i - A_i)^2`` (MInTRL eq. 7): ``[N]``."""
    return (beta * log_ratio - advantages).pow(2)


def regression_loss(log_ratio: torch.Tensor, advantages: torch.Tensor, beta: float) -> torch.Tensor:
    """Advantage-regression loss ``mean_i (beta * log_ratio_i - A_i)^2`` (MInTRL eq. 7, ``beta_2``).

    Args:
        log_ratio: ``[N]`` anchored sequence log-ratios. advantages: ``[N]``. beta: ``beta_2 > 0``.

    Returns:
        scalar loss. Its gradient w.r.t. ``log_ratio_i`` is ``2 beta (beta log_ratio_i - A_i) / N``:
        at ``log_ratio = 0`` it raises the likelihood of positive-advantage rollouts.
    """
    return regression_terms(log_ratio, advantages, beta).mean()
