"""Run by tests/integration/test_uneven_ranks.py as 2 gloo ranks (:func:`hang_guard.run_ranks`):
the ranks hold different numbers of rollouts with different response lengths (rank 0 rows 0-4, rank
1 rows 5-7 of tests/update_helpers.py's batch: 5 vs 3 rows of 1-7 response tokens), one row per
micro-batch, an untied LM head in blocks of 2 positions. Under FSDP2 (sharded as
:class:`mintrl.training.distributed.FullyShardedStrategy` does) each rank recomputes its rollout
log-probs (sharded no-grad forwards), prepares and accumulates one update, then one update in which
rank 1 has no row at all; under DDP (the reducer prepared before every backward, as Lightning's
manual optimisation does) the same update. Each rank writes ``<out>/<part>_rank<r>.json`` with the
largest difference between its gradients and the single-process gradients on the union.

Usage: ``uneven_ranks_worker.py <out> <part>...`` with parts ``fsdp``, ``ddp``, ``head``
(and ``mismatch``: rank 0 enters one all-reduce more, for the harness's own test)."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from conftest import tiny_llama
from hang_guard import init_gloo, note, op_counts
from lightning.pytorch.overrides.distributed import prepare_for_backward
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel
from update_helpers import rollout_batch

from mintrl.model.logprobs import token_logprobs
from mintrl.objective import SupervisedNLL
from mintrl.objective.aggregation import StepTotals, step_totals
from mintrl.training.distributed import FullyShardedStrategy
from mintrl.training.module import PolicyModule

ROWS = {0: [0, 1, 2, 3, 4], 1: [5, 6, 7]}  # different row counts; response lengths 5,2,7,1,4 vs 6,3,5
EMPTY_UPDATE = {0: [0, 1], 1: []}  # an update in which rank 1 holds no row
CHUNK = 2  # LM-head block (positions): a row of 1-7 response tokens needs 1-4 blocks


def tiny() -> torch.nn.Module:
    return tiny_llama(vocab=128, tie_word_embeddings=False)  # seed 0: the same weights on every call


def module_of(policy) -> PolicyModule:
    return PolicyModule(
        policy,
        SupervisedNLL(),
        partial(torch.optim.SGD, lr=0.1),
        micro_batch_rows=1,
        logprob_chunk_tokens=CHUNK,
        max_grad_norm=None,
    )


def union_batch():
    """The 8 rows of both ranks (rollout log-probs from the unsharded model)."""
    return rollout_batch(tiny(), n=8)


def all_ranks_totals(mini) -> StepTotals:
    """:func:`step_totals` summed over the ranks (what ``PolicyModule.global_totals`` does under Lightning)."""
    totals = step_totals(mini.loss_mask)
    counts = torch.stack([totals.tokens, totals.sequences, totals.rows.to(totals.tokens)])
    dist.all_reduce(counts)
    return StepTotals(counts[0], counts[1], counts[2])


def full_grads(policy) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in policy.named_parameters():
        g = p.grad
        out[name] = g.full_tensor() if hasattr(g, "full_tensor") else g.clone()
    return out


def reference_grads(rows_per_update: list[list[int]]) -> list[dict[str, torch.Tensor]]:
    """Single-process gradients of each update on the union of the ranks' rows (one process, all rows)."""
    out = []
    for rows in rows_per_update:
        policy = tiny()
        module = module_of(policy)
        batch = union_batch().select(torch.tensor(rows, dtype=torch.long))
        module.objective.prepare(batch, module.frozen_logprobs)
        module.accumulate(batch, step_totals(batch.loss_mask))
        out.append(full_grads(policy))
    return out


def compare(found: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, float]:
    diff = max((found[k] - v).abs().max().item() for k, v in ref.items())
    return {"max_diff": diff, "max_grad": max(v.abs().max().item() for v in ref.values())}


def fsdp_part(rank: int) -> dict:
    policy = tiny()
    strategy = FullyShardedStrategy()
    strategy._device_mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    strategy.shard_policy(policy)
    module = module_of(policy)
    refs = reference_grads([ROWS[0] + ROWS[1], EMPTY_UPDATE[0] + EMPTY_UPDATE[1]])
    mine = union_batch().select(torch.tensor(ROWS[rank]))
    module.recompute_logprobs(mine)  # sharded no-grad forwards: 5 rows vs 3
    module.objective.prepare(mine, module.frozen_logprobs)
    module.accumulate(mine, all_ranks_totals(mine), world_size=2)
    found = {"update": compare(full_grads(policy), refs[0])}
    for p in policy.parameters():
        p.grad = None
    mine = union_batch().select(torch.tensor(EMPTY_UPDATE[rank], dtype=torch.long))
    module.objective.prepare(mine, module.frozen_logprobs)
    module.accumulate(mine, all_ranks_totals(mine), world_size=2)
    found["empty_rank_update"] = compare(full_grads(policy), refs[1])
    return found


def ddp_part(rank: int) -> dict:
    policy = tiny()
    ddp = DistributedDataParallel(policy)
    module = module_of(policy)
    (ref,) = reference_grads([ROWS[0] + ROWS[1]])

    def backward(loss):
        note("backward_allreduce(DDP)")
        prepare_for_backward(ddp, loss)  # what Lightning's DDP strategy does before each manual backward
        loss.backward()

    mine = union_batch().select(torch.tensor(ROWS[rank]))
    module.objective.prepare(mine, module.frozen_logprobs)
    module.accumulate(mine, all_ranks_totals(mine), world_size=2, backward=backward)
    return {"update": compare(full_grads(policy), ref)}


def gathers(out: Path, rank: int) -> int:
    """FSDP all-gathers this rank has entered so far."""
    return op_counts(out).get(rank, {}).get("all_gather_single", 0)


def head_part(rank: int, out: Path) -> dict:
    """FSDP all-gathers of a no-grad forward, and of a forward + backward, of one row on the sharded
    untied policy, for 2 target positions (1 head block) and for 8 (4 blocks); the same counts mean
    the head is gathered once per forward whatever the response length."""
    policy = tiny()
    strategy = FullyShardedStrategy()
    strategy._device_mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    strategy.shard_policy(policy)
    ids = torch.randint(3, 128, (1, 12), generator=torch.Generator().manual_seed(rank))
    found = {}
    for targets in (2, 8):
        target = torch.zeros_like(ids, dtype=torch.bool)
        target[:, 12 - targets :] = True
        before = gathers(out, rank)
        with torch.no_grad():
            token_logprobs(policy, ids, torch.ones_like(ids), target, chunk_tokens=CHUNK)
        middle = gathers(out, rank)
        lp, _ = token_logprobs(policy, ids, torch.ones_like(ids), target, chunk_tokens=CHUNK)
        lp.sum().backward()
        found[f"targets{targets}"] = {"no_grad_gathers": middle - before, "grad_gathers": gathers(out, rank) - middle}
    found["head_grad"] = float(full_grads(policy)["lm_head.weight"].abs().sum())
    return found


def main(out: Path, parts: list[str]) -> None:
    rank = init_gloo(timeout_s=20)
    torch.manual_seed(0)
    for part in parts:
        if part == "fsdp":
            found = fsdp_part(rank)
        elif part == "ddp":
            found = ddp_part(rank)
        elif part == "mismatch":  # the hang guard's own test: rank 0 enters one all-reduce more
            if rank == 0:
                dist.all_reduce(torch.ones(1))
            found = {}
        else:
            found = head_part(rank, out)
        (out / f"{part}_rank{rank}.json").write_text(json.dumps(found))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
