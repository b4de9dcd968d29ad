"""Lightning DDP on CPU (2 processes, gloo) through the real entry point (``trainer=ddp``): each
rank generates rollouts for its own prompts, gradients are averaged, and one step equals the
single-process step on the union of the two ranks' batches; rank 0 alone writes logs, checkpoints
and the exported policy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from mintrl.eval.rollouts import read_records
from mintrl.objective.aggregation import step_totals
from mintrl.rollout.batch import concat_batches
from mintrl.rollout.records import record_path
from mintrl.training.build import build_components

TESTS = Path(__file__).resolve().parents[1]  # tests/: its helper modules (ddp_recorder, resume_helpers)
CONFIG_DIR = str(TESTS.parent / "configs")
COMMON = [
    "trainer.max_steps=1",
    "validate_at_start=false",
    "data.prompts_per_step=2",
    "data.prompts.val_size=4",
    "rollout.max_response_tokens=16",
    "rollout.chunk_size=8",
    "rollout.continuation_len=8",
    # SGD: the update is lr x the (clipped) gradient, so equal weights mean equal gradients (Adam's
    # first step is ~lr x sign(gradient) and would hide a wrong gradient scale)
    # and no clipping, which would rescale a wrongly scaled gradient back to the same norm
    "module.optimizer._target_=torch.optim.SGD",
    "module.optimizer.lr=0.5",
    "module.max_grad_norm=null",
]


def test_ddp_step_equals_the_single_process_step_on_the_union(tmp_path, embedded):
    from ddp_recorder import KEYS

    record = tmp_path / "record"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "mintrl.cli.train",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.precision=32-true",
        f"paths.output_dir={tmp_path / 'run'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        *COMMON,
        "+callbacks.record._target_=ddp_recorder.Recorder",
        f"+callbacks.record.out={record}",
    ]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    batches = [torch.load(record / f"batch_rank{r}_step0.pt", weights_only=False) for r in (0, 1)]
    finals = [torch.load(record / f"final_rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert [f["world_size"] for f in finals] == [2, 2]
    # each rank rolled out its own prompts (no duplicates, no Lightning sampler reshuffling them)
    questions = [{p.question for p in b.prompts} for b in batches]
    assert len(questions[0]) == len(questions[1]) == 2 and not questions[0] & questions[1]
    # both ranks hold the same weights after the step
    for k in KEYS:
        assert torch.equal(finals[0]["weights"][k], finals[1]["weights"][k]), k

    # the single-process step on the union of the two batches
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.output_dir={tmp_path / 'single'}", *COMMON])
    c = build_components(cfg, trainer=False)
    module, policy = c.module, c.context.policy
    module.objective.setup(policy)
    union = concat_batches(batches)
    module.objective.prepare(union, module.frozen_logprobs)
    module.accumulate(union, step_totals(union.loss_mask))
    initial = {k: v.detach().clone() for k, v in policy.state_dict().items() if k in KEYS}
    torch.optim.SGD(policy.parameters(), lr=0.5).step()
    state = policy.state_dict()
    for k in KEYS:
        moved = (state[k] - initial[k]).abs().max().item()
        assert moved > 1e-4, f"{k} did not move: the comparison would be vacuous"
        diff = (finals[0]["weights"][k] - state[k]).abs().max().item()
        assert diff < 1e-5 * max(1.0, moved * 100), (
            f"{k}: DDP vs single-process update differ by {diff:.2e} (update {moved:.2e})"
        )

    # rank 0 alone wrote logs, checkpoints and the exported policy
    run = tmp_path / "run"
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "hf_policy" / "config.json").is_file()
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    # rank 0 wrote the rollout records of both ranks: rank 0's rows first, groups kept apart
    records = read_records(record_path(run / "rollouts", "train", 0))
    assert len(records) == sum(len(b) for b in batches) == 16
    assert [r["row"] for r in records] == list(range(16))
    assert [r["group"] for r in records] == [
        g + 2 * rank for rank, b in enumerate(batches) for g in b.group_index.tolist()
    ]
    assert [r["question"] for r in records] == [b.prompts[g].question for b in batches for g in b.group_index.tolist()]
    assert [r["reward"] for r in records] == union.rewards.tolist()
    val = read_records(record_path(run / "rollouts", "val", 1))  # the validation after the step: 4 prompts x 2
    assert sorted(r["prompt_index"] for r in val) == [0, 0, 1, 1, 2, 2, 3, 3]
