"""``allocation=uniform``: every prompt keeps the rollout engine's fixed group; no branching."""

from __future__ import annotations

from mintrl.allocation.base import Allocation


class UniformAllocation(Allocation):
    """Plain GRPO / MInTRL allocation: ``rollout.n_control + rollout.n_semi`` rollouts per prompt."""

    budget_per_step = None

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        """No extra rollouts: ``([], {})``."""
        return [], {}
