"""Scalar statistics of a step's rollouts (what the TensorBoard curves show)."""

from __future__ import annotations

import math

from mintrl.core.batch import Rollout


def _mean(values) -> float:
    """Mean of the finite values (NaN rewards = no reward are skipped); NaN when there are none."""
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def rollout_stats(rollouts: list[Rollout], gen_seconds: float, white_box: bool = False) -> dict[str, float]:
    """Rewards of control and semi-on-policy rollouts and their gap, off-policy token fraction,
    reviews / revisions / unparseable verdicts, response length, truncated responses (count, hit
    the length limit), missing rewards (count) and generation throughput; the mean index of the
    revised step within its chunk; with a white-box intervention (``white_box``: its behaviour
    log-probs are real), the forward KL ``KL(pi_JI || pi_t)`` on intervention tokens, estimated as
    the mean of ``log pi_JI(y) - log pi_t(y)`` over the tokens ``pi_JI`` wrote.

    Token counts, the response length and every fraction count the tokens the agent wrote (policy
    and intervention); an episode's environment tokens are left out (:mod:`mintrl.rollout.episodes`
    logs them as ``episode/observation_tokens``).

    Keys of quantities undefined for the step (e.g. the semi reward when there are no semi
    rollouts) are omitted rather than logged as NaN.
    """
    control = [r for r in rollouts if r.is_control]
    semi = [r for r in rollouts if not r.is_control]
    tokens = sum(r.agent_tokens for r in rollouts)  # policy + intervention tokens (environment tokens excluded)
    off = sum(sum(r.intervention) for r in rollouts)
    stats = {
        "reward/all": _mean(r.reward for r in rollouts),
        "reward/control": _mean(r.reward for r in control),
        "rollout/response_len": tokens / max(len(rollouts), 1),
        "rollout/offpolicy_frac": off / max(tokens, 1),
        "rollout/finished_frac": _mean(float(r.finished) for r in rollouts),
        "rollout/truncated": float(sum(not r.finished for r in rollouts)),
        "reward/missing": float(sum(math.isnan(r.reward) for r in rollouts)),
        "perf/gen_tokens_per_s": tokens / max(gen_seconds, 1e-9),
        "perf/gen_seconds": gen_seconds,
    }
    if semi:
        stats["reward/semi"] = _mean(r.reward for r in semi)
        stats["reward/gap"] = stats["reward/semi"] - stats["reward/control"]
        stats["judge/reviews_per_rollout"] = _mean(r.reviews for r in semi)
        stats["judge/interventions_per_rollout"] = _mean(r.revisions for r in semi)
        stats["judge/keep"] = float(
            sum(r.reviews - r.revisions - r.unparseable - r.failed - r.early_cuts for r in semi)
        )
        stats["judge/early_cuts"] = float(sum(r.early_cuts for r in semi))
        stats["judge/revise"] = float(sum(r.revisions for r in semi))
        stats["judge/unparseable"] = float(sum(r.unparseable for r in semi))
        stats["judge/failed"] = float(sum(r.failed for r in semi))
        stats["judge/revision_step_index"] = _mean(float(k) for r in semi for k in r.revision_steps)
        semi_tokens = sum(r.agent_tokens for r in semi)
        stats["rollout/offpolicy_frac_semi"] = off / max(semi_tokens, 1)
        iv = [lp for r in semi for lp, f in zip(r.logprobs, r.intervention) if f and math.isfinite(lp)]
        if iv:
            stats["rollout/intervention_logprob"] = _mean(iv)
            behaviour = [b for r in semi for b, f in zip(r.behaviour, r.intervention) if f]
            stats["rollout/intervention_self_logprob"] = _mean(behaviour)  # the kappa estimate (App. H)
            if white_box:
                stats["judge/forward_kl"] = _mean(
                    b - lp for r in semi for b, lp, f in zip(r.behaviour, r.logprobs, r.intervention) if f
                )
    return {k: float(v) for k, v in stats.items() if not math.isnan(v)}


def _count(values) -> float:
    """How many of ``values`` are not NaN (the denominator of :func:`_mean`)."""
    return float(sum(not math.isnan(v) for v in values))


