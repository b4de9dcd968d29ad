"""Rollout-time log-probs in the trainer's own numerics, and the proximal policy of a stale batch.

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

That adoption is right only at staleness 0 (:func:`batch_staleness`): the trainer's weights are then
the ones that sampled the batch. The behaviour log-probs of a batch are always its sampling
version's: at staleness > 0 the trainer's recompute (its current weights, no gradient, before the
first update) is the *proximal* policy of decoupled PPO (AReaL, Fu et al. 2025), kept beside the
behaviour log-probs in ``batch.extras`` (:data:`mintrl.objective.off_policy.PROXIMAL_LOGPROBS`) and
never written over them; the ratio-based objectives take PPO's ratio against it and weight the
behaviour -> proximal shift (``objective.off_policy_correction``). It logs
``train/proximal_shift_abs`` / ``_kl`` (the same measures, proximal against behaviour, nats per
policy token).
"""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.objective.off_policy import PROXIMAL_LOGPROBS

MODES = ("auto", "always", "never")
ADOPT, PROXIMAL = "adopt", "proximal"  # what a recompute of a batch's log-probs is (recompute_role)


def batch_staleness(global_step: int, batch_step: int) -> int:
    """Optimizer steps between the weights that sampled a batch and the trainer's:
    ``global_step - batch_step`` (``RolloutBatch.step``); 0 for a batch of unknown version
    (``batch_step < 0``: built by hand).

    Raises:
        ValueError: ``batch_step > global_step`` (a batch from weights the trainer does not have yet).
    """
    if batch_step < 0:
        return 0
    if batch_step > global_step:
        raise ValueError(
            f"a rollout batch generated at optimizer step {batch_step} reached the trainer at step {global_step}"
        )
    return global_step - batch_step


def recompute_role(mode: str, sampler_exact: bool, trainer_precision: str, staleness: int) -> str | None:
    """What the trainer's no-grad recompute of a batch's log-probs is, if it runs.

    Args:
        mode: ``module.recompute_rollout_logprobs`` (``never``: no recompute, stale or not; the
            ratio is then taken against the behaviour log-probs).
        sampler_exact, trainer_precision: see :func:`needs_recompute`.
        staleness: :func:`batch_staleness` (optimizer steps).

    Returns:
        :data:`PROXIMAL` at staleness > 0 (the current weights are not the sampling version's);
        :data:`ADOPT` at staleness 0 when :func:`needs_recompute` (the sampling version's weights in
        the trainer's numerics replace the sampler's values); None otherwise.
    """
    if mode == "never":
        return None
    if staleness > 0:
        return PROXIMAL
    return ADOPT if needs_recompute(mode, sampler_exact, trainer_precision) else None


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


def sampler_mismatch(
    trainer_lp: torch.Tensor, sampler_lp: torch.Tensor, mask: torch.Tensor, prefix: str = "train/sampler_mismatch"
) -> dict[str, float]:
    """Mean absolute log-prob difference and the k3 KL estimate per masked token (nats).

    Args:
        trainer_lp, sampler_lp: ``[N, L]`` float32 log-probs of the sampled tokens.
        mask: ``[N, L]`` bool, the tokens counted (policy-sampled ones).
        prefix: the keys' prefix (``train/proximal_shift`` for a stale batch's proximal recompute).

    Returns:
        ``{prefix + "_abs", prefix + "_kl"}``; both 0 with no token.
    """
    d = (trainer_lp - sampler_lp)[mask].double()  # [T]
    if d.numel() == 0:
        return {f"{prefix}_abs": 0.0, f"{prefix}_kl": 0.0}
    return {f"{prefix}_abs": float(d.abs().mean()), f"{prefix}_kl": float((d.exp() - d - 1).mean())}


def adopt_trainer_logprobs(batch: RolloutBatch, fresh: torch.Tensor) -> dict[str, float]:
    """Replace ``batch.rollout_logprobs`` on scored tokens (policy, intervention, guide) by the
    trainer's ``fresh`` ``[N, L]`` values, and ``batch.behaviour_logprobs`` on policy tokens (the
    policy wrote them; an intervention's or guide's own behaviour log-probs stay). New tensors: the
    sampler's values are not written over in place. Only at staleness 0 (:data:`ADOPT`): ``fresh``
    must come from the weights that sampled the batch.

    Returns:
        :func:`sampler_mismatch` of the policy tokens, before the replacement.
    """
    policy = batch.policy_mask
    stats = sampler_mismatch(fresh, batch.rollout_logprobs, policy)
    behaviour = batch.behaviour_logprobs
    batch.rollout_logprobs = torch.where(batch.scored_mask, fresh, batch.rollout_logprobs)
    batch.behaviour_logprobs = torch.where(policy, fresh, behaviour)
    return stats


def keep_proximal_logprobs(batch: RolloutBatch, fresh: torch.Tensor) -> dict[str, float]:
    """Store the trainer's ``fresh`` ``[N, L]`` log-probs of a stale batch as its proximal policy's
    (``batch.extras[PROXIMAL_LOGPROBS]``, read by :func:`mintrl.objective.off_policy.proximal_logprobs`);
    the behaviour log-probs (``rollout_logprobs``, ``behaviour_logprobs``) stay the sampling version's.

    Returns:
        :func:`sampler_mismatch` of the policy tokens, proximal against behaviour, as
        ``train/proximal_shift_abs`` / ``_kl``.
    """
    batch.extras[PROXIMAL_LOGPROBS] = fresh
    return sampler_mismatch(fresh, batch.rollout_logprobs, batch.policy_mask, "train/proximal_shift")


def use_trainer_logprobs(batch: RolloutBatch, fresh: torch.Tensor, role: str) -> dict[str, float]:
    """:func:`adopt_trainer_logprobs` (``role`` :data:`ADOPT`) or :func:`keep_proximal_logprobs`
    (:data:`PROXIMAL`).

    Raises:
        ValueError: another ``role``.
    """
    if role == ADOPT:
        return adopt_trainer_logprobs(batch, fresh)
    if role == PROXIMAL:
        return keep_proximal_logprobs(batch, fresh)
    raise ValueError(f"unknown role of recomputed log-probs {role!r}: {ADOPT!r} or {PROXIMAL!r}")
