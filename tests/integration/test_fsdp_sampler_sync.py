"""The samplers of an FSDP2-sharded policy as a GPU run meets them, on 2 gloo ranks
(tests/fsdp_sampler_worker.py under torchrun, ~20 s; a fake ``vllm``, tests/fake_vllm.py): the vLLM
engine started in Lightning's launcher environment (no ``RANK``) from a folder each rank writes for
itself (a hub-id policy), the first weight push under inference mode, streamed, each sharded tensor
gathered once; a ``foreach`` AdamW step that the tensor versions miss and the weights generation
catches; the export's gather."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp_sampler")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        str(TESTS / "fsdp_sampler_worker.py"),
    ]
    try:
        done = subprocess.run([*cmd, str(out)], env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as hung:  # the workers' collectives time out after 60 s: never here
        raise AssertionError(f"2-rank sampler run hung past 240 s: {str(hung.stderr)[-3000:]}") from None
    assert done.returncode == 0, done.stderr[-4000:]
    found = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in found:
        errors = {k: v for k, v in rank.items() if k.endswith("_error")}
        assert not errors, f"rank {rank['rank']}: {errors}"
    return found


def test_the_engine_starts_in_lightnings_launcher_environment(ranks):
    """vLLM's external launcher reads RANK and LOCAL_RANK; Lightning sets only LOCAL_RANK: the
    sampler sets RANK from the process group. The GPU backend comes from the accelerator (the
    policy's tensors are on the CPU here)."""
    for r, found in enumerate(ranks):
        assert found["backend"] == "external_launcher"
        assert found["launcher"] == {"rank": r, "local_rank": r}
        assert found["engine_seed"] == 3 + r


def test_every_rank_starts_its_engine_from_a_complete_folder(ranks):
    """A hub-id policy: each rank writes the folder its engine loads (``save_pretrained`` writes on
    rank 0 only), the tied head once, equal to the gathered weights."""
    for found in ranks:
        assert found["folder_exact"]
        assert found["folder_names"] == found["expected_names"]  # every weight but the tied head
        assert "model.embed_tokens.weight" in found["folder_names"]


def test_the_push_under_inference_mode_streams_one_tensor_gathered_once(ranks):
    for found in ranks:
        assert found["push_in_inference_mode"] == [True]
        assert found["push_exact"]
        assert found["push_peak_alive"] == 1
        assert sorted(found["push_names"]) == sorted([*found["folder_names"], "lm_head.weight"])  # the tied head too
        # the start folder and the push: each sharded parameter gathered once each time
        assert found["start_and_push_gathers"] == 2 * found["distinct_params"]


def test_a_foreach_step_the_versions_miss_reaches_the_copy_and_the_engine(ranks):
    for found in ranks:
        assert found["weights_moved"] and found["versions_unchanged"], "the premise: foreach on DTensors"
        assert (found["copy_refreshes_before"], found["copy_refreshes_after"]) == (1, 2)
        assert found["copy_exact"]
        assert found["second_push"] and found["second_push_exact"]
        assert found["second_push_gathers"] == found["distinct_params"]


def test_the_export_gathers_each_tensor_once_and_rank_0_keeps_them(ranks):
    zero, one = ranks
    assert zero["export_gathers"] == one["export_gathers"] == zero["distinct_params"]
    assert zero["export_exact"] and "lm_head.weight" not in zero["export_kept"]
    assert one["export_kept"] is None


def _scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = []
    for event in folder.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(event))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            values += [(s.step, s.value) for s in acc.Scalars(tag)]
    return sorted(values)


@pytest.mark.slow  # 2 training processes, 2 steps: ~3 min on 2 cores
def test_a_foreach_optimizer_through_the_entry_point_keeps_the_rollouts_on_policy(tmp_path):
    """``mintrl-train trainer=fsdp +module.optimizer.foreach=true`` (the optimizer path CUDA takes for
    DTensors, whose steps leave the tensor versions): the second batch is sampled from the updated
    weights, so the rollout log-probs equal the trainer's at its first update (fp32 copy, no
    recomputation) as at the first batch; a copy left at step 0 differs by the SGD step (lr 0.5)."""
    from distributed_helpers import distributed_run

    distributed_run(tmp_path, "fsdp", "trainer.max_steps=2", "+module.optimizer.foreach=true", "objective=sft")
    gaps = _scalars(tmp_path / "run", "train/sampler_logprob_gap")
    assert [step for step, _ in gaps] == [0, 1], gaps
    assert all(gap < 1e-4 for _, gap in gaps), gaps
