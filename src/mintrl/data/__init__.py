"""Prompt sources and the rollout-streaming data module (``data=`` config group)."""

from mintrl.data.base import PromptItem
from mintrl.data.benchmarks import BenchmarkPrompts, ChampPrompts, HubPrompts
from mintrl.data.code import CodePrompts
from mintrl.data.datamodule import PromptStream, RolloutDataModule
from mintrl.data.reasoning_gym import ReasoningGymPrompts

__all__ = [
    "BenchmarkPrompts",
    "ChampPrompts",
    "CodePrompts",
    "HubPrompts",
    "PromptItem",
    "PromptStream",
    "ReasoningGymPrompts",
    "RolloutDataModule",
]
