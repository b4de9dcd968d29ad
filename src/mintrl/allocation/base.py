"""The allocation contract (``allocation=`` config group): where to branch extra rollouts.

A new allocation is a subclass of :class:`Allocation` in its own module with a config file
``configs/allocation/<name>.yaml`` (its ``_target_`` and knobs); docs/extending.md walks through one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Sequence

from mintrl.allocation.decisions import DecisionKind

if TYPE_CHECKING:
    from mintrl.allocation.branching import Brancher
    from mintrl.allocation.budget import RolloutBudget
    from mintrl.allocation.decisions import BranchDecision
    from mintrl.core.batch import Rollout
    from mintrl.data.base import PromptItem


class Allocation(ABC):
    """Decides, after a step's rollouts are scored, which extra rollouts to branch (RAIL sec. 3).

    Attributes:
        budget_per_step: rollouts per optimizer step, initial ones included (a hard cap), of all
            data-parallel ranks together (each rank's engine spends ``budget_per_step / ranks``),
            or None for an allocation that never branches (the rollout engine then skips it).
        spend_all: after the allocation branched, the budget it left goes to fresh rollouts spread
            over the prompts (:mod:`mintrl.allocation.top_up`), so every step generates exactly
            ``budget_per_step`` rollouts (rows compared at equal budget); False: a cap only.
        decision_kinds: the kinds of :class:`~mintrl.allocation.decisions.BranchDecision` the allocation
            makes (a class attribute, in the order the reports list them); empty for one that logs no
            decisions. Its :class:`~mintrl.allocation.decisions.DecisionLog` refuses other kinds, and the
            decisions callback and the reports read them from here.
    """

    budget_per_step: int | None = None
    spend_all: bool = False
    decision_kinds: ClassVar[tuple[DecisionKind, ...]] = ()

    @abstractmethod
    def allocate(
        self,
        rollouts: list[Rollout],
        items: list[PromptItem],
        brancher: Brancher,
        budget: RolloutBudget,
        delimiters: Sequence[str],
    ) -> tuple[list[Rollout], dict[str, float]]:
        """Extra scored rollouts (they join their prompts' groups) and the step's ``allocation/*``
        statistics. ``budget`` is the step's :class:`RolloutBudget`, already charged for ``rollouts``."""

    def take_decisions(self) -> list[BranchDecision]:
        """The branches executed since the last call (:class:`mintrl.allocation.decisions.BranchDecision`),
        emptied by the call; default none (an allocation that does not branch or does not log them)."""
        return []

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the allocation (a learned controller); default nothing."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
