"""RAIL's decision rule (RAIL section 3): a shadow phase that only records traces, then a live phase
that branches with the controller's best action when its predicted gain passes the gate.

Our copy of the RAIL paper lacks Appendix B.3 (grids, window, Huber delta, recency weights, gate,
exploration schedule, promotion rule), so the defaults here are this project's choices, documented
per argument; the structure (eqs. 6, 9, 10, shadow accept-or-stop, promotion, exploration) is the
paper's.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import torch

from mintrl.allocation.controller import GainController
from mintrl.core.checks import check_int


@dataclass(frozen=True)
class BranchAction:
    """One element of the action grid B = budgets x temperatures (RAIL eq. 9): ``budget``
    continuations from the anchor, sampled at ``temperature``; or, beyond the paper, an intervene
    action (``intervene`` = correction length in tokens, one semi-on-policy rollout)."""

    budget: int
    temperature: float
    intervene: int = 0  # > 0: an intervene action (judge review + correction of up to this many tokens)

    @property
    def name(self) -> str:
        """``m<budget>_t<temperature>`` or ``iv<tokens>`` (the ``allocation/action_*`` metric names)."""
        return f"iv{self.intervene}" if self.intervene else f"m{self.budget}_t{self.temperature:g}"


class RailController:
    """Shadow-then-live contextual-bandit controller of where and how to branch.

    Args:
        state_dim: number of state features (see :func:`mintrl.allocation.features.anchor_features`).
        budgets: branch budgets M (rollouts per branch). temperatures: decoding temperatures T.
        window: traces W the controller is fit on (most recent). promote_after: traces recorded in
            the shadow phase before going live. gate: eta of eq. 10 (reward^2; branch only when the
            best predicted gain exceeds it). rho0, rho_steps: exploration probability
            ``rho_t = rho0 * max(0, 1 - t / rho_steps)`` over live decisions ``t``.
        decay: recency weight ``decay ** age`` of eq. 6. delta: Huber threshold (reward^2).
        refit_every: refit the controller after this many new traces. fit_steps, lr, hidden: the
            refit's Adam steps, learning rate and the MLP width. seed: exploration randomness.
        intervene_lengths: beyond the paper, intervene actions (a MInTRL judge review of the chunk
            at the anchor plus a correction of up to this many tokens); empty = off.
    """

    def __init__(
        self,
        state_dim: int,
        budgets: Sequence[int] = (2, 4, 8),
        temperatures: Sequence[float] = (0.8, 1.0, 1.2),
        window: int = 256,
        promote_after: int = 64,
        gate: float = 0.0,
        rho0: float = 0.1,
        rho_steps: int = 500,
        decay: float = 0.98,
        delta: float = 0.05,
        refit_every: int = 8,
        fit_steps: int = 50,
        lr: float = 1e-2,
        hidden: int = 32,
        seed: int = 0,
        intervene_lengths: Sequence[int] = (),
    ):
        if not budgets or min(budgets) <= 0 or not temperatures or min(temperatures) <= 0:
            raise ValueError(
                f"allocation budgets and temperatures must be positive, got {list(budgets)}, {list(temperatures)}"
            )
        for name, value in (("window", window), ("promote_after", promote_after), ("refit_every", refit_every)):
            check_int(f"allocation.{name}", value)
        self.actions = [BranchAction(int(m), float(t)) for m in sorted(budgets) for t in temperatures]
        self.actions += [BranchAction(1, 1.0, int(length)) for length in intervene_lengths]
        self.controller = GainController(state_dim, len(self.actions), hidden)
        self.window, self.promote_after, self.gate = window, promote_after, gate
        self.rho0, self.rho_steps, self.decay, self.delta = rho0, rho_steps, decay, delta
        self.refit_every, self.fit_steps, self.lr = refit_every, fit_steps, lr
        self.rng = random.Random(seed)
        self.phase = "shadow"
        self.traces: deque[tuple[list[float], int, float]] = deque(maxlen=window)
        self.recorded = 0  # traces ever recorded
        self.live_decisions = 0  # t of rho_t
        self.last_explored = False  # the last decide() took a uniformly random action
        self.last_loss = float("nan")

    # ------------------------------------------------------------------ decisions
    def exploration(self) -> float:
        """Current exploration probability ``rho_t``."""
        return self.rho0 * max(0.0, 1.0 - self.live_decisions / self.rho_steps)

    def shadow_plan(self, hard: bool) -> list[int]:
        """Shadow phase: action indices to try at one anchor, in increasing budget order (the caller
        stops at the first trial whose realized gain is not positive: accept-or-stop); the most
        exploratory temperature for a hard prompt (no success in its group yet), else the middle one.
        With intervene actions, half of the anchors (at random) try one intervene action instead."""
        intervene = [i for i, a in enumerate(self.actions) if a.intervene]
        if intervene and self.rng.random() < 0.5:  # intervene actions get half of the shadow anchors
            return [self.rng.choice(intervene)]
        temps = sorted({a.temperature for a in self.actions if not a.intervene})
        temp = temps[-1] if hard else temps[len(temps) // 2]
        return [i for i, a in enumerate(self.actions) if a.temperature == temp and not a.intervene]

    @torch.no_grad()
    def predict(self, state: Sequence[float]) -> torch.Tensor:
        """Predicted gain of every action: ``[A]`` (reward^2)."""
        return self.controller.scores(torch.tensor(state, dtype=torch.float32))

    def decide(self, state: Sequence[float]) -> tuple[int | None, float]:
        """Live phase (RAIL eq. 10): with probability ``rho_t`` a uniformly random action, else the
        argmax of the predicted gains if it exceeds the gate, else no branch (None).

        Returns:
            (action index or None, predicted gain of the chosen or best action).
        """
        scores = self.predict(state)
        rho = self.exploration()
        self.live_decisions += 1
        self.last_explored = self.rng.random() < rho
        if self.last_explored:
            index = self.rng.randrange(len(self.actions))
            return index, float(scores[index])
        best = int(scores.argmax())
        return (best if float(scores[best]) > self.gate else None), float(scores[best])

    # ------------------------------------------------------------------ learning
    def record(self, state: Sequence[float], action: int, gain: float) -> None:
        """Add one trace ``(z, b, y)``; refit every ``refit_every`` traces; go live after
        ``promote_after`` traces."""
        self.traces.append((list(map(float, state)), int(action), float(gain)))
        self.recorded += 1
        if self.recorded % self.refit_every == 0:
            self.refit()
        if self.phase == "shadow" and self.recorded >= self.promote_after:
            self.refit()
            self.phase = "live"

    def refit(self) -> float:
        """Fit the controller on the trace window (eq. 6); returns the loss."""
        if not self.traces:
            return float("nan")
        states = torch.tensor([s for s, _, _ in self.traces], dtype=torch.float32)
        actions = torch.tensor([a for _, a, _ in self.traces])
        gains = torch.tensor([y for _, _, y in self.traces], dtype=torch.float32)
        self.last_loss = self.controller.fit(states, actions, gains, self.decay, self.delta, self.fit_steps, self.lr)
        return self.last_loss

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to continue exactly: weights, traces, phase, counters, RNG state."""
        return {
            "controller": self.controller.state_dict(),
            "traces": list(self.traces),
            "phase": self.phase,
            "recorded": self.recorded,
            "live_decisions": self.live_decisions,
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.controller.load_state_dict(state["controller"])
        self.traces = deque((tuple(t) for t in state["traces"]), maxlen=self.window)
        self.phase, self.recorded, self.live_decisions = state["phase"], state["recorded"], state["live_decisions"]
        self.rng.setstate(state["rng"])
