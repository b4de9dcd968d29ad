"""``objective=first_error``: GRPO with first-error credit on failed rollouts.

After Cliff (Ko et al. 2026, "Cliff Tokens: Identifying Single-Token Failure Triggers in LLM
Mathematical Reasoning", arXiv 2606.25524): a failed trace is recoverable until its first failure
trigger, and deleting that token and resampling recovers far more often than continuing from it.
Cliff locates the trigger with rollout-estimated potentials and trains single-token DPO at it; here
the configured judge locates the first wrong *step* once per rollout batch (the rollout engine's
``mark_first_error``, :mod:`mintrl.rollout.error_location`) and the credit is a token-level advantage
in a GRPO surrogate: the failed rollout's tokens before its first error get ``+credit_before``,
its tokens from the error on ``-credit_after``; rollouts without a marked error (successes,
failures where the judge found nothing) keep the group-relative sequence advantage. Cliff
publishes no values for such scales (it does not train with token advantages); the defaults are
this project's.

A failed rollout where the judge found no error keeps its sequence advantage by default
(``unmarked="sequence"``), which is 0 in a group where every rollout failed: on
the 3-term task the policy moved to responses without a checkable claim, the only failures never
penalised (docs/guided.md, "First-error credit collapsed"). ``unmarked="after"`` gives such a
rollout ``-credit_after`` on every response token, as if its first token were the error.
"""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_range
from mintrl.objective.advantages import first_error_token_advantages, unmarked_failed_errors
from mintrl.objective.grpo import GRPO


def response_start(batch: RolloutBatch) -> torch.Tensor:
    """``[N]`` int64 column of each row's first response token (right padding: the prompt fills the
    columns before it; environment tokens are response positions too)."""
    response = batch.response_mask | batch.environment_mask  # [N, L]
    return batch.attention_mask.sum(-1) - response.sum(-1)


class FirstErrorCredit(GRPO):
    """GRPO whose failed rollouts with a judge-marked first error get per-token advantages (see
    module docstring); ratios, clipping, KL and aggregation are :class:`mintrl.objective.grpo.GRPO`'s.

    Args:
        credit_before: advantage of the tokens before the first error (>= 0), in the units of the
            group advantages (reward standard deviations with ``scale_std``, reward units without).
        credit_after: magnitude of the (negative) advantage of the error's tokens and all after (>= 0),
            same units.
        unmarked: what a failed rollout (finite reward below 1: a partial reward counts as failed,
            even with a positive group advantage) without a marked error gets: ``sequence`` (its
            group-relative sequence advantage) or ``after`` (``-credit_after`` on every response token).
        **grpo: :class:`mintrl.objective.grpo.GRPO` knobs.

    Raises:
        ValueError: a negative credit or an unknown ``unmarked``, naming the ``objective.*`` field.
    """

    needs_first_error = True
    UNMARKED = ("sequence", "after")

    def __init__(self, credit_before: float = 0.2, credit_after: float = 1.0, unmarked: str = "sequence", **grpo):
        super().__init__(**grpo)
        check_range("objective.credit_before", credit_before, 0)
        check_range("objective.credit_after", credit_after, 0)
        if unmarked not in self.UNMARKED:
            raise ValueError(f"objective.unmarked must be one of {', '.join(self.UNMARKED)}, got {unmarked!r}")
        self.credit_before, self.credit_after, self.unmarked = credit_before, credit_after, unmarked

    def extra_tensors(self, batch, valid, logprob_fn):
        prepared = super().extra_tensors(batch, valid, logprob_fn)
        seq = prepared.tensors["advantages"]  # [N]
        marked = (batch.first_error >= 0) & valid  # [N]
        first_error = torch.where(marked, batch.first_error, torch.full_like(batch.first_error, -1))
        unmarked = unmarked_failed_errors(batch.rewards, first_error) & valid  # [N]
        prepared.stats["objective/first_error_unmarked_rows"] = float(unmarked.sum())  # failed, no error found
        if self.unmarked == "after":
            first_error = torch.where(unmarked, torch.zeros_like(first_error), first_error)  # error at token 0
        prepared.tensors["token_advantages"] = first_error_token_advantages(
            seq, first_error, response_start(batch), batch.input_ids.shape[1], self.credit_before, self.credit_after
        )  # [N, L]
        lengths = (batch.response_mask | batch.environment_mask).sum(-1).clamp(min=1)  # [N]
        fraction = (first_error.float() / lengths)[marked]  # judge-marked rows only
        prepared.stats["objective/first_error_rows"] = float(marked.sum())
        prepared.stats["objective/first_error_before_frac"] = float(fraction.mean()) if marked.any() else 0.0
        return prepared

    def token_advantages(self, batch: RolloutBatch) -> torch.Tensor:
        return batch.extras["token_advantages"]  # [n, L]
