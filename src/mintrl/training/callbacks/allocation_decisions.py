"""The allocation's branch decisions of every training step, one JSON line per executed branch, and the
decision kinds the allocation declares (:attr:`mintrl.allocation.base.Allocation.decision_kinds`) next to them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import lightning.pytorch as L

from mintrl.allocation.base import Allocation
from mintrl.allocation.decisions import KINDS_FILE
from mintrl.core.batch import RolloutBatch
from mintrl.data.datamodule import RolloutDataModule
from mintrl.rollout.engine import RolloutEngine
from mintrl.training.callbacks.gather import gather_parts


def kinds_record(allocation: Allocation) -> dict:
    """What :data:`mintrl.allocation.decisions.KINDS_FILE` holds: ``{"allocation": "<module>.<Class>", "kinds":
    [{"name", "meaning"}, ...]}``, the kinds in the order the allocation's class declares them."""
    cls = type(allocation)
    return {
        "allocation": f"{cls.__module__}.{cls.__qualname__}",
        "kinds": [k.as_record() for k in cls.decision_kinds],
    }


def write_decisions(path: str | Path, allocation: Allocation, records: Sequence[dict]) -> None:
    """Append ``records`` (:meth:`mintrl.allocation.decisions.BranchDecision.as_record` dicts) to the JSON-lines
    file ``path`` and write the allocation's declared kinds (:func:`kinds_record`) to
    :data:`~mintrl.allocation.decisions.KINDS_FILE` in the same folder (rewritten each time: one allocation per
    run). Nothing is written for no records.

    Raises:
        ValueError: a record's ``kind`` is not one the allocation declares (names it and the declared ones).
    """
    if not records:
        return
    declared = {k.name for k in type(allocation).decision_kinds}
    unknown = sorted({r["kind"] for r in records} - declared)
    if unknown:
        raise ValueError(
            f"{type(allocation).__name__} logged decision kinds {unknown} it does not declare "
            f"(decision_kinds: {sorted(declared)})"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    (path.parent / KINDS_FILE).write_text(json.dumps(kinds_record(allocation), indent=1) + "\n")


class AllocationDecisions(L.Callback):
    """After each training step, appends the allocation's decisions of that step
    (:class:`mintrl.allocation.decisions.BranchDecision`: who chose the branch, the action, the
    predicted and the realised gain, kept or discarded) to ``path`` as JSON lines with the step, and
    the kinds the allocation's class declares to ``allocation_kinds.json`` beside it (:func:`write_decisions`).
    RAIL's calibration (predicted vs realised gain), the shadow/live/explore comparison and the decisions
    per kind of ``mintrl-reproduce-agents`` read these files. An allocation that logs no decisions (uniform
    GRPO) writes nothing (no file). Data-parallel ranks send their decisions to rank 0, which alone writes
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
        write_decisions(self.path or Path(trainer.default_root_dir) / "allocation_decisions.jsonl", allocation, records)
