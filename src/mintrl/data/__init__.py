"""Prompt sources and the rollout-streaming data module (``data=`` config group)."""

from mintrl.data.code import CodePrompts
from mintrl.data.datamodule import PromptStream, RolloutDataModule
from mintrl.data.prompts import PromptItem, ReasoningGymPrompts

__all__ = ["CodePrompts", "PromptItem", "PromptStream", "ReasoningGymPrompts", "RolloutDataModule"]
