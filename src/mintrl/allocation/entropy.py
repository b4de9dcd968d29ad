"""``allocation=entropy``: ARPO/AEPO-style branching at high-entropy step boundaries."""

from __future__ import annotations

from collections import defaultdict

from mintrl.allocation.base import Allocation
from mintrl.allocation.decisions import BranchDecision, DecisionLog
from mintrl.allocation.gain import realized_gain


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
        self.decisions = DecisionLog()

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        """Branches (scored rollouts) and stats ``allocation/branches`` and, when it branched,
        ``allocation/realized_gain`` (mean reward-variance gain of its branches, RAIL eq. 2: the
        quantity RAIL's controller predicts, logged here for comparison)."""
        pool = [
            (surprisal, r, k)
            for r in rollouts
            if r.is_control
            for k, _, _, surprisal in brancher.anchors(r, delimiters)
        ]
        if not pool:
            return [], {"allocation/branches": 0.0}
        rewards = defaultdict(list)  # group -> rewards so far (branches join their group)
        for r in rollouts:
            rewards[r.group].append(r.reward)
        values = sorted(s for s, _, _ in pool)
        threshold = values[min(int(self.percentile * len(values)), len(values) - 1)]
        new, gains = [], []
        for surprisal, r, k in sorted(pool, key=lambda x: -x[0]):
            if surprisal < threshold:
                break
            m = budget.take(self.branch_budget)
            if m == 0:
                break
            children = brancher.branch(r, k, m, self.temperature, items[r.group])
            gains.append(realized_gain(rewards[r.group], [c.reward for c in children]))
            name = f"m{self.branch_budget}_t{self.temperature:g}"
            self.decisions.add(
                BranchDecision("entropy", r.group, name, len(children), None, gains[-1], True, surprisal)
            )
            rewards[r.group] += [c.reward for c in children]
            new += children
        stats = {"allocation/branches": float(len(gains))}
        if gains:
            stats["allocation/realized_gain"] = sum(gains) / len(gains)
        return new, stats

    def take_decisions(self) -> list[BranchDecision]:
        """The branches executed since the last call (one per branched anchor)."""
        return self.decisions.take()
