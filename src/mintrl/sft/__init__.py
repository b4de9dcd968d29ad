"""The supervised stage before RL (``sft=`` config group): demonstrations (SFT+GRPO) or the
policy's own failed rollouts corrected at their first error (InT)."""

from mintrl.sft.interventions import InterventionSFTStage, collect_intervention_examples, intervention_example
from mintrl.sft.stage import SFTStage, collect_demonstrations

__all__ = [
    "InterventionSFTStage",
    "SFTStage",
    "collect_demonstrations",
    "collect_intervention_examples",
    "intervention_example",
]
