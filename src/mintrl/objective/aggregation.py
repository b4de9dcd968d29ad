"""Loss aggregation that does not depend on how an optimizer step's batch is split.

A micro-batch's contribution is its *sum* of per-token (or per-sequence) losses divided by counts
of the *whole optimizer step* (all micro-batches, gradient-accumulation steps and data-parallel
ranks): summing the contributions of any split gives the same loss and the same gradient.
With ``W`` data-parallel ranks, each rank multiplies its contribution by ``W`` because DDP and
FSDP average gradients over ranks (see :meth:`mintrl.training.module.PolicyModule.accumulate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


@dataclass
class StepTotals:
    """Counts over one whole optimizer step (float scalars).

    Attributes:
        tokens: loss-mask tokens. sequences: rows with at least one loss-mask token.
        rows: all rows of the step, those without a loss token (a dropped rollout: no reward)
            included; None: ``sequences``.
    """

    tokens: torch.Tensor
    sequences: torch.Tensor
    rows: torch.Tensor | None = None

    def __post_init__(self):
        if self.rows is None:
            self.rows = self.sequences


def step_totals(loss_mask: torch.Tensor) -> StepTotals:
    """Local counts of a ``[n, L]`` bool loss mask (all-reduce them for data parallelism)."""
    rows = torch.tensor(float(loss_mask.shape[0]), device=loss_mask.device)
    return StepTotals(loss_mask.sum().to(torch.float32), loss_mask.any(-1).sum().to(torch.float32), rows)


def aggregate(
    token_loss: torch.Tensor, loss_mask: torch.Tensor, mode: str, totals: StepTotals, token_sum_norm: float = 1.0
) -> torch.Tensor:
    """This micro-batch's share of the step loss.

    Modes (``S`` = ``totals.sequences``, ``T`` = ``totals.tokens``, ``n_i`` = row ``i``'s mask tokens):

    - ``token-mean``: ``sum_{i,t} l_it / T`` (every token weighs the same; DAPO).
    - ``seq-mean-token-sum``: ``sum_i (sum_t l_it) / (R x token_sum_norm)`` with ``R = totals.rows``,
      every row of the update, those without a loss token included (Dr. GRPO's constant normaliser:
      its ``mean_i sum_t l_it / max_len`` over all sampled rows, with ``token_sum_norm = max_len``; a
      dropped row leaves the others' weight unchanged). ``R`` is constant while every step samples
      the same number of rows (a guide with ``when: no_success``, or prompts without a reference
      solution, change it).
    - ``seq-mean-token-mean``: ``sum_i (sum_t l_it / n_i) / S`` (the original GRPO).

    Args:
        token_loss: ``[n, L]`` per-token loss (values off the mask are ignored, even NaN).
        loss_mask: ``[n, L]`` bool. mode: one of :data:`AGGREGATIONS`. totals: the step's counts.
        token_sum_norm: tokens each row's token sum is divided by under ``seq-mean-token-sum`` (Dr. GRPO:
            the maximum response length; 1: none); the other modes ignore it.

    Returns:
        scalar. A fully masked step gives exactly 0 (counts are clamped to >= 1).

    Raises:
        ValueError: unknown ``mode``.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"objective.aggregation must be one of {AGGREGATIONS}, got {mode!r}")
    masked = torch.where(loss_mask, token_loss, torch.zeros_like(token_loss))  # [n, L]
    if mode == "token-mean":
        return masked.sum() / totals.tokens.clamp(min=1)
    per_seq = masked.sum(-1)  # [n]
    if mode == "seq-mean-token-sum":
        return per_seq.sum() / (totals.rows.clamp(min=1) * token_sum_norm)
    per_seq = per_seq / loss_mask.sum(-1).clamp(min=1)  # seq-mean-token-mean
    return per_seq.sum() / totals.sequences.clamp(min=1)


def sequence_mean(seq_loss: torch.Tensor, seq_mask: torch.Tensor, totals: StepTotals) -> torch.Tensor:
    """This micro-batch's share of ``mean_i seq_loss_i`` over the step's ``totals.sequences`` rows.

    Args:
        seq_loss: ``[n]``. seq_mask: ``[n]`` bool (rows that count). totals: the step's counts.
    """
    masked = torch.where(seq_mask, seq_loss, torch.zeros_like(seq_loss))
    return masked.sum() / totals.sequences.clamp(min=1)
