"""The pass@k metric reduced over two real data-parallel ranks (gloo, 2 processes)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mintrl.metrics.pass_at_k import PassAtK


def _rank(rank: int, port: int, queue) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    metric = PassAtK(ks=[1, 2])
    shard = [
        torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0]]),  # rank 0: one problem, c = 2
        torch.tensor([[0.0] * 5, [1.0] * 5]),
    ][rank]  # rank 1: two problems, c = 0 and 5
    metric.update(shard)
    queue.put((rank, metric.compute()))
    dist.destroy_process_group()


def test_metric_reduces_over_two_real_ranks():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    # the mean over all three problems, not the mean of the two ranks' means (0.4 and 0.5)
    expected = {1: (0.4 + 0.0 + 1.0) / 3, 2: (0.7 + 0.0 + 1.0) / 3}
    for rank in (0, 1):
        assert results[rank] == pytest.approx(expected)
