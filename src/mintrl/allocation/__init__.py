"""Rollout allocation (RAIL): where to branch extra rollouts, with what budget and temperature.

Pure parts so far: the reward-variance gain (eq. 2), anchor state features, the gain controller
with its recency-weighted Huber loss (eq. 6), the shadow/live decision rule with gate and
exploration (eq. 10), and the per-step rollout budget.
"""

from mintrl.allocation.budget import RolloutBudget
from mintrl.allocation.controller import GainController, recency_huber_loss, recency_weights
from mintrl.allocation.features import FEATURES, anchor_features
from mintrl.allocation.gain import realized_gain, reward_variance
from mintrl.allocation.rail import BranchAction, RailController

__all__ = ["FEATURES", "BranchAction", "GainController", "RailController", "RolloutBudget", "anchor_features",
           "realized_gain", "recency_huber_loss", "recency_weights", "reward_variance"]
