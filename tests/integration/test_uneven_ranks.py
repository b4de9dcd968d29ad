"""Data-parallel ranks holding different numbers of rollouts of different lengths (RAIL, entropy
branching, BREAD's guided rollouts give each rank its own count) run the same collectives: every
rank runs as many micro-batch backwards and sharded no-grad forwards as the busiest one (the others
pad with zero-loss micro-batches), and an untied LM head under FSDP is gathered once per forward
whatever the response length; the gradients still equal the single-process gradients on the union.
Two gloo ranks (tests/uneven_ranks_worker.py) under tests/hang_guard.py: a hang fails within the
timeout, naming each rank's last collective."""

from __future__ import annotations

from pathlib import Path

import pytest
from hang_guard import op_counts, run_ranks

WORKER = Path(__file__).resolve().parents[1] / "uneven_ranks_worker.py"


def _close(found: dict) -> bool:
    return found["max_grad"] > 1e-3 and found["max_diff"] <= 1e-6 + 1e-5 * found["max_grad"]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    out = tmp_path_factory.mktemp("uneven")
    run_ranks(WORKER, str(out), "fsdp", "ddp", "head", out=out, timeout_s=240, collective_timeout_s=60)
    return out


def _read(out: Path, part: str) -> list[dict]:
    import json

    return [json.loads((out / f"{part}_rank{r}.json").read_text()) for r in (0, 1)]


def test_fsdp_ranks_with_different_rows_equal_the_union_gradient(uneven):
    for found in _read(uneven, "fsdp"):
        assert _close(found["update"]), found
        assert _close(found["empty_rank_update"]), found  # rank 1 held no row: it only padded


def test_ddp_ranks_with_different_rows_equal_the_union_gradient(uneven):
    for found in _read(uneven, "ddp"):
        assert _close(found["update"]), found


def test_every_rank_enters_the_same_collectives(uneven):
    counts = op_counts(uneven)
    assert counts[0] == counts[1], counts
    assert counts[0]["backward_allreduce(DDP)"] == 5  # rank 1's 3 rows + 2 zero-loss micro-batches
    assert counts[0]["reduce_scatter_single"] > 0 and counts[0]["all_gather_single"] > 0


def test_the_untied_head_is_gathered_once_per_forward_whatever_the_length(uneven):
    for found in _read(uneven, "head"):
        assert found["targets2"] == found["targets8"], found  # 1 head block vs 4
        assert found["targets8"]["no_grad_gathers"] == 5  # embedding, 2 layers, root, head: each once
        assert found["head_grad"] > 0


def test_a_hang_fails_naming_the_rank_and_the_collective(tmp_path):
    with pytest.raises(AssertionError) as failure:
        run_ranks(WORKER, str(tmp_path), "mismatch", out=tmp_path, timeout_s=60, collective_timeout_s=3)
    message = str(failure.value)
    assert "rank 0: last collective entered #1 all_reduce from uneven_ranks_worker.py" in message, message
    assert "first difference at collective #1: rank 0: all_reduce from" in message, message
    assert "; rank 1: barrier from uneven_ranks_worker.py" in message, message
