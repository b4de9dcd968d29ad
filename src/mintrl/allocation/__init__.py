"""Rollout allocation (RAIL): where to branch extra rollouts, with what budget and temperature.

``allocation=`` components (:class:`Allocation`: ``uniform``, ``entropy``, ``random_anchor``, ``rail``) get the step's
scored rollouts, a :class:`Brancher` (its candidate branch points: :class:`Anchor`) and the per-step
:class:`RolloutBudget`, and return extra scored rollouts that
join their prompts' groups (single-turn rollouts, or episodes branched at turn anchors,
:mod:`mintrl.rollout.episode_branches`). Underneath: the reward-variance gain (eq. 2), anchor state features,
the gain controller with its recency-weighted Huber loss (eq. 6), and the shadow/live decision rule
with gate and exploration (eq. 10).
"""

from mintrl.allocation.anchor import Anchor
from mintrl.allocation.base import Allocation
from mintrl.allocation.branching import Brancher, anchors
from mintrl.allocation.budget import RolloutBudget
from mintrl.allocation.controller import GainController, recency_huber_loss, recency_weights
from mintrl.allocation.decisions import BranchDecision, DecisionKind, DecisionLog
from mintrl.allocation.entropy import EntropyAllocation
from mintrl.allocation.features import (
    FEATURES,
    anchor_features,
    answer_diversity,
    pool_entropy,
    tool_sequence_diversity,
)
from mintrl.allocation.gain import realized_gain, reward_variance
from mintrl.allocation.rail import RailAllocation
from mintrl.allocation.rail_controller import BranchAction, RailController
from mintrl.allocation.random_anchor import RandomAnchorAllocation
from mintrl.allocation.turns import kind_sequence, turn_anchors, turn_at
from mintrl.allocation.uniform import UniformAllocation

__all__ = [
    "FEATURES",
    "Allocation",
    "Anchor",
    "BranchDecision",
    "DecisionKind",
    "DecisionLog",
    "BranchAction",
    "Brancher",
    "EntropyAllocation",
    "RailAllocation",
    "RandomAnchorAllocation",
    "UniformAllocation",
    "anchors",
    "GainController",
    "RailController",
    "RolloutBudget",
    "anchor_features",
    "answer_diversity",
    "kind_sequence",
    "pool_entropy",
    "tool_sequence_diversity",
    "turn_anchors",
    "turn_at",
    "realized_gain",
    "recency_huber_loss",
    "recency_weights",
    "reward_variance",
]
