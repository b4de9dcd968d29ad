"""The per-step rollout budget: a hard cap that branching can never exceed."""

from __future__ import annotations

from mintrl.core.checks import check_int


class RolloutBudget:
    """Rollouts left in one optimizer step.

    Args:
        total: rollouts allowed this step (initial group rollouts included).

    Raises:
        ValueError: a non-positive total.
    """

    def __init__(self, total: int):
        check_int("allocation.budget_per_step", total)
        self.total, self.used = total, 0

    @property
    def remaining(self) -> int:
        return self.total - self.used

    def take(self, wanted: int) -> int:
        """Grant up to ``wanted`` rollouts (fewer when the budget runs out) and count them."""
        granted = max(0, min(wanted, self.remaining))
        self.used += granted
        return granted

    @property
    def used_fraction(self) -> float:
        return self.used / self.total
