"""Verifiable rewards (``reward=`` config group)."""

from mintrl.reward.base import Reward, score_rewards
from mintrl.reward.code import CodeReward, build_program, extract_code
from mintrl.reward.math import MathVerifyReward
from mintrl.reward.reasoning_gym import ReasoningGymReward
from mintrl.text.answer import extract_answer

__all__ = [
    "CodeReward",
    "MathVerifyReward",
    "ReasoningGymReward",
    "Reward",
    "build_program",
    "extract_answer",
    "extract_code",
    "score_rewards",
]
