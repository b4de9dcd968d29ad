"""The allocation's branch decisions of every training step, one JSON line per executed branch."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as L

from mintrl.core.batch import RolloutBatch
from mintrl.data.datamodule import RolloutDataModule
from mintrl.rollout.engine import RolloutEngine
from mintrl.training.callbacks.gather import gather_parts


class AllocationDecisions(L.Callback):
    """After each training step, appends the allocation's decisions of that step
    (:class:`mintrl.allocation.decisions.BranchDecision`: who chose the branch, the action, the
    predicted and the realised gain, kept or discarded) to ``path`` as JSON lines with the step.
    RAIL's calibration (predicted vs realised gain) and the shadow/live/explore comparison of
    ``mintrl-reproduce-agents`` read this file. An allocation that logs no decisions (uniform GRPO)
    writes nothing (no file). Data-parallel ranks send their decisions to rank 0, which alone writes
    (``group`` is then the rank's own prompt index).

    Args:
        path: the JSON-lines file (default ``<trainer.default_root_dir>/allocation_decisions.jsonl``).
        enabled: false: write nothing.
    """

    def __init__(self, path: str | None = None, enabled: bool = True):
        self.path, self.enabled = path, bool(enabled)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        data = trainer.datamodule
        if not self.enabled or not isinstance(batch, RolloutBatch) or not isinstance(data, RolloutDataModule):
            return
        engine = data.rollout if isinstance(data.rollout, RolloutEngine) else None
        allocation = engine.allocation if engine is not None else None
        records = [d.as_record(batch.step) for d in allocation.take_decisions()] if allocation is not None else []
        records = gather_parts(trainer, records)
        if not trainer.is_global_zero or not records:
            return
        path = Path(self.path or Path(trainer.default_root_dir) / "allocation_decisions.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
