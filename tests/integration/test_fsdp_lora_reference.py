"""A LoRA policy under FSDP2 whose step-0 model is the policy with its adapter off (GRPO's KL
reference, OPD's self-teacher): on 2 gloo ranks (tests/fsdp_lora_reference_worker.py under torchrun,
~20 s) the reference's log-probs equal the unsharded policy's with its adapter off, and the policy
still trains after them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_kl_reference_of_a_sharded_lora_policy(tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    try:
        done = subprocess.run(
            [*cmd, str(TESTS / "fsdp_lora_reference_worker.py"), str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired as hung:  # the workers' collectives time out after 60 s: never here
        raise AssertionError(f"2-rank LoRA reference run hung past 240 s: {str(hung.stderr)[-2000:]}") from None
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for found in ranks:
        assert "error" not in found, f"rank {found['rank']}: {found['error']}"
    assert done.returncode == 0, done.stderr[-4000:]
    for found in ranks:
        assert found["adapter_changes_logprobs"] and found["reference_is_adapter_off"]
        assert found["ref_max_diff"] < 1e-5 and found["teacher_max_diff"] < 1e-5
        assert not found["teacher_requires_grad"]
        assert found["adapted_max_diff"] < 1e-5 and found["adapter_grads"]
