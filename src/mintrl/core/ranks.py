"""Data-parallel ranks as ``torch.distributed`` sees them: how many there are, sums over them, and
a global quantity's share per rank.

The layers below ``training`` (the rollout engine) have no Trainer. Lightning's data-parallel
strategies (DDP, FSDP) initialise ``torch.distributed``'s default process group over every rank,
which is what these read; one process, or no process group, is one rank and no collective runs.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist


def data_parallel_size() -> int:
    """Ranks of the default process group (count); 1 without one."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_ranks_sum(values: Sequence[float]) -> list[float]:
    """``values`` summed element-wise over every rank (float64; an ``all_reduce`` collective that
    every rank must call with as many values when there are several ranks; the values themselves,
    unchanged, with one)."""
    if data_parallel_size() == 1:
        return [float(v) for v in values]
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    summed = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    return summed.tolist()


def rank_share(total: int, ranks: int, field: str) -> int:
    """A per-step quantity of all ranks together (``total``) split evenly over ``ranks`` ranks.

    Raises:
        ValueError: ``total`` is not a multiple of ``ranks`` (names ``field``).
    """
    if total % ranks:
        raise ValueError(
            f"{field}={total} counts all {ranks} data-parallel ranks together and is split evenly over "
            f"them: it must be a multiple of {ranks} (trainer.devices x trainer.num_nodes)"
        )
    return total // ranks
