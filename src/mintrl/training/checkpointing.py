"""Checkpoints that are either complete or absent: a kill during a save never leaves a file that
looks like a valid checkpoint but is not (``trainer.plugins`` of every ``trainer=`` config)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``torch.save`` checkpoint IO, written to a temporary file in the same folder,
    flushed to disk, then renamed over the target (``os.replace`` is atomic on POSIX file systems).

    A process killed mid-save leaves ``.<name>.tmp-<pid>`` (ignored by resume, removed by the next
    successful save of the same name) and the previous checkpoint intact.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path`` atomically (see class docstring).

        Raises:
            TypeError: ``storage_options`` given (not supported, as in ``TorchCheckpointIO``).
        """
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            super().save_checkpoint(checkpoint, tmp, storage_options)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by killed runs
            stale.unlink(missing_ok=True)
