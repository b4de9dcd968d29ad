"""Checkpoints that are either complete or absent: a kill during a save never leaves a file (or a
sharded folder) that looks like a valid checkpoint but is not (``trainer.plugins`` of every
``trainer=`` config; sharded folders: :meth:`mintrl.training.distributed.FullyShardedStrategy.save_checkpoint`),
and the helpers that find, resume and read either kind."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
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
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by killed runs (a sharded save's: folders)
            _remove(stale)


# ---------------------------------------------------------------- sharded checkpoints (trainer=fsdp)
SHARDED_METADATA = "meta.pt"  # Lightning's file of everything but weights and optimizer state
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint's index of the shards


def is_sharded_checkpoint(path) -> bool:
    """``path`` is a complete sharded checkpoint folder: Lightning's ``meta.pt`` and the
    ``torch.distributed.checkpoint`` index ``.metadata`` (written last by each)."""
    p = Path(path)
    return p.is_dir() and (p / SHARDED_METADATA).is_file() and (p / DCP_METADATA).is_file()


def is_checkpoint(path) -> bool:
    """``path`` is a checkpoint a run can resume from: a file (single-process, DDP, ``state_dict_type=full``)
    or a complete sharded folder (:func:`is_sharded_checkpoint`)."""
    return Path(path).is_file() or is_sharded_checkpoint(path)


def temporary_path(target, pid: int) -> Path:
    """Where a save of ``target`` writes before the rename: ``.<name>.tmp-<pid>`` beside it."""
    target = Path(target)
    return target.with_name(f".{target.name}.tmp-{pid}")


def aside_path(target, pid: int) -> Path:
    """Where a sharded save moves the previous ``target`` between its two renames: ``.<name>.old-<pid>``."""
    target = Path(target)
    return target.with_name(f".{target.name}.old-{pid}")


def checkpoint_to_resume(target) -> Path | None:
    """The checkpoint at ``target``, or, when a sharded save was killed between moving the previous
    checkpoint aside and renaming the new one into place (:func:`put_in_place`), the complete
    checkpoint it set aside (the newest); None when there is neither. Read-only: every rank may call it."""
    target = Path(target)
    if is_checkpoint(target):
        return target
    aside = [p for p in target.parent.glob(f".{target.name}.old-*") if is_checkpoint(p)]
    return max(aside, key=lambda p: p.stat().st_mtime) if aside else None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def put_in_place(complete: Path, target: Path) -> None:
    """Move the complete checkpoint folder ``complete`` to ``target``: the previous ``target`` (file
    or folder) is renamed aside, ``complete`` renamed to ``target``, then the aside one and what
    killed saves left (``.<name>.tmp-*``, ``.<name>.old-*``) are removed. A folder cannot replace a
    non-empty folder in one rename; a kill between the two renames leaves the previous checkpoint
    aside, complete, and :func:`checkpoint_to_resume` finds it. Run by one process only."""
    complete, target = Path(complete), Path(target)
    aside = aside_path(target, os.getpid())
    if target.exists() or target.is_symlink():
        os.replace(target, aside)
    os.replace(complete, target)
    _fsync_dir(target.parent)
    for stale in [*target.parent.glob(f".{target.name}.tmp-*"), *target.parent.glob(f".{target.name}.old-*")]:
        _remove(stale)


def _fsync_dir(folder: Path) -> None:
    """Make the renames in ``folder`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path) -> None:
    """Flush ``path``'s contents to disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def load_sharded_policy(policy: torch.nn.Module, folder, prefix: str = "policy.") -> None:
    """Load the ``<prefix>*`` weights of a sharded Lightning checkpoint folder into an unsharded
    ``policy`` in this one process (``torch.distributed.checkpoint`` without a process group reads
    every rank's shards; the optimizer state is not read). Weights tied to a loaded one (a tied
    ``lm_head``) need not be in the checkpoint.

    Raises:
        ValueError: ``folder`` is not a sharded checkpoint, holds no ``<prefix>*`` weights, or
            misses some of ``policy``'s (names listed).
    """
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    if not is_sharded_checkpoint(folder):
        raise ValueError(f"{folder}: not a sharded checkpoint folder (no {SHARDED_METADATA} and {DCP_METADATA})")
    stored = set(dcp.FileSystemReader(str(folder)).read_metadata().state_dict_metadata)
    live = policy.state_dict()
    present = {k: v for k, v in live.items() if f"state_dict.{prefix}{k}" in stored}
    if not present:
        raise ValueError(f"{folder}: no {prefix}* weights in its state_dict (is it a mintrl checkpoint?)")
    loaded_ptrs = {v.data_ptr() for v in present.values()}
    missing = [k for k, v in live.items() if k not in present and v.data_ptr() not in loaded_ptrs]
    if missing:
        raise ValueError(f"{folder}: weights do not fit the model config: missing {missing[:5]}")
    state = {"state_dict": {f"{prefix}{k}": v for k, v in present.items()}}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(folder), no_dist=True)  # in place, into policy's own tensors
    with torch.no_grad():
        for k, v in state["state_dict"].items():  # where the loader gave new tensors rather than filling ours
            target = present[k[len(prefix) :]]
            if v is not target:
                target.copy_(v)
