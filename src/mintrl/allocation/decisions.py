"""What an allocation did at each anchor it branched from: one :class:`BranchDecision` per executed
branch, with the gain its controller predicted and the gain the branch realised (RAIL eq. 2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

DecisionKind = Literal["shadow", "live", "explore", "entropy", "random"]
DECISION_KINDS: tuple[str, ...] = ("shadow", "live", "explore", "entropy", "random")


@dataclass(frozen=True)
class BranchDecision:
    """One executed branch of one step (RAIL section 3.1's trace ``(z, b, y)`` without ``z``).

    Attributes:
        kind: who chose it: ``"shadow"`` (RAIL's shadow phase: budgets tried in increasing order,
            accept-or-stop), ``"live"`` (the controller's best action past the gate, eq. 10),
            ``"explore"`` (a live decision that took a uniformly random action, probability
            ``rho_t``), ``"entropy"`` (entropy branching: an anchor in the step's top entropy quantile),
            ``"random"`` (random-anchor branching: an anchor drawn uniformly at random).
        group: the prompt's index in the step's batch.
        action: the action's name (``m<budget>_t<temperature>`` or ``iv<tokens>``).
        budget: rollouts the branch generated (count).
        predicted: the controller's predicted gain of the action (reward^2); None without a controller.
        realized: the gain it realised, ``I(Y_b) - I(Y_0)`` (reward^2, RAIL eq. 2).
        kept: its rollouts joined the group (a shadow trial whose gain is not positive is discarded).
        anchor_surprisal: the anchor's first-token surprisal (nats).
    """

    kind: DecisionKind
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
    that branch; the data side hands them to the run's callbacks once per step)."""

    def __init__(self):
        self._pending: list[BranchDecision] = []

    def add(self, decision: BranchDecision) -> None:
        """Append one executed branch."""
        self._pending.append(decision)

    def take(self) -> list[BranchDecision]:
        """The decisions since the last call, in order; the log is empty afterwards."""
        out, self._pending = self._pending, []
        return out
