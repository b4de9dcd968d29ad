"""Rollout allocation (RAIL): where to branch extra rollouts, with what budget and temperature.

``allocation=`` components (``uniform``, ``entropy``, ``rail``) get the step's scored rollouts, a
:class:`Brancher` and the per-step :class:`RolloutBudget`, and return extra scored rollouts that
join their prompts' groups. Underneath: the reward-variance gain (eq. 2), anchor state features,
the gain controller with its recency-weighted Huber loss (eq. 6), and the shadow/live decision rule
with gate and exploration (eq. 10).
"""

from mintrl.allocation.branching import Brancher, anchors
from mintrl.allocation.budget import RolloutBudget
from mintrl.allocation.controller import GainController, recency_huber_loss, recency_weights
from mintrl.allocation.entropy import EntropyAllocation
from mintrl.allocation.features import FEATURES, anchor_features
from mintrl.allocation.gain import realized_gain, reward_variance
from mintrl.allocation.rail import RailAllocation
from mintrl.allocation.rail_controller import BranchAction, RailController
from mintrl.allocation.uniform import UniformAllocation

__all__ = [
    "FEATURES",
    "BranchAction",
    "Brancher",
    "EntropyAllocation",
    "RailAllocation",
    "UniformAllocation",
    "anchors",
    "GainController",
    "RailController",
    "RolloutBudget",
    "anchor_features",
    "realized_gain",
    "recency_huber_loss",
    "recency_weights",
    "reward_variance",
]
