"""A few rollouts of every training step as markdown in TensorBoard's text dashboard."""

from __future__ import annotations

import lightning.pytorch as L
from lightning.pytorch.loggers import TensorBoardLogger

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_int
from mintrl.rollout.markdown import intervened_rows, pick_rows, select_rows, step_markdown, with_action_segments
from mintrl.rollout.records import batch_records

TAG = "rollouts/train"  # the text's tag; the writer stores it as "rollouts/train/text_summary" (TEXT tab)


class RolloutText(L.Callback):
    """After each training step, writes ``rollouts`` of the step's rollouts as one markdown text to
    TensorBoard (tag :data:`TAG`, step: the optimizer step the batch trains from, as the rollout
    records' file step; the weights version that generated it, ``batch.step``, is that step at
    ``rollout.max_staleness=0`` and older above).

    Each shown rollout: row, group, control or semi-on-policy; reward and the objective's advantage;
    tokens by provenance; the prompt's last line; the response with intervention tokens marked
    ``[[...]]`` and guide tokens ``{{...}}``, or for an episode its turns in order (action with its
    marks, observation); the judge's verdicts (format: :mod:`mintrl.rollout.markdown`). The rows are
    a seeded pick spread over rollouts with intervention tokens, rewarded and unrewarded ones
    (:func:`mintrl.rollout.markdown.pick_rows`). Token ids are decoded with the policy tokenizer for
    display only.

    Rank 0 only (its own rows under data parallelism); nothing when no logger is a
    ``TensorBoardLogger`` or the batch is not a :class:`RolloutBatch`.

    Args:
        enabled: false: log nothing (``callbacks.rollout_text=null`` drops the callback as well).
        rollouts: rollouts shown per step (rows; >= 1).
        seed: seed of the pick (with the step: the same run shows the same rows).

    Raises:
        ValueError: ``rollouts`` below 1 (the field ``callbacks.rollout_text.rollouts`` is named).
    """

    def __init__(self, enabled: bool = True, rollouts: int = 4, seed: int = 0):
        check_int("callbacks.rollout_text.rollouts", rollouts, 1)
        self.enabled, self.rollouts, self.seed = bool(enabled), int(rollouts), int(seed)
        self._train_step: int | None = None  # the optimizer step the current training batch trains from

    @staticmethod
    def writer(trainer: L.Trainer):
        """The ``SummaryWriter`` of the trainer's first ``TensorBoardLogger``, or None."""
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                return logger.experiment
        return None

    def markdown(self, batch: RolloutBatch, tokenizer, step: int | None = None) -> str:
        """The step's text: the picked rows of ``batch`` as records, rendered
        (:func:`mintrl.rollout.markdown.step_markdown`); ``step``: the optimizer step the batch
        trains from (default ``batch.step``)."""
        step = batch.step if step is None else step
        rewards = batch.rewards.detach().float().cpu().tolist()
        rows = pick_rows(rewards, intervened_rows(batch), self.rollouts, self.seed, step)
        sub = select_rows(batch, rows)
        records = with_action_segments(batch_records(sub, tokenizer, "train", step), sub, tokenizer)
        for record, row in zip(records, rows):
            record["row"] = row  # the row in the step's batch, not in the sub-batch
        return step_markdown(records, "train", step, len(batch))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._train_step = int(trainer.global_step)  # the optimizer step the batch trains from

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.enabled or not trainer.is_global_zero or not isinstance(batch, RolloutBatch):
            return
        writer = self.writer(trainer)
        if writer is None:
            return
        tokenizer = pl_module.tokenizer if pl_module.tokenizer is not None else trainer.datamodule.tokenizer
        step = batch.step if self._train_step is None else self._train_step
        writer.add_text(TAG, self.markdown(batch, tokenizer, step), global_step=step)
