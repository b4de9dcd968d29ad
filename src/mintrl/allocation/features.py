"""State features of a candidate anchor (RAIL's feature table, adapted to single-turn text)."""

from __future__ import annotations

import math
from typing import Sequence

FEATURES = (
    "anchor_entropy",
    "anchor_step",
    "anchor_step_fraction",
    "budget_used_fraction",
    "reward_mean",
    "reward_std",
    "distance_to_half",
    "failed_anchors",
    "pool_entropy",
    "answer_diversity",
)


def anchor_features(
    anchor_entropy: float,
    anchor_step: int,
    num_steps: int,
    budget_used_fraction: float,
    group_rewards: Sequence[float],
    failed_anchors: int,
    pool_entropy: float,
    final_answers: Sequence[str | None],
) -> list[float]:
    """The controller's state ``z`` for one anchor, in :data:`FEATURES` order.

    Args:
        anchor_entropy: entropy (nats) of the policy's next-token distribution at the anchor.
        anchor_step: index of the step the anchor starts; num_steps: steps in that response.
        budget_used_fraction: rollouts used / rollouts allowed this optimizer step.
        group_rewards: rewards of the prompt's group before the branch (NaN = no reward, skipped).
        failed_anchors: earlier branches of this prompt whose realized gain was not positive.
        pool_entropy: mean token entropy (nats) over the group's responses.
        final_answers: the group's extracted final answers (None: none), for answer diversity =
            distinct answers / group size (RAIL's tool-sequence diversity, for text).

    Returns:
        10 floats; the reward mean/std are 0 for a group with no valid reward.
    """
    rewards = [r for r in group_rewards if not math.isnan(r)]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0
    diversity = len({a for a in final_answers}) / len(final_answers) if final_answers else 0.0
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
        diversity,
    ]
