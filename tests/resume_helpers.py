"""Callbacks for tests/test_resume.py, imported by the training subprocesses through PYTHONPATH."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning.pytorch as L

KEYS = ("train/loss", "reward/control", "reward/all", "rollout/response_len", "train/grad_norm")


class StepLog(L.Callback):
    """Appends ``{"step", KEYS..., "questions"}`` of every training step to ``path`` (jsonl): the
    scalars the module logged for the step (``module.history``, of all ranks);
    with several ranks each rank to ``<path>.rank<r>`` (its own prompts and scalars)."""

    def __init__(self, path: str):
        self.path = Path(path)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        logged = module.history[-1] if module.history else {}  # this step's scalars (written to the loggers directly)
        row = {"step": trainer.global_step, **{k: float(logged[k]) for k in KEYS if k in logged}}
        row["questions"] = [p.question for p in batch.prompts]
        path = (
            self.path if trainer.world_size == 1 else self.path.with_name(f"{self.path.name}.rank{trainer.global_rank}")
        )
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")


class HangAt(L.Callback):
    """At the start of optimizer step ``step`` (its checkpoint of the previous step written), write
    ``marker`` and hang, so that the test can SIGKILL the process at a known point."""

    def __init__(self, step: int, marker: str):
        self.step, self.marker = step, Path(marker)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.step:
            self.marker.write_text(str(trainer.global_step))
            time.sleep(600)


class SaveBeforeUpdate(L.Callback):
    """Writes ``path`` with ``trainer.save_checkpoint`` right before optimizer step ``step + 1``,
    i.e. after ``step`` updates: inside a training step when a rollout batch makes several updates
    (a mid-batch checkpoint)."""

    def __init__(self, step: int, path: str):
        self.step, self.path = step, path

    def on_before_optimizer_step(self, trainer, module, optimizer):
        if trainer.global_step == self.step and not Path(self.path).exists():
            trainer.save_checkpoint(self.path)
