"""``allocation=random_anchor``: branching at anchors drawn uniformly at random (RAIL section 3.2's random-anchor
comparison: where a learned or entropy-based choice of anchor should beat chance)."""

from __future__ import annotations

import random

from mintrl.allocation.anchor_pool import branch_each, branch_stats, control_anchor_pool
from mintrl.allocation.base import Allocation
from mintrl.allocation.decisions import BranchDecision, DecisionKind, DecisionLog

RANDOM = DecisionKind("random", "random-anchor branching: an anchor drawn uniformly at random from the step's pool")


class RandomAnchorAllocation(Allocation):
    """Branch ``branch_budget`` continuations at each of the step's control-rollout anchors, visited in a
    uniformly random order (without replacement), until the budget is spent: entropy branching
    (:class:`mintrl.allocation.entropy.EntropyAllocation`) with the order drawn at random instead of by
    entropy and no entropy threshold, so the two differ only in where they branch.

    Args:
        budget_per_step: rollouts per optimizer step, initial ones included (a hard cap).
        spend_all: spend what the branching left of the budget on fresh rollouts
            (:attr:`mintrl.allocation.base.Allocation.spend_all`).
        branch_budget: continuations per anchor (rollouts). temperature: their sampling temperature.
        seed: the order's random seed (the run's seed); the generator's state is checkpointed.

    Raises:
        ValueError: non-positive budgets or temperature.
    """

    decision_kinds = (RANDOM,)

    def __init__(
        self,
        budget_per_step: int,
        branch_budget: int = 2,
        temperature: float = 1.0,
        spend_all: bool = False,
        seed: int = 0,
    ):
        if branch_budget <= 0 or temperature <= 0 or budget_per_step <= 0:
            raise ValueError(
                f"allocation: need positive budget_per_step, branch_budget and temperature, got "
                f"{budget_per_step}, {branch_budget}, {temperature}"
            )
        self.budget_per_step, self.branch_budget, self.temperature = budget_per_step, branch_budget, temperature
        self.spend_all = bool(spend_all)
        self.rng = random.Random(seed)
        self.decisions = DecisionLog(self.decision_kinds)

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        """Branches (scored rollouts) and stats ``allocation/branches`` and, when it branched,
        ``allocation/realized_gain`` (mean reward-variance gain of its branches, RAIL eq. 2)."""
        pool = control_anchor_pool(rollouts, brancher, delimiters)
        self.rng.shuffle(pool)
        args = (budget, self.branch_budget, self.temperature, RANDOM, self.decisions)
        new, gains = branch_each(pool, rollouts, items, brancher, *args)
        return new, branch_stats(gains)

    def take_decisions(self) -> list[BranchDecision]:
        """The branches executed since the last call (one per branched anchor, kind ``random``)."""
        return self.decisions.take()

    def state_dict(self) -> dict:
        """The order generator's state (a resumed run draws the anchors an uninterrupted one would)."""
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.rng.setstate(state["rng"])
