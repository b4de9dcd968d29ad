"""When interventions happen: a fixed phase (MInTRL section 2.3) or an adaptive stop.

The paper intervenes during the first ``intervention_steps`` optimizer steps, then trains on pure
on-policy rollouts. The adaptive stop (the paper's future-work item, driven by its Figure 4b
signal) ends the phase earlier, for good, once the exponentially smoothed reward gap between
semi-on-policy and control rollouts has stayed below ``gap_threshold`` for ``patience``
consecutive steps: the interventions no longer lift reward, so they only add off-policy tokens.

With data-parallel ranks the gap is that of every rank's rollouts together (:func:`all_ranks_gap`),
so every rank's schedule takes the same decision at the same step.
"""

from __future__ import annotations

import math
from typing import Mapping

from mintrl.core.ranks import all_ranks_sum, data_parallel_size


def gap_evidence(stats: Mapping[str, float], weights: Mapping[str, float]) -> list[float]:
    """One rank's evidence for the reward gap: ``[semi reward sum, semi rollouts with a reward,
    control reward sum, control rollouts with a reward]`` (reward units, counts), from a step's
    rollout statistics (``reward/semi``, ``reward/control``) and their denominators
    (:func:`mintrl.rollout.stats.rollout_stat_weights`); zeros for an absent mean."""
    out = []
    for key in ("reward/semi", "reward/control"):
        n = float(weights.get(key, 0.0)) if key in stats else 0.0
        out += [float(stats[key]) * n if n else 0.0, n]
    return out


def pooled_gap(evidence: list[float]) -> float:
    """``semi mean - control mean`` of summed :func:`gap_evidence`; NaN when either has no reward."""
    semi_sum, semi_n, control_sum, control_n = evidence
    if semi_n <= 0 or control_n <= 0:
        return float("nan")
    return semi_sum / semi_n - control_sum / control_n


def all_ranks_gap(stats: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The step's reward gap (semi minus control, reward units) over every data-parallel rank's
    rollouts: this rank's ``reward/gap`` (NaN when absent) with one rank; otherwise the pooled
    :func:`gap_evidence` of all ranks (an ``all_reduce``: every rank calls it at every intervened
    training step, whatever its own rollouts)."""
    if data_parallel_size() == 1:
        return float(stats.get("reward/gap", float("nan")))
    return pooled_gap(all_ranks_sum(gap_evidence(stats, weights)))


class InterventionSchedule:
    """Decides, per optimizer step, whether rollouts may be intervened on.

    Args:
        intervention_steps: last step (exclusive) of the intervention phase (optimizer steps).
        adaptive: enable the adaptive stop.
        gap_threshold: reward-gap level (reward units) under which a step counts as "no lift".
        patience: consecutive such steps that end the phase.
        smoothing: EMA weight of the past, in [0, 1): ``ema = s * ema + (1 - s) * gap``.
        min_steps: the adaptive stop cannot fire before this many steps of interventions.

    Raises:
        ValueError: a knob out of range (field named ``rollout.adaptive_stop.*``).
    """

    def __init__(
        self,
        intervention_steps: int = 1_000_000,
        adaptive: bool = False,
        gap_threshold: float = 0.02,
        patience: int = 3,
        smoothing: float = 0.5,
        min_steps: int = 0,
    ):
        if patience <= 0 or not 0 <= smoothing < 1 or min_steps < 0:
            raise ValueError(
                f"rollout.adaptive_stop needs patience > 0, smoothing in [0, 1), min_steps >= 0; got {patience}, {smoothing}, {min_steps}"
            )
        self.intervention_steps, self.adaptive = intervention_steps, adaptive
        self.gap_threshold, self.patience, self.smoothing, self.min_steps = (
            gap_threshold,
            patience,
            smoothing,
            min_steps,
        )
        self.smoothed_gap: float | None = None
        self.below = 0
        self.stopped_at: int | None = None

    def active(self, step: int) -> bool:
        """True when step ``step`` may use interventions."""
        return step < self.intervention_steps and self.stopped_at is None

    def update(self, step: int, gap: float) -> bool:
        """Feed the reward gap (semi minus control) of an intervened step; True when this call
        ended the phase. NaN gaps (no semi-on-policy reward) are ignored."""
        if math.isnan(gap) or self.stopped_at is not None:
            return False
        self.smoothed_gap = (
            gap if self.smoothed_gap is None else self.smoothing * self.smoothed_gap + (1 - self.smoothing) * gap
        )
        self.below = self.below + 1 if self.smoothed_gap < self.gap_threshold else 0
        if self.adaptive and step + 1 >= self.min_steps and self.below >= self.patience:
            self.stopped_at = step
            return True
        return False

    def state_dict(self) -> dict:
        """Everything needed to resume the schedule exactly."""
        return {"smoothed_gap": self.smoothed_gap, "below": self.below, "stopped_at": self.stopped_at}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.smoothed_gap, self.below, self.stopped_at = state["smoothed_gap"], state["below"], state["stopped_at"]
