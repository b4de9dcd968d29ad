"""Advantages: group-relative (GRPO, Dr. GRPO) and control-baseline (MInTRL), robust to missing rewards.

Every function here takes a ``valid`` mask ``[N]``: rows whose reward is missing (NaN) or whose
response is empty. Invalid rows never enter a group's statistics and get advantage 0; the
objectives also drop them from the loss (no signal at all).
"""

from __future__ import annotations

import torch


def valid_rows(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[N]`` bool: finite reward and at least one response token.

    Args:
        rewards: ``[N]`` float (NaN = no reward). response_mask: ``[N, L]`` bool.
    """
    return torch.isfinite(rewards) & response_mask.any(-1)


def _group_sum(values: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
    # values [N] -> [G]
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group_index, values)


def _group_mean(
    rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int, members: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Float64 mean of each group's members, exact where the members are all equal.

    The float32 mean of equal values can be one ulp off (``[0.95] * 8``), and that residue divided
    by a std of ~1e-7 gave every member an advantage of 0.06. Here the statistics are
    float64 and a group whose members are all equal gets their common value as its mean, so
    ``r - mean`` is exactly 0 for any group size and value.

    Args:
        rewards: ``[N]`` float, NaN allowed off ``members``. group_index: ``[N]`` int64 in ``[0, G)``.
        num_groups: ``G``. members: ``[N]`` bool, the rows that enter the statistics.

    Returns:
        ``(r [N] float64 with 0 off members, mean [G] float64 (0 for an empty group), count [G] float64)``.
    """
    r = torch.where(members, rewards, torch.zeros_like(rewards)).to(torch.float64)  # [N], NaN-free
    w = members.to(torch.float64)  # [N]
    count = _group_sum(w, group_index, num_groups)  # [G]
    mean = _group_sum(r * w, group_index, num_groups) / count.clamp(min=1)  # [G]
    inf = torch.full_like(r, float("inf"))
    lo = torch.full_like(mean, float("inf")).scatter_reduce(0, group_index, torch.where(members, r, inf), "amin")
    hi = torch.full_like(mean, -float("inf")).scatter_reduce(0, group_index, torch.where(members, r, -inf), "amax")
    mean = torch.where((count > 0) & (lo == hi), hi, mean)  # all-equal groups: the common value, exactly
    return r, mean, count


def group_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    scale_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO group-relative advantages ``(r_i - mean_g) / (std_g + eps)`` (Shao et al. 2024, eq. 3
    of the GRPO paper); ``scale_std=False`` gives Dr. GRPO's ``r_i - mean_g`` (Liu et al. 2025).

    Mean and std (Bessel-corrected, 0 for a single member) are over the valid members of each
    group, computed in float64. Groups whose valid rewards are all equal (any size, any value,
    e.g. ``[0.95] * 64``) and singleton groups give exactly 0; invalid rows give 0 and do not
    move their group's statistics.

    Args:
        rewards: ``[N]`` float, NaN allowed on invalid rows. group_index: ``[N]`` int64 in ``[0, G)``.
        num_groups: ``G``. valid: ``[N]`` bool (see :func:`valid_rows`). eps: added to the std.

    Returns:
        ``[N]`` float32 advantages, always finite.
    """
    r, mean, count = _group_mean(rewards, group_index, num_groups, valid)
    dev = torch.where(valid, r - mean[group_index], torch.zeros_like(r))  # [N] float64
    if not scale_std:
        return dev.to(torch.float32)
    var = _group_sum(dev.pow(2), group_index, num_groups) / (count - 1).clamp(min=1)  # [G]
    return (dev / (var.sqrt()[group_index] + eps)).to(torch.float32)


def control_baseline(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    is_control: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Value baseline of each prompt: the mean reward of its valid control rollouts (MInTRL
    eq. 10, the large-``beta_1`` limit of eq. 9).

    Args:
        rewards: ``[N]`` float. group_index: ``[N]`` int64 in ``[0, G)``.
        is_control: ``[N]`` bool, True for pure on-policy control rollouts.
        num_groups: ``G``. valid: ``[N]`` bool, default all rows with a finite reward.

    Returns:
        ``(baseline [G] float32, defined [G] bool)``: ``defined`` is False for a group without any
        valid control rollout; its baseline is 0 there and its rows must get no signal. Equal
        control rewards give their common value exactly.
    """
    baseline, defined = _control_baseline64(rewards, group_index, is_control, num_groups, valid)
    return baseline.to(torch.float32), defined


def _control_baseline64(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    is_control: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # control_baseline in float64: (baseline [G] float64, defined [G] bool)
    if valid is None:
        valid = torch.isfinite(rewards)
    _, mean, count = _group_mean(rewards, group_index, num_groups, is_control & valid)
    return mean, count > 0


def control_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    is_control: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``A(x, y) = r(x, y) - V_ctrl(x)`` for every rollout, control and semi-on-policy (MInTRL eq. 10).

    Returns:
        ``(advantages [N], has_signal [N] bool)``: rows that are invalid or whose group has no
        valid control rollout get advantage 0 and ``has_signal`` False. A group whose control
        rewards all equal a rollout's reward gives exactly 0 for that rollout.
    """
    if valid is None:
        valid = torch.isfinite(rewards)
    baseline, defined = _control_baseline64(rewards, group_index, is_control, num_groups, valid)
    has_signal = valid & defined[group_index]
    r = torch.where(valid, rewards, torch.zeros_like(rewards)).to(torch.float64)
    adv = torch.where(has_signal, r - baseline[group_index], torch.zeros_like(r))
    return adv.to(torch.float32), has_signal


def mentor_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    is_control: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    alpha: float,
    eps: float = 1e-6,
) -> torch.Tensor:
    """MENTOR's advantages (Jiang et al. 2025, arXiv 2510.04140, eqs. 10-11): control (on-policy)
    rows get GRPO advantages within the control rollouts of their group; intervention-guided rows
    get ``alpha * max(r - mean_control, 0)`` (failures are not penalised, no std scaling).

    Args:
        rewards, group_index, is_control, num_groups, valid: as in :func:`group_advantages`.
        alpha: weight of the guided rows' advantages (MENTOR decays it from 1 to 0).

    Returns:
        ``[N]`` float32, 0 on invalid rows and in groups without a valid control rollout; exactly 0
        for control rows whose group's control rewards are all equal, and for guided rows whose
        reward equals that common value.
    """
    control_adv = group_advantages(rewards, group_index, num_groups, valid & is_control, scale_std=True, eps=eps)
    baseline, defined = _control_baseline64(rewards, group_index, is_control, num_groups, valid)
    r = torch.where(valid, rewards, torch.zeros_like(rewards)).to(torch.float64)
    guided = alpha * (r - baseline[group_index]).clamp(min=0)
    guided = torch.where(valid & ~is_control & defined[group_index], guided, torch.zeros_like(guided))
    return torch.where(is_control, control_adv, guided.to(torch.float32))


def first_error_token_advantages(
    sequence_advantages: torch.Tensor,
    first_error: torch.Tensor,
    response_start: torch.Tensor,
    width: int,
    before: float,
    after: float,
) -> torch.Tensor:
    """Per-token advantages with first-error credit (after Cliff: Ko et al. 2026,
    arXiv 2606.25524, whose first "cliff" token is where a failed trace turns towards failure).

    A row with a marked first error (``first_error >= 0``, response token offset ``e``) gets
    ``+before`` on the columns of response tokens ``< e`` and ``-after`` from token ``e`` on; every
    other row keeps its sequence advantage on every column. Which columns are response tokens is
    the caller's mask (the loss mask); prompt and padding columns get values that are never read.

    Args:
        sequence_advantages: ``[N]`` float, e.g. :func:`group_advantages`.
        first_error: ``[N]`` int64, response token offset of the first wrong step, -1 for none.
        response_start: ``[N]`` int64, column of each row's first response token.
        width: ``L``, columns. before, after: credit magnitudes (>= 0), in the units of
            ``sequence_advantages`` (reward standard deviations for GRPO with std scaling).

    Returns:
        ``[N, L]`` float32.
    """
    cols = torch.arange(width, device=first_error.device)[None, :]  # [1, L]
    marked = (first_error >= 0)[:, None]  # [N, 1]
    before_error = cols < (response_start + first_error)[:, None]  # [N, L]
    credit = torch.where(before_error, float(before), -float(after)).to(torch.float32)  # [N, L]
    seq = sequence_advantages.to(torch.float32)[:, None].expand(-1, width)  # [N, L]
    return torch.where(marked, credit, seq)


def unmarked_failed_errors(rewards: torch.Tensor, first_error: torch.Tensor) -> torch.Tensor:
    """Rows that failed (finite reward below 1, :func:`mintrl.rollout.error_location.is_failed`) and have
    no marked first error (``first_error < 0``): the rollouts ``objective.unmarked=after`` treats as
    wrong from their first token (docs/guided.md, "First-error credit collapsed").

    Args:
        rewards: ``[N]`` float, NaN for a missing reward (neither failed nor passed).
        first_error: ``[N]`` int64, response token offset of the first wrong step, -1 for none.

    Returns:
        ``[N]`` bool.
    """
    return torch.isfinite(rewards) & (rewards < 1.0) & (first_error < 0)
