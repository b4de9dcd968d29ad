"""The python part of the offline GPU check (benchmarks/gpu_check.py) on CPU: one LoRA main-job step
on the tiny architecture with the embedded tokenizer, and the FSDP part's update + export through
``trainer=fsdp``'s own strategy (FSDP2 via Lightning's ModelParallelStrategy on one gloo rank, as on
one GPU). What it prints on a GPU is in benchmarks/README.md."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from mintrl.model.loading import embedded_smollm2_folder

ROOT = Path(__file__).resolve().parents[2]
# tiny arch: hidden 64, intermediate 128, 4 heads of 16 dims, 2 KV heads; LoRA r 16 adds r (in + out)
# per linear layer: q 64+64, k 64+32, v 64+32, o 64+64, gate 64+128, up 64+128, down 128+64 = 1024
TINY_ADAPTER = 2 * 16 * 1024


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    return gpu_check


def test_the_fsdp_part_runs_the_fsdp_strategy_on_cpu(tmp_path):
    """The FSDP part shards the LoRA policy with trainer=fsdp's strategy (not Lightning's default
    single-device one), updates it once and exports the merged model and the adapter (~25 s)."""
    gpu_check = load_gpu_check()
    out = tmp_path / "check.json"
    args = ["--device", "cpu", "--archs", "tiny", "--parts", "fsdp-lora", "--json", str(out)]
    environ = dict(os.environ)
    assert gpu_check.main([*args, "--tokenizer", str(embedded_smollm2_folder())]) == 0
    # Lightning's MASTER_PORT would send a later 2-rank run in this process to a port still held (EADDRINUSE)
    assert dict(os.environ) == environ
    fsdp = json.loads(out.read_text())["tiny/fsdp-lora"]
    assert fsdp["strategy"] == "FullyShardedStrategy" and fsdp["sharded"]
    assert "model.safetensors" in fsdp["exported"] and "adapter_config.json" in fsdp["adapter"]


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_with_the_tiny_architecture(tmp_path):
    gpu_check = load_gpu_check()
    out = tmp_path / "check.json"
    args = ["--device", "cpu", "--steps", "1", "--archs", "tiny", "--parts", "lora,fsdp-lora"]
    assert gpu_check.main([*args, "--tokenizer", str(embedded_smollm2_folder()), "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    lora, fsdp = results["tiny/lora"], results["tiny/fsdp-lora"]
    assert lora["steps"] == 1 and lora["trainable"] == TINY_ADAPTER
    assert len(lora["update_s"]) == len(lora["tokens"]) == 1 and lora["tokens"][0] > 8 * 4 * 8
    # the update's FLOPs are those of what it forwarded: one micro-batch, 8 groups of 4 rollouts, each
    # group's prompt once (prompt sharing), the adapter on top of the frozen base; no MFU on CPU
    (micro,) = lora["update_batches"][0]
    assert micro["shared"] and len(micro["prompts"]) == 8 and [len(r) for r in micro["responses"]] == [4] * 8
    dims = gpu_check.ModelDims.from_config(gpu_check.ARCHS["tiny"])
    flops = gpu_check.update_flops(dims, micro["prompts"], micro["responses"], True, lora_params=TINY_ADAPTER)
    assert lora["update_flops"] == [flops] and lora["mfu"] is None
    assert fsdp["strategy"] == "FullyShardedStrategy" and fsdp["sharded"]
    assert "model.safetensors" in fsdp["exported"] and "adapter_config.json" in fsdp["adapter"]


@pytest.mark.slow  # a spawned sampler worker and 2 tiny steps: 20-40 s on the shared 2-core machine
def test_the_stale_part_trains_on_rollouts_one_step_ahead_from_a_sampler_process(tmp_path):
    gpu_check = load_gpu_check()
    out = tmp_path / "check.json"
    args = ["--device", "cpu", "--steps", "2", "--archs", "tiny", "--parts", "stale", "--json", str(out)]
    assert gpu_check.main([*args, "--tokenizer", str(embedded_smollm2_folder())]) == 0
    stale = json.loads(out.read_text())["tiny/stale"]
    assert stale["steps"] == 2 and stale["staleness"] == [0.0, 1.0]  # batch 1 sampled by the weights of step 0
    assert not [p for p in multiprocessing.active_children() if p.name == "mintrl-sampler"]
