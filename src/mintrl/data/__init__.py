"""Prompt sources and the rollout-streaming data module (``data=`` config group)."""

from mintrl.data.datamodule import PromptStream, RolloutDataModule
from mintrl.data.prompts import PromptItem, ReasoningGymPrompts

__all__ = ["PromptItem", "PromptStream", "ReasoningGymPrompts", "RolloutDataModule"]
