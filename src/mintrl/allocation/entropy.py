"""``allocation=entropy``: ARPO/AEPO-style branching at high-entropy step boundaries."""

from __future__ import annotations

from mintrl.allocation.anchor_pool import branch_each, branch_stats, control_anchor_pool
from mintrl.allocation.base import Allocation
from mintrl.allocation.decisions import BranchDecision, DecisionKind, DecisionLog

ENTROPY = DecisionKind("entropy", "entropy branching: an anchor in the step's top entropy quantile")


class EntropyAllocation(Allocation):
    """Branch ``branch_budget`` continuations at every anchor whose entropy (first-token
    surprisal, see :func:`mintrl.allocation.branching.anchors`) is in the top ``1 - percentile`` of
    the step's pool of anchors (control rollouts only), highest first, until the budget is spent.

    Args:
        budget_per_step: rollouts per optimizer step, initial ones included (a hard cap).
        spend_all: spend what the branching left of the budget on fresh rollouts
            (:attr:`mintrl.allocation.base.Allocation.spend_all`).
        percentile: anchors at or above this quantile of the pool's entropies are candidates.
        branch_budget: continuations per anchor. temperature: their sampling temperature.

    Raises:
        ValueError: percentile outside [0, 1), non-positive budgets or temperature.
    """

    decision_kinds = (ENTROPY,)

    def __init__(
        self,
        budget_per_step: int,
        percentile: float = 0.9,
        branch_budget: int = 2,
        temperature: float = 1.0,
        spend_all: bool = False,
    ):
        if not 0 <= percentile < 1 or branch_budget <= 0 or temperature <= 0 or budget_per_step <= 0:
            raise ValueError(
                f"allocation: need 0 <= percentile < 1 and positive budgets and temperature, got "
                f"{percentile}, {branch_budget}, {temperature}, {budget_per_step}"
            )
        self.budget_per_step, self.percentile = budget_per_step, percentile
        self.branch_budget, self.temperature = branch_budget, temperature
        self.spend_all = bool(spend_all)
        self.decisions = DecisionLog(self.decision_kinds)

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        """Branches (scored rollouts) and stats ``allocation/branches`` and, when it branched,
        ``allocation/realized_gain`` (mean reward-variance gain of its branches, RAIL eq. 2: the
        quantity RAIL's controller predicts, logged here for comparison)."""
        pool = control_anchor_pool(rollouts, brancher, delimiters)
        if not pool:
            return [], branch_stats([])
        values = sorted(s for s, _, _ in pool)
        threshold = values[min(int(self.percentile * len(values)), len(values) - 1)]
        ordered = [a for a in sorted(pool, key=lambda a: -a[0]) if a[0] >= threshold]  # highest entropy first
        args = (budget, self.branch_budget, self.temperature, ENTROPY, self.decisions)
        new, gains = branch_each(ordered, rollouts, items, brancher, *args)
        return new, branch_stats(gains)

    def take_decisions(self) -> list[BranchDecision]:
        """The branches executed since the last call (one per branched anchor)."""
        return self.decisions.take()
