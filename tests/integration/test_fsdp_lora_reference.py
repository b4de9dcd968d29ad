"""A LoRA policy under FSDP2 whose step-0 model is the policy with its adapter off (GRPO's KL
reference, OPD's self-teacher): on 2 gloo ranks (tests/fsdp_lora_reference_worker.py under
:func:`hang_guard.run_ranks`, ~15 s) the reference's log-probs equal the unsharded policy's with its
adapter off, and the policy still trains after them. A rank that fails or hangs fails the test,
naming the rank and its last collective."""

from __future__ import annotations

import json
from pathlib import Path

from hang_guard import run_ranks

WORKER = Path(__file__).resolve().parents[1] / "fsdp_lora_reference_worker.py"


def test_kl_reference_of_a_sharded_lora_policy(tmp_path):
    run_ranks(WORKER, str(tmp_path), out=tmp_path, timeout_s=240, collective_timeout_s=60)
    for rank in (0, 1):
        found = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert found["rank"] == rank
        assert found["adapter_changes_logprobs"] and found["reference_is_adapter_off"]
        assert found["ref_max_diff"] < 1e-5 and found["teacher_max_diff"] < 1e-5
        assert not found["teacher_requires_grad"]
        assert found["adapted_max_diff"] < 1e-5 and found["adapter_grads"]
