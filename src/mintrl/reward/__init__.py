"""Verifiable rewards (``reward=`` config group)."""

from mintrl.reward.answer import ReasoningGymReward, extract_answer
from mintrl.reward.base import Reward, score_rewards

__all__ = ["ReasoningGymReward", "Reward", "extract_answer", "score_rewards"]
