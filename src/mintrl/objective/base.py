"""The objective contract the LightningModule trains with (``objective=`` config group).

An objective is used in three phases per rollout batch, so that several optimizer updates
(epochs x mini-batches) and any micro-batching give the same result:

1. ``setup(policy)`` once when training starts (e.g. snapshot a KL reference);
2. ``prepare(batch, logprob_fn)`` once per rollout batch, without gradients: sets the batch's typed
   ``train_rows`` and ``loss_mask``, puts the objective's private tensors (advantages, reference or
   teacher log-probs) into ``batch.extras`` and returns the objective's statistics;
3. ``__call__(micro_batch, logprobs, totals)`` per micro-batch: its share of the optimizer step's
   loss, normalised by the step's ``totals`` (see :mod:`mintrl.objective.aggregation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.objective.advantages import valid_rows
from mintrl.objective.aggregation import StepTotals

# (model, input_ids [N, L], attention_mask [N, L], target_mask [N, L], temperature) -> log-probs [N, L], no grad
LogprobFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]


@dataclass
class Prepared:
    """What an objective computes once per rollout batch (:meth:`Objective.extra_tensors`).

    Attributes:
        tensors: objective-private per-row tensors (``[N]`` or ``[N, L]``), stored in ``batch.extras``.
        rows: ``[N]`` bool, rows the objective keeps (e.g. only groups with a baseline), or None for
            every valid row.
        stats: scalar statistics of the batch (e.g. ``objective/mentor_alpha``), logged with the step.
    """

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: torch.Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)


@dataclass
class ObjectiveOutput:
    """A scalar ``loss`` (this micro-batch's share of the step loss) and detached scalar ``metrics``."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


class Objective:
    """Base class: the loss mask and the three-phase contract (see module docstring).

    Contract: the constructor takes the keyword ``context`` (a
    :class:`mintrl.build.components.ModelContext`: frozen step-0 policy, teachers), which
    ``build_components`` always passes; an objective that needs no model accepts and ignores it.

    Attributes:
        trains_guide_tokens: class-level capability; True when the objective puts guide tokens
            (:attr:`mintrl.core.batch.Provenance.GUIDE`: a reference solution's prefix, a
            demonstration) into its loss mask and says how (the MInTRL regression anchors them like
            intervention tokens, LUFFY shapes them, SFT imitates them). False (default): guide
            tokens are context like the prompt: out of the loss, ratios, KL and every denominator,
            and a row with only guide tokens has no usable sample.

    Args:
        mask_truncated: drop responses that hit the length limit (no EOS) from the loss, numerator
            and denominator (DAPO's overlong filtering); they still count in group statistics.
        uses_reward: False for objectives that ignore rewards (distillation, SFT): rows with a
            missing reward then still train.

    Attributes:
        needs_first_error: class-level capability; True when the loss reads
            ``RolloutBatch.first_error`` (the judge's first wrong step of each failed rollout), so
            the run switches the rollout engine's ``mark_first_error`` on.
    """

    trains_guide_tokens: bool = False
    needs_first_error: bool = False

    def __init__(self, mask_truncated: bool = False, uses_reward: bool = True):
        self.mask_truncated, self.uses_reward = mask_truncated, uses_reward

    @classmethod
    def context_models(cls, config: Mapping) -> tuple[tuple[str | None, str], ...]:
        """The models an objective built from ``config`` takes from the run's model context, as
        ``(path, dtype)`` pairs (path None: the frozen step-0 policy, e.g. a KL reference); default
        none. Read by the memory plan (:mod:`mintrl.build.memory_plan`) before anything is built."""
        return ()

    def setup(self, policy: torch.nn.Module) -> None:
        """Called once when training starts, with the policy being trained."""

    def token_mask(self, batch: RolloutBatch) -> torch.Tensor:
        """``[N, L]`` bool tokens this objective may train: ``response_mask`` (policy and
        intervention), plus ``guide_mask`` when :attr:`trains_guide_tokens`."""
        return batch.response_mask | batch.guide_mask if self.trains_guide_tokens else batch.response_mask

    def valid_mask(self, batch: RolloutBatch) -> torch.Tensor:
        """``[N]`` bool rows with a usable sample: at least one :meth:`token_mask` token and, when
        ``uses_reward``, a reward. Only these enter group statistics."""
        tokens = self.token_mask(batch)
        return valid_rows(batch.rewards, tokens) if self.uses_reward else tokens.any(-1)

    def extra_tensors(self, batch: RolloutBatch, valid: torch.Tensor, logprob_fn: LogprobFn) -> Prepared:
        """The tensors the loss needs, the rows kept and statistics (override). ``valid`` is
        :meth:`valid_mask` (``[N]`` bool)."""
        return Prepared()

    @torch.no_grad()
    def prepare(self, batch: RolloutBatch, logprob_fn: LogprobFn) -> dict[str, float]:
        """Sets ``batch.train_rows`` ``[N]`` and ``batch.loss_mask`` ``[N, L]`` and stores the
        objective's tensors in ``batch.extras``. Rows train when valid, kept by the objective, and
        (with ``mask_truncated``) finished; truncated rows still count in group statistics.

        Returns:
            the objective's statistics of the batch: ``objective/rows_without_signal``,
            ``objective/truncated_masked`` (with ``mask_truncated``) and its own (counts, floats).
        """
        valid = self.valid_mask(batch)
        prepared = self.extra_tensors(batch, valid, logprob_fn)
        rows = valid if prepared.rows is None else valid & prepared.rows  # [N]
        stats = dict(prepared.stats)
        if self.mask_truncated:
            stats["objective/truncated_masked"] = float((rows & ~batch.finished).sum())
            rows = rows & batch.finished
        batch.extras.update(prepared.tensors)
        batch.train_rows = rows
        batch.loss_mask = self.token_mask(batch) & rows[:, None]  # [N, L]
        stats["objective/rows_without_signal"] = float((~rows).sum())
        return stats

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        """This micro-batch's share of the step loss; ``logprobs`` ``[n, L]`` under pi_theta."""
        raise NotImplementedError
