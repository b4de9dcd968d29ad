"""Verifiable rewards (``reward=`` config group)."""

from mintrl.reward.answer import ReasoningGymReward, extract_answer
from mintrl.reward.base import Reward, score_rewards
from mintrl.reward.code import CodeReward, build_program, extract_code

__all__ = ["CodeReward", "ReasoningGymReward", "Reward", "build_program", "extract_answer", "extract_code", "score_rewards"]
