"""``allocation=entropy``: ARPO/AEPO-style branching at high-entropy step boundaries."""

from __future__ import annotations

from mintrl.allocation.base import Allocation
from mintrl.allocation.branching import anchors


class EntropyAllocation(Allocation):
    """Branch ``branch_budget`` continuations at every anchor whose entropy (first-token
    surprisal, see :func:`mintrl.allocation.branching.anchors`) is in the top ``1 - percentile`` of
    the step's pool of anchors (control rollouts only), highest first, until the budget is spent.

    Args:
        budget_per_step: rollouts per optimizer step, initial ones included (a hard cap).
        percentile: anchors at or above this quantile of the pool's entropies are candidates.
        branch_budget: continuations per anchor. temperature: their sampling temperature.

    Raises:
        ValueError: percentile outside [0, 1), non-positive budgets or temperature.
    """

    def __init__(self, budget_per_step: int, percentile: float = 0.9, branch_budget: int = 2, temperature: float = 1.0):
        if not 0 <= percentile < 1 or branch_budget <= 0 or temperature <= 0 or budget_per_step <= 0:
            raise ValueError(
                f"allocation: need 0 <= percentile < 1 and positive budgets and temperature, got "
                f"{percentile}, {branch_budget}, {temperature}, {budget_per_step}"
            )
        self.budget_per_step, self.percentile = budget_per_step, percentile
        self.branch_budget, self.temperature = branch_budget, temperature

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        """Branches (scored rollouts) and stats ``allocation/branches``."""
        pool = [
            (surprisal, r, k)
            for r in rollouts
            if r.is_control
            for k, _, _, surprisal in anchors(r, brancher.tokenizer, delimiters)
        ]
        if not pool:
            return [], {"allocation/branches": 0.0}
        values = sorted(s for s, _, _ in pool)
        threshold = values[min(int(self.percentile * len(values)), len(values) - 1)]
        new, branches = [], 0
        for surprisal, r, k in sorted(pool, key=lambda x: -x[0]):
            if surprisal < threshold:
                break
            m = budget.take(self.branch_budget)
            if m == 0:
                break
            new += brancher.branch(r, k, m, self.temperature, items[r.group])
            branches += 1
        return new, {"allocation/branches": float(branches)}
