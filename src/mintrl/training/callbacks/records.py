"""Rollout records of a run: every training and validation rollout, one gzip JSONL file per step."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning.pytorch as L

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_range
from mintrl.rollout.records import RecordWriter, batch_records, concat_records
from mintrl.training.callbacks.gather import gather_parts

log = logging.getLogger(__name__)


class RolloutRecords(L.Callback):
    """Writes every rollout of every training step and validation to
    ``<dirpath>/train/step_<N>.jsonl.gz`` and ``<dirpath>/val/step_<N>.jsonl.gz`` (format:
    :mod:`mintrl.rollout.records`; read with ``mintrl-rollouts``).

    Training records are written after the step's updates, so they carry the objective's
    advantages; validation records when the validation ends (file step: the optimizer steps done
    when it ran). Data-parallel ranks send their records to rank 0, which alone writes. Logged on
    each write (rank 0): ``records/dropped`` (records not written because of the cap, rows, since
    the run started) and ``records/mib`` (compressed size of the run's record files, MiB).

    Args:
        dirpath: the records folder (default ``<trainer.default_root_dir>/rollouts``).
        enabled: false: write nothing.
        max_mib: cap on the compressed size of the run's record files (MiB; > 0; null: no cap);
            once reached, writing stops (see :class:`mintrl.rollout.records.RecordWriter`).

    Raises:
        ValueError: ``max_mib`` not positive.
    """

    def __init__(self, dirpath: str | None = None, enabled: bool = True, max_mib: float | None = 64.0):
        self.dirpath, self.enabled, self.max_mib = dirpath, bool(enabled), max_mib
        check_range("callbacks.records.max_mib", max_mib, 0, low_open=True, none_ok=True)
        self.writer: RecordWriter | None = None
        self._val: list[tuple[int, list[dict]]] = []
        self._warned = False
        self._train_step: int | None = None  # the optimizer step the current training batch trains from

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.writer is None:
            root = Path(self.dirpath or Path(trainer.default_root_dir) / "rollouts")
            self.writer = RecordWriter(root, self.max_mib)

    def _write(self, trainer: L.Trainer, split: str, step: int, parts: list[tuple[int, list[dict]]]) -> None:
        """Gather ``parts`` on rank 0, write them, log the counters."""
        parts = gather_parts(trainer, parts)
        if not trainer.is_global_zero:
            return
        self.writer.write(split, step, concat_records(parts))
        if self.writer.full and not self._warned:
            self._warned = True
            log.warning(
                "rollout records reached callbacks.records.max_mib=%s MiB at %s step %d: no more records are "
                "written (records/dropped counts them)",
                self.max_mib,
                split,
                step,
            )
        if trainer.logger is not None:
            trainer.logger.log_metrics(
                {"records/dropped": float(self.writer.dropped), "records/mib": self.writer.bytes_written / 2**20},
                step=step,
            )

    @staticmethod
    def _tokenizer(trainer, pl_module):
        """The policy tokenizer: the module's, else the data module's."""
        return pl_module.tokenizer if pl_module.tokenizer is not None else trainer.datamodule.tokenizer

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # the optimizer step the batch trains from: the file's step (batch.step, the weights version that
        # sampled it, is older with rollout.max_staleness > 0, where two batches may share it)
        self._train_step = int(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.enabled or not isinstance(batch, RolloutBatch):
            return
        step = batch.step if self._train_step is None else self._train_step
        records = batch_records(batch, self._tokenizer(trainer, pl_module), "train", step)
        self._write(trainer, "train", step, [(batch.num_groups, records)])

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not self.enabled or trainer.sanity_checking or not isinstance(batch, RolloutBatch):
            return
        self._val.append(
            (batch.num_groups, batch_records(batch, self._tokenizer(trainer, pl_module), "val", trainer.global_step))
        )

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not self.enabled or trainer.sanity_checking:
            return
        parts, self._val = self._val, []
        self._write(trainer, "val", trainer.global_step, parts)
