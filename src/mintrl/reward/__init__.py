"""Verifiable rewards (``reward=`` config group)."""

from mintrl.reward.answer import ReasoningGymReward, extract_answer

__all__ = ["ReasoningGymReward", "extract_answer"]