def rollout_stat_weights(rollouts: list[Rollout], prompts: int | None = None) -> dict[str, float]:
    """The denominator of each mean :func:`rollout_stats` reports for ``rollouts`` (rollouts,
    tokens or steps that the mean is over, as counts), under the same key, so that data-parallel
    ranks' means combine into the mean over all their rollouts
    (:func:`mintrl.training.step_logging.combine_ranks`). With ``prompts`` (the step's prompt
    count) also the denominators of :func:`rollout_counts`' per-prompt keys. Keys of counts and of
    quantities that are not means are absent."""
    control = [r for r in rollouts if r.is_control]
    semi = [r for r in rollouts if not r.is_control]
    tokens = float(sum(r.agent_tokens for r in rollouts))
    weights = {
        "reward/all": _count(r.reward for r in rollouts),
        "reward/control": _count(r.reward for r in control),
        "rollout/response_len": float(len(rollouts)),
        "rollout/offpolicy_frac": tokens,
        "rollout/finished_frac": float(len(rollouts)),
    }
    if semi:
        weights["reward/semi"] = _count(r.reward for r in semi)
        weights["judge/reviews_per_rollout"] = float(len(semi))
        weights["judge/interventions_per_rollout"] = float(len(semi))
        weights["judge/revision_step_index"] = float(sum(len(r.revision_steps) for r in semi))
        weights["rollout/offpolicy_frac_semi"] = float(sum(r.agent_tokens for r in semi))
        iv = [lp for r in semi for lp, f in zip(r.logprobs, r.intervention) if f and math.isfinite(lp)]
        weights["rollout/intervention_logprob"] = _count(iv)
        weights["rollout/intervention_self_logprob"] = _count(
            b for r in semi for b, f in zip(r.behaviour, r.intervention) if f
        )
        weights["judge/forward_kl"] = _count(
            b - lp for r in semi for b, lp, f in zip(r.behaviour, r.logprobs, r.intervention) if f
        )
    if prompts is not None:
        weights["allocation/rollouts_per_prompt"] = weights["allocation/generated_per_prompt"] = float(prompts)
    return weights


def rollout_counts(kept: int, generated: int, prompts: int) -> dict[str, float]:
    """A step's rollout counts: ``allocation/rollouts_per_prompt`` (rollouts in the batch / prompts),
    ``allocation/budget_used`` (rollouts generated, count) and ``allocation/generated_per_prompt``
    (generated / prompts); the x axis of RAIL's performance-vs-rollouts comparison (RAIL sec. 4)."""
    return {
        "allocation/rollouts_per_prompt": kept / max(prompts, 1),
        "allocation/budget_used": float(generated),
        "allocation/generated_per_prompt": generated / max(prompts, 1),
    }


def kappa_estimate(behaviour_logprobs, intervention_mask) -> float:
    """MInTRL Appendix H's choice of ``kappa``: the mean log-prob (nats) the intervention model
    gave its own intervention tokens.

    Args:
        behaviour_logprobs: ``[N, L]`` tensor (``RolloutBatch.behaviour_logprobs``).
        intervention_mask: ``[N, L]`` bool.

    Returns:
        the mean over intervention tokens, NaN when there are none.
    """
    values = behaviour_logprobs[intervention_mask]
    return float(values.mean()) if values.numel() else float("nan")


def guide_stats(rollouts, guided) -> dict[str, float]:
    """A step's guided-rollout statistics: ``guide/rollouts`` (count), ``guide/token_fraction``
    (guide tokens / all agent-written and guide response tokens of the step, environment tokens
    excluded) and ``guide/reward`` (mean reward of the guided rollouts with one; 0 when none).

    Args:
        rollouts: the step's other rollouts. guided: its guided rollouts (:mod:`mintrl.guide`).
    """
    everything = list(rollouts) + list(guided)
    tokens = sum(r.agent_tokens for r in everything)
    guide_tokens = sum(r.guide_tokens for r in everything)
    rewards = [r.reward for r in guided if math.isfinite(r.reward)]
    return {
        "guide/rollouts": float(len(guided)),
        "guide/token_fraction": guide_tokens / max(tokens, 1),
        "guide/reward": sum(rewards) / len(rewards) if rewards else 0.0,
    }


def guide_stat_weights(rollouts, guided) -> dict[str, float]:
    """The denominators of :func:`guide_stats`' means, as :func:`rollout_stat_weights`:
    ``guide/token_fraction`` over the step's response tokens, ``guide/reward`` over the guided
    rollouts with a reward (counts)."""
    everything = list(rollouts) + list(guided)
    return {
        "guide/token_fraction": float(sum(r.agent_tokens for r in everything)),
        "guide/reward": float(sum(math.isfinite(r.reward) for r in guided)),
    }
