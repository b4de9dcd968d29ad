"""What an allocation did at each anchor it branched from: one :class:`BranchDecision` per executed
branch, with the gain its controller predicted and the gain the branch realised (RAIL eq. 2).

Each allocation declares the kinds of decision it makes on its class
(:attr:`mintrl.allocation.base.Allocation.decision_kinds`, a tuple of :class:`DecisionKind`); its
:class:`DecisionLog` refuses any other kind, the run's decisions callback records the declared kinds next to
the decisions (:data:`KINDS_FILE`), and the reports list the decisions per declared kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

KINDS_FILE = "allocation_kinds.json"  # next to allocation_decisions.jsonl: the allocation's class and its kinds


@dataclass(frozen=True)
class DecisionKind:
    """One kind of branch decision an allocation makes (the ``kind`` of its :class:`BranchDecision` records).

    Attributes:
        name: the ``kind`` value written with each decision (``"shadow"``, ``"entropy"``, ...).
        meaning: one sentence saying who chose the branch and how (the reports print it).
    """

    name: str
    meaning: str

    def as_record(self) -> dict:
        """``{"name", "meaning"}`` (JSON-ready)."""
        return asdict(self)


@dataclass(frozen=True)
class BranchDecision:
    """One executed branch of one step (RAIL section 3.1's trace ``(z, b, y)`` without ``z``).

    Attributes:
        kind: who chose it: the :attr:`DecisionKind.name` of one of the allocation's declared kinds
            (RAIL: ``shadow``, ``live``, ``explore``; entropy branching: ``entropy``; random anchors: ``random``).
        group: the prompt's index in the step's batch.
        action: the action's name (``m<budget>_t<temperature>`` or ``iv<tokens>``).
        budget: rollouts the branch generated (count).
        predicted: the controller's predicted gain of the action (reward^2); None without a controller.
        realized: the gain it realised, ``I(Y_b) - I(Y_0)`` (reward^2, RAIL eq. 2).
        kept: its rollouts joined the group (a shadow trial whose gain is not positive is discarded).
        anchor_surprisal: the anchor's first-token surprisal (nats).
    """

    kind: str
    group: int
    action: str
    budget: int
    predicted: float | None
    realized: float
    kept: bool
    anchor_surprisal: float

    def as_record(self, step: int) -> dict:
        """A JSON-ready dict with the optimizer ``step`` whose weights generated the branch."""
        return {"step": int(step), **asdict(self)}


class DecisionLog:
    """The decisions an allocation made since they were last taken (composed into allocations
    that branch; the data side hands them to the run's callbacks once per step).

    Args:
        kinds: the allocation's declared kinds (:attr:`mintrl.allocation.base.Allocation.decision_kinds`);
            :meth:`add` refuses a decision of any other kind.
    """

    def __init__(self, kinds: Iterable[DecisionKind]):
        self.kinds = tuple(k.name for k in kinds)
        self._pending: list[BranchDecision] = []

    def add(self, decision: BranchDecision) -> None:
        """Append one executed branch.

        Raises:
            ValueError: its kind is not one of the log's declared kinds.
        """
        if decision.kind not in self.kinds:
            raise ValueError(
                f"decision kind {decision.kind!r} is not declared by the allocation (declared: {list(self.kinds)}); "
                "add a DecisionKind to its class's decision_kinds"
            )
        self._pending.append(decision)

    def take(self) -> list[BranchDecision]:
        """The decisions since the last call, in order; the log is empty afterwards."""
        out, self._pending = self._pending, []
        return out
