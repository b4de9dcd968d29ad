"""Rollout-time log-probs in the trainer's own numerics.

A sampler that does not compute log-probs as the trainer does (a bf16 copy of the policy, a vLLM
engine, or any sampler next to a bf16-mixed trainer) records ``log pi_t`` with a small error per
token. The objectives use those values as the anchor (MInTRL, eq. 4 of its paper), as the
denominator of PPO's ratio (GRPO's old log-probs) and inside OPD's reverse KL, where the error
would be summed over the response. As the large frameworks do (verl's ``recompute_log_prob``,
TRL's old log-probs), the trainer recomputes them with one no-grad forward of the unchanged weights
before the first update of the batch, and logs the mismatch it removed:

- ``train/sampler_mismatch_abs``: mean ``|log p_trainer - log p_sampler|`` over policy-sampled
  tokens (nats per token);
- ``train/sampler_mismatch_kl``: the per-token KL(sampler || trainer) estimate
  ``E[exp(d) - d - 1]`` with ``d = log p_trainer - log p_sampler`` (Schulman's k3; the tokens were
  drawn from the sampler), nats per token.
"""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch

MODES = ("auto", "always", "never")


def needs_recompute(mode: str, sampler_exact: bool, trainer_precision: str) -> bool:
    """Whether the trainer recomputes a batch's rollout log-probs.

    Args:
        mode: ``"always"``, ``"never"`` or ``"auto"``: when the sampler's log-probs are not the
            trainer's numerics, i.e. the sampler is not the fp32 policy itself
            (``sampler_exact`` False) or the trainer does not run in fp32 (``trainer_precision``
            other than Lightning's ``"32-true"`` / ``"32"``).
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    return not sampler_exact or str(trainer_precision) not in ("32-true", "32")


def sampler_mismatch(trainer_lp: torch.Tensor, sampler_lp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean absolute log-prob difference and the k3 KL estimate per masked token (nats).

    Args:
        trainer_lp, sampler_lp: ``[N, L]`` float32 log-probs of the sampled tokens.
        mask: ``[N, L]`` bool, the tokens counted (policy-sampled ones).

    Returns:
        ``{"train/sampler_mismatch_abs", "train/sampler_mismatch_kl"}``; both 0 with no token.
    """
    d = (trainer_lp - sampler_lp)[mask].double()  # [T]
    if d.numel() == 0:
        return {"train/sampler_mismatch_abs": 0.0, "train/sampler_mismatch_kl": 0.0}
    return {
        "train/sampler_mismatch_abs": float(d.abs().mean()),
        "train/sampler_mismatch_kl": float((d.exp() - d - 1).mean()),
    }


def adopt_trainer_logprobs(batch: RolloutBatch, fresh: torch.Tensor) -> dict[str, float]:
    """Replace ``batch.rollout_logprobs`` on scored tokens (policy, intervention, guide) by the
    trainer's ``fresh`` ``[N, L]`` values, and ``batch.behaviour_logprobs`` on policy tokens (the
    policy wrote them; an intervention's or guide's own behaviour log-probs stay). New tensors: the
    sampler's values are not written over in place.

    Returns:
        :func:`sampler_mismatch` of the policy tokens, before the replacement.
    """
    policy = batch.policy_mask
    stats = sampler_mismatch(fresh, batch.rollout_logprobs, policy)
    behaviour = batch.behaviour_logprobs
    batch.rollout_logprobs = torch.where(batch.scored_mask, fresh, batch.rollout_logprobs)
    batch.behaviour_logprobs = torch.where(policy, fresh, behaviour)
    return stats
