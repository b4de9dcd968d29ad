"""Per-rank lists gathered on every rank (rank 0 writes them)."""

from __future__ import annotations

import lightning.pytorch as L
import torch.distributed as dist


def gather_parts(trainer: L.Trainer, parts: list) -> list:
    """Every rank's ``parts`` concatenated, rank 0's first (an ``all_gather_object`` collective when
    there are several ranks; the list itself with one)."""
    if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return parts
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, parts)
    return [p for rank in gathered for p in rank]
