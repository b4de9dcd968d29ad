"""FSDP2 pieces on 2 gloo ranks with a tiny Llama (tests/fsdp_worker.py under torchrun, ~20 s):
units, lossless gathers, a clipped step equal to the single-process step, fp32 gradients and
buffers under bf16 autocast, LoRA on a bf16 base, and sampling without collectives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mintrl.model.loading import embedded_smollm2_folder

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(TESTS / "fsdp_worker.py")]
    done = subprocess.run(
        [*cmd, str(out), str(embedded_smollm2_folder())], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_units_and_gathers(ranks):
    for found in ranks:
        assert found["sharded"] and found["units"] == 3  # 2 decoder layers + the root (tied embedding and head)
        assert found["untied_units"] == 5  # + the embedding and the head, each its own unit
        assert found["gather_exact"]  # shard then gather: every tensor bit for bit


def test_clipped_step_equals_the_single_process_step(ranks):
    for found in ranks:
        assert found["ref_norm"] > 4 * 0.05  # clipping acts
        assert abs(found["norm"] - found["ref_norm"]) < 1e-5 * found["ref_norm"]
        assert found["step_max_move"] > 1e-3
        assert found["step_max_diff"] < 1e-6


def test_bf16_autocast_keeps_gradients_and_buffers_in_fp32(ranks):
    for found in ranks:
        assert found["mixed_grad_dtypes"] == ["torch.float32"]
        assert found["mixed_buffer_dtypes"] == ["torch.float32"]  # rotary inv_freq


def test_lora_on_a_bf16_base_shards_trains_and_merges_exactly(ranks):
    for found in ranks:
        assert found["lora_trains"] and found["lora_merged_moved"] and found["lora_merge_exact"]


def test_ranks_sample_independently_from_an_exact_copy(ranks):
    assert [found["generated_rows"] for found in ranks] == [1, 2]
    for found in ranks:
        assert found["copy_exact"] and found["exact_logprobs"]
