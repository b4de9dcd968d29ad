"""The supervised stage of SFT+GRPO (``sft=`` config group)."""

from mintrl.sft.stage import SFTStage, collect_demonstrations

__all__ = ["SFTStage", "collect_demonstrations"]
