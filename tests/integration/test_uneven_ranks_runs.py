"""Two gloo ranks through the real entry point (``mintrl-train trainer=ddp``, and BREAD also under
``trainer=fsdp``), one row per micro-batch: RAIL on the SQL agent (episodes of their own lengths on
each rank; in these 2 steps its shadow trials raise no reward variance, so it keeps no branch and the
ranks hold 4 rows each) and BREAD (a prompt whose 4 rollouts all failed gets 2 guided ones, so the
ranks hold different numbers of rows: 6 and 4 at seed 0) complete 2 steps without a hang, every rank
running as many backwards as the other (zero-loss padding), and end with the same weights. Under
tests/hang_guard.py: a hang fails within the timeout naming each rank's last collective. Before the
padding, the BREAD run hung at its first step (rank 0 with 10 rows waiting in ``_all_ranks_sum``
while rank 1, with 12, was still in its micro-batch backwards)."""

from __future__ import annotations

import time

import pytest
import torch
from distributed_helpers import distributed_run
from hang_guard import op_counts

SMALL = (
    "trainer.max_steps=2",
    "validate_at_start=false",
    "+trainer.limit_val_batches=0",
    "data.prompts.val_size=2",
    "module.micro_batch_rows=1",
    "trainer.precision=32-true",
)


def _rows(record, step: int) -> list[int]:
    return [len(torch.load(record / f"batch_rank{r}_step{step}.pt", weights_only=False)) for r in (0, 1)]


def _check_ranks_agree(tmp_path, record) -> None:
    counts = op_counts(tmp_path / "collectives")
    assert counts[0] == counts[1], counts  # backwards included: the padded rank ran as many
    finals = [torch.load(record / f"final_rank{r}.pt", weights_only=False) for r in (0, 1)]
    for k, v in finals[0]["weights"].items():
        assert torch.equal(v, finals[1]["weights"][k]), k


@pytest.mark.slow  # ~1 min (ddp) / ~2 min (fsdp) on 2 loaded cores
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_bread_with_unequal_rows_completes_two_steps(tmp_path, trainer):
    start = time.monotonic()
    record = distributed_run(
        tmp_path,
        trainer,
        "method=bread",
        "data.prompts_per_step=2",
        "rollout.max_response_tokens=48",
        *SMALL,
        common=(),
        timeout_s=900,
    )
    rows = [_rows(record, step) for step in (0, 1)]
    assert any(a != b for a, b in rows), f"the ranks held equal rows {rows}: the run would not test the padding"
    counts = op_counts(tmp_path / "collectives")
    assert counts[0]["backward"] == sum(max(r) for r in rows), (rows, counts)  # the busiest rank's count, each step
    _check_ranks_agree(tmp_path, record)
    print(f"bread {trainer}: rows per step and rank {rows}, {time.monotonic() - start:.0f} s")


@pytest.mark.slow  # ~1.5 min on 2 loaded cores
def test_rail_on_sql_completes_two_steps(tmp_path):
    start = time.monotonic()
    record = distributed_run(
        tmp_path,
        "ddp",
        "method=rail",
        "preset=cpu_sql",
        "data.prompts_per_step=2",
        "rollout.max_turns=2",
        *SMALL,
        common=(),
        timeout_s=1500,
    )
    lengths = [
        torch.load(record / f"batch_rank{r}_step0.pt", weights_only=False).response_mask.sum(-1).tolist()
        for r in (0, 1)
    ]
    assert lengths[0] != lengths[1]  # rollouts of their own lengths on each rank
    _check_ranks_agree(tmp_path, record)
    print(f"rail: rows per step and rank {[_rows(record, s) for s in (0, 1)]}, {time.monotonic() - start:.0f} s")
