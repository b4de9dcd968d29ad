"""State features of a candidate anchor (RAIL's state-feature table, Appendix B.3.2).

One feature vector serves both rollout engines; two entries change meaning with the engine:

- single-turn text (:mod:`mintrl.rollout.single_turn`): the anchor is a step boundary, its
  "round" the step index within the response, its diversity the answer diversity (distinct final
  answers / group size);
- multi-turn episodes (:mod:`mintrl.rollout.episodes`): the anchor is a turn boundary, its round
  the turn index within the episode (the paper's "anchor round"), its diversity the tool-sequence
  diversity (distinct action-kind sequences / group size), as in the paper's table.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Hashable, Sequence

if TYPE_CHECKING:
    from mintrl.core.batch import Rollout

FEATURES = (
    "anchor_entropy",
    "anchor_step",  # the step (single-turn) or turn (episodes) index of the anchor: RAIL's anchor round
    "anchor_step_fraction",  # anchor_step / steps (turns) of the parent: RAIL's anchor round fraction
    "budget_used_fraction",
    "reward_mean",
    "reward_std",
    "distance_to_half",
    "failed_anchors",
    "pool_entropy",
    "diversity",  # answer diversity (single-turn) or tool-sequence diversity (episodes)
)


def answer_diversity(final_answers: Sequence[str | None]) -> float:
    """Distinct final answers / group size (None, no answer, counts as one answer); 0.0 for an
    empty group. RAIL's tool-sequence diversity, for single-turn text."""
    return len(set(final_answers)) / len(final_answers) if final_answers else 0.0


def tool_sequence_diversity(kind_sequences: Sequence[Sequence[Hashable]]) -> float:
    """RAIL's tool-sequence diversity: distinct action-kind sequences / pool size (0.0 for an empty
    pool).

    Args:
        kind_sequences: one sequence per episode of the pool, the kinds of its actions in order
            (:attr:`mintrl.env.base.StepResult.action_kinds`, e.g. ``("run", "answer")``).
    """
    return len({tuple(s) for s in kind_sequences}) / len(kind_sequences) if kind_sequences else 0.0


def pool_entropy(rollouts: Sequence[Rollout]) -> float:
    """Mean surprisal ``-log pi_t`` (nats) over the policy-written response tokens of a pool, a
    one-sample estimate of its average token entropy (RAIL's "average pool entropy"); intervention
    and environment tokens (an episode's observation turns) are left out. 0.0 for a pool with no
    policy token."""
    values = [
        -lp
        for r in rollouts
        for lp, iv, env in zip(r.logprobs, r.intervention, r.environment)
        if not iv and not env and not math.isnan(lp)
    ]
    return sum(values) / len(values) if values else 0.0


def anchor_features(
    anchor_entropy: float,
    anchor_step: int,
    num_steps: int,
    budget_used_fraction: float,
    group_rewards: Sequence[float],
    failed_anchors: int,
    pool_entropy: float,
    diversity: float,
) -> list[float]:
    """The controller's state ``z`` for one anchor, in :data:`FEATURES` order (RAIL's state table).

    Args:
        anchor_entropy: entropy (nats) of the policy's next-token distribution at the anchor.
        anchor_step: index of the step (single-turn) or turn (episodes) the anchor starts;
            num_steps: steps (turns) of that response.
        budget_used_fraction: rollouts used / rollouts allowed this optimizer step.
        group_rewards: rewards of the prompt's group before the branch (NaN = no reward, skipped).
        failed_anchors: earlier branches of this prompt whose realized gain was not positive.
        pool_entropy: mean token entropy (nats) over the group's responses (:func:`pool_entropy`).
        diversity: :func:`answer_diversity` (single-turn) or :func:`tool_sequence_diversity`
            (episodes) of the group.

    Returns:
        10 floats; the reward mean/std are 0 for a group with no valid reward, the distance to 0.5
        is then 0.5.
    """
    rewards = [r for r in group_rewards if not math.isnan(r)]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0
    return [
        float(anchor_entropy),
        float(anchor_step),
        anchor_step / max(num_steps, 1),
        float(budget_used_fraction),
        mean,
        std,
        abs(mean - 0.5),
        float(failed_anchors),
        float(pool_entropy),
        float(diversity),
    ]
