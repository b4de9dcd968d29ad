"""Training objectives (``objective=`` config group)."""

from mintrl.objective.functional import (
    anchor_logprobs,
    anchored_log_ratio,
    control_advantages,
    control_baseline,
    regression_loss,
)
from mintrl.objective.regression import AdvantageRegression, ObjectiveOutput

__all__ = [
    "AdvantageRegression", "ObjectiveOutput", "anchor_logprobs", "anchored_log_ratio",
    "control_advantages", "control_baseline", "regression_loss",
]
