"""Training objectives (``objective=`` config group): the pure functions and the components.

Components follow :class:`mintrl.objective.base.Objective` (setup / prepare / per-micro-batch loss).
"""

from mintrl.objective.advantages import (
    control_advantages,
    control_baseline,
    first_error_token_advantages,
    group_advantages,
    mentor_advantages,
    unmarked_failed_errors,
    valid_rows,
)
from mintrl.objective.aggregation import AGGREGATIONS, StepTotals, aggregate, sequence_mean, step_totals
from mintrl.objective.base import Objective, ObjectiveOutput, Prepared
from mintrl.objective.first_error_credit import FirstErrorCredit
from mintrl.objective.functional import anchor_logprobs, anchored_log_ratio, regression_loss, regression_terms
from mintrl.objective.grpo import GRPO
from mintrl.objective.intervention_grpo import InterventionGRPO
from mintrl.objective.luffy import LUFFY, shaped_probability
from mintrl.objective.off_policy import OffPolicyCorrection, sequence_ratio_mask, truncated_importance_weights
from mintrl.objective.opd import OnPolicyDistillation
from mintrl.objective.policy_gradient import clipped_surrogate, importance_weight_stats, kl_penalty
from mintrl.objective.regression import AdvantageRegression
from mintrl.objective.sft import SupervisedNLL

__all__ = [
    "AGGREGATIONS",
    "AdvantageRegression",
    "FirstErrorCredit",
    "GRPO",
    "InterventionGRPO",
    "LUFFY",
    "OffPolicyCorrection",
    "Objective",
    "ObjectiveOutput",
    "Prepared",
    "OnPolicyDistillation",
    "StepTotals",
    "SupervisedNLL",
    "aggregate",
    "anchor_logprobs",
    "anchored_log_ratio",
    "clipped_surrogate",
    "control_advantages",
    "control_baseline",
    "first_error_token_advantages",
    "unmarked_failed_errors",
    "group_advantages",
    "importance_weight_stats",
    "kl_penalty",
    "mentor_advantages",
    "regression_loss",
    "regression_terms",
    "sequence_mean",
    "sequence_ratio_mask",
    "shaped_probability",
    "step_totals",
    "truncated_importance_weights",
    "valid_rows",
]
