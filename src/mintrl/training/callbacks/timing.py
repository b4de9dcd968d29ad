"""Wall-clock time per optimizer step (rollout generation + update), logged as ``perf/step_seconds``."""

from __future__ import annotations

import time

import lightning.pytorch as L

from mintrl.training.step_logging import log_step


class StepTimer(L.Callback):
    """Logs ``perf/step_seconds`` (seconds between the ends of consecutive training steps, so it
    includes rollout generation) and ``perf/update_seconds`` (forward, backward, optimizer)."""

    def __init__(self) -> None:
        self._last_end: float | None = None
        self._start: float | None = None

    def on_train_start(self, trainer, module) -> None:
        self._last_end = time.perf_counter()

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        metrics = {"perf/update_seconds": now - self._start}
        if self._last_end is not None:
            metrics["perf/step_seconds"] = now - self._last_end
        self._last_end = now
        log_step(module, metrics)
