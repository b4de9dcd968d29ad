"""Per-step scalars written straight to the run's loggers, only the keys present at that step.

``LightningModule.log_dict(on_step=True)`` keeps every key it has seen in the epoch's result
collection and writes each one again at every later step with its last value: a quantity undefined
at a step (the semi-on-policy reward after the intervention phase, an action kind no episode used)
would be logged as a copy of an older step's value. :func:`log_step` writes to the loggers
directly, at the step Lightning itself uses for its training-step logs, so an omitted key has no
point at that step (TensorBoard draws the line between the steps that have one).
"""

from __future__ import annotations

from typing import Mapping

import lightning.pytorch as L


def logging_step(module: L.LightningModule) -> int:
    """The step index Lightning gives the current training step's logged metrics (optimizer
    steps taken before this batch: the fit loop's ``_batches_that_stepped``)."""
    return int(module.trainer.fit_loop.epoch_loop._batches_that_stepped)


def log_step(module: L.LightningModule, metrics: Mapping[str, float]) -> None:
    """Write ``metrics`` (name -> float) to every logger of ``module``'s trainer at
    :func:`logging_step`; loggers write on global rank 0 only (Lightning's ``rank_zero_only``)."""
    if not metrics:
        return
    step = logging_step(module)
    for logger in module.loggers:
        logger.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)
