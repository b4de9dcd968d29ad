"""Spending a step's whole rollout budget (``allocation.spend_all``): what an allocation left unused
goes to fresh rollouts spread over the prompts, so that rows compared "at equal budget" generate
exactly ``allocation.budget_per_step`` rollouts per step (RAIL sec. 4 compares success against
rollouts generated; a gated controller may spend less than its cap)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from mintrl.allocation.branching import Brancher
    from mintrl.allocation.budget import RolloutBudget
    from mintrl.core.batch import Rollout
    from mintrl.data.base import PromptItem


def top_up_plan(counts: dict[int, int], extra: int) -> dict[int, int]:
    """How many fresh rollouts each group gets: one at a time to the group with the fewest
    rollouts so far (the lowest group index on a tie), ``extra`` in all.

    Args:
        counts: rollouts per group already in the batch (group index -> count).
        extra: rollouts to spread (count, >= 0).

    Returns:
        group index -> fresh rollouts (groups that get none are left out).
    """
    have, plan = dict(counts), Counter()
    for _ in range(max(extra, 0)):
        g = min(have, key=lambda k: (have[k], k))
        have[g] += 1
        plan[g] += 1
    return dict(plan)


def spend_remaining(
    rollouts: Sequence[Rollout], items: Sequence[PromptItem], brancher: Brancher, budget: RolloutBudget
) -> list[Rollout]:
    """Fresh scored rollouts for what is left of ``budget`` (branches at anchor 0 at the policy's
    temperature: a new rollout of the prompt, single-turn or an episode), planned by
    :func:`top_up_plan`; charges ``budget`` for them.

    Returns:
        the new rollouts, in group order (they join their prompts' groups as control rollouts).
    """
    first: dict[int, Rollout] = {}
    for r in rollouts:
        first.setdefault(r.group, r)
    counts = Counter(r.group for r in rollouts)
    plan = top_up_plan({g: counts[g] for g in first}, budget.take(budget.remaining))
    out: list[Rollout] = []
    for g in sorted(plan):
        out += brancher.branch(first[g], 0, plan[g], brancher.temperature, items[g])
    return out
