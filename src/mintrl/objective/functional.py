"""The MInTRL regression objective as small pure functions (MInTRL section 2.2-2.3)."""

from __future__ import annotations

import torch


def control_baseline(rewards: torch.Tensor, group_index: torch.Tensor, is_control: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Value baseline of each prompt: the mean reward of its control rollouts (MInTRL eq. 10,
    the large-``beta_1`` limit of eq. 9).

    Args:
        rewards: ``[N]`` float rewards. group_index: ``[N]`` int64 prompt index in ``[0, G)``.
        is_control: ``[N]`` bool, True for pure on-policy control rollouts.
        num_groups: ``G``.

    Returns:
        ``[G]`` float baselines.

    Raises:
        ValueError: a group without any control rollout (its baseline would be undefined); the
            message names the group.
    """
    weights = is_control.to(rewards.dtype)  # [N]
    sums = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group_index, rewards * weights)
    counts = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group_index, weights)
    empty = (counts == 0).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"group(s) {empty.tolist()} have no control rollout: the control baseline is undefined")
    return sums / counts


def control_advantages(rewards: torch.Tensor, group_index: torch.Tensor, is_control: torch.Tensor, num_groups: int) -> torch.Tensor:
    """``A(x, y) = r(x, y) - V_ctrl(x)`` for every rollout, control and semi-on-policy (MInTRL eq. 10).

    Returns ``[N]``; a group whose control rewards are all equal to a rollout's reward gives exactly 0.
    """
    return rewards - control_baseline(rewards, group_index, is_control, num_groups)[group_index]


def anchor_logprobs(rollout_logprobs: torch.Tensor, intervention_mask: torch.Tensor, kappa: float | None) -> torch.Tensor:
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


def regression_loss(log_ratio: torch.Tensor, advantages: torch.Tensor, beta: float) -> torch.Tensor:
    """Advantage-regression loss ``mean_i (beta * log_ratio_i - A_i)^2`` (MInTRL eq. 7, ``beta_2``).

    Args:
        log_ratio: ``[N]`` anchored sequence log-ratios. advantages: ``[N]``. beta: ``beta_2 > 0``.

    Returns:
        scalar loss. Its gradient w.r.t. ``log_ratio_i`` is ``2 beta (beta log_ratio_i - A_i) / N``:
        at ``log_ratio = 0`` it raises the likelihood of positive-advantage rollouts.
    """
    return (beta * log_ratio - advantages).pow(2).mean()
