"""``objective=mentor`` / ``intervention_grpo``: GRPO on semi-on-policy rollouts (the baselines
MInTRL argues against, section 2.2 and Table 1).

- ``mentor`` follows MENTOR's optimisation (Jiang et al. 2025, arXiv 2510.04140, eqs. 9-11 and
  its released code): PPO ratios against the rollout-time policy on *every* token (expert tokens
  included, i.e. log-probs recomputed by the current actor), clip 0.2 / 0.28, dual clip 3, token
  mean, no KL; control rows get GRPO advantages within the control rollouts, guided rows
  ``alpha * max(r - mean_control, 0)`` with ``alpha`` decaying from 1 to 0 on a cosine over
  ``alpha_decay_steps``. What differs from MENTOR: its guided rollouts mix policy and expert
  token by token at high-entropy positions (speculative sampling); here they are MInTRL's
  judge-reviewed chunks with short corrections, so the comparison isolates the objective.
- ``intervention_grpo`` is MInTRL section 2.2's "natural first choice": group-relative advantages
  over all rollouts and per-token importance ratios against the *behaviour* policy (the
  intervention's own log-probs on intervention tokens).

Both log the importance weights ``pi_theta / mu`` of intervention tokens (``is/token_*``) and the
accumulated per-sequence weights of guided rollouts (``is/seq_*``): mean, max, effective sample size.
"""

from __future__ import annotations

import math

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_choice, check_int
from mintrl.objective.advantages import mentor_advantages
from mintrl.objective.aggregation import StepTotals
from mintrl.objective.base import ObjectiveOutput
from mintrl.objective.grpo import GRPO
from mintrl.objective.policy_gradient import importance_weight_stats

IMPORTANCE = ("rollout", "behaviour")
SEMI_ADVANTAGES = ("group", "mentor")


def cosine_decay(step: int, decay_steps: int) -> float:
    """``0.5 (1 + cos(pi min(step / decay_steps, 1)))``: 1 at step 0, 0 from ``decay_steps`` on."""
    if decay_steps <= 0:
        return 0.0
    return 0.5 * (1.0 + math.cos(math.pi * min(step / decay_steps, 1.0)))


class InterventionGRPO(GRPO):
    """GRPO over control + semi-on-policy rollouts (see module docstring).

    Args:
        importance: ``rollout`` (ratios against the rollout-time policy pi_t on every token, MENTOR;
            a stale batch's proximal policy, as GRPO) or ``behaviour`` (against the policy that wrote
            each token: pi_t or the intervention; ``off_policy_correction`` must then be ``none``).
        semi_advantage: ``group`` (GRPO over the whole group) or ``mentor`` (see
            :func:`mintrl.objective.advantages.mentor_advantages`).
        alpha_decay_steps: optimizer steps over which MENTOR's ``alpha`` decays to 0.
        **grpo: :class:`mintrl.objective.grpo.GRPO` knobs.

    Raises:
        ValueError: a bad knob (field named), or ``off_policy_correction`` other than ``none`` with
            ``importance=behaviour``.
    """

    def __init__(
        self, importance: str = "rollout", semi_advantage: str = "mentor", alpha_decay_steps: int = 120, **grpo
    ):
        super().__init__(**grpo)
        check_choice("objective.importance", importance, IMPORTANCE)
        check_choice("objective.semi_advantage", semi_advantage, SEMI_ADVANTAGES)
        check_int("objective.alpha_decay_steps", alpha_decay_steps)
        if importance == "behaviour" and self.off_policy.kind != "none":
            raise ValueError(
                f"objective.off_policy_correction={self.off_policy.kind} needs objective.importance=rollout: "
                "importance=behaviour already takes every ratio against the behaviour policy"
            )
        self.importance, self.semi_advantage, self.alpha_decay_steps = importance, semi_advantage, alpha_decay_steps

    def advantages(self, batch: RolloutBatch, rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``[N]`` advantages: group-relative (``semi_advantage=group``), or MENTOR's with the
        step's ``objective/mentor_alpha`` (cosine decay over ``alpha_decay_steps``)."""
        if self.semi_advantage == "group":
            return super().advantages(batch, rows)
        alpha = cosine_decay(max(batch.step, 0), self.alpha_decay_steps)
        adv = mentor_advantages(
            batch.rewards, batch.group_index, batch.is_control, batch.num_groups, rows, alpha, self.eps
        )
        return adv, {"objective/mentor_alpha": alpha}

    def old_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """``importance=behaviour``: the policy that wrote each token (intervention tokens: the
        intervention's own log-probs; never the proximal policy); ``rollout``: GRPO's (proximal)."""
        return batch.behaviour_logprobs if self.importance == "behaviour" else super().old_logprobs(batch)

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        out = super().__call__(batch, logprobs, totals)
        log_w = logprobs.detach() - batch.behaviour_logprobs  # [n, L] log pi_theta / mu
        out.metrics.update(importance_weight_stats(log_w, batch.intervention_mask & batch.loss_mask, "is/token"))
        guided = ~batch.is_control & batch.intervention_mask.any(-1)  # [n]
        seq_log_w = (log_w * batch.response_mask).sum(-1)  # [n]
        out.metrics.update(importance_weight_stats(seq_log_w, guided, "is/seq"))
        return out
