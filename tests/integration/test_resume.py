"""Exact resume: a run SIGKILLed after 2 of 4 steps and resumed from its last checkpoint trains the
same steps as a straight 4-step run: same prompts, rewards, losses and final weights, bit for bit
(every random generator rollouts draw from is in the checkpoint and CPU kernels are deterministic
for a fixed thread count, which both runs share). Checkpoints are written atomically."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mintrl.training.checkpointing import AtomicCheckpointIO

TESTS = Path(__file__).resolve().parents[1]  # tests/: its helper modules (ddp_recorder, resume_helpers)
COMMON = [
    "trainer.max_steps=4",
    "validate_at_start=false",
    "data.prompts_per_step=2",
    "data.prompts.val_size=2",
    "data.val_samples_per_prompt=1",
    "rollout.max_response_tokens=16",
    "rollout.chunk_size=8",
    "rollout.continuation_len=8",
    "callbacks.checkpoint.every_n_train_steps=2",
    "callbacks.best=null",
    "module.optimizer.lr=1e-4",
]


def _train(out: Path, *extra: str, wait_for: Path | None = None) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "2",
    }
    cmd = [
        sys.executable,
        "-m",
        "mintrl.cli.train",
        f"paths.output_dir={out}",
        f"hydra.run.dir={out}/hydra",
        *COMMON,
        "+callbacks.steps._target_=resume_helpers.StepLog",
        f"+callbacks.steps.path={out}/steps.jsonl",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=out.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if wait_for is None:
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output[-4000:]
        return
    deadline = time.monotonic() + 600
    while not wait_for.exists():
        assert proc.poll() is None, proc.stdout.read()[-4000:]
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # a real kill, mid-run
    proc.wait(timeout=60)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def _steps(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r.pop("step"): r for r in rows}  # a step logged twice keeps the later row


@pytest.mark.slow  # 3 runs of the embedded model, 1.7-3.1 min on 2 cores: make test-slow
def test_killed_and_resumed_run_equals_the_straight_run(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir(), resumed.mkdir()
    _train(straight)
    _train(
        resumed,
        "+callbacks.hang._target_=resume_helpers.HangAt",
        "+callbacks.hang.step=2",
        f"+callbacks.hang.marker={resumed}/killed_here",
        wait_for=resumed / "killed_here",
    )
    assert not (resumed / "hf_policy").exists()
    ckpt = torch.load(resumed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 2
    _train(resumed)  # ckpt_path=auto: the output folder holds checkpoints/last.ckpt
    a, b = _steps(straight / "steps.jsonl"), _steps(resumed / "steps.jsonl")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert a[step] == b[step], f"step {step}: straight {a[step]} vs resumed {b[step]}"
    wa, wb = (
        load_file(straight / "hf_policy" / "model.safetensors"),
        load_file(resumed / "hf_policy" / "model.safetensors"),
    )
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), "final weights differ"


def test_explicit_missing_checkpoint_is_an_error(tmp_path):
    from hydra import compose, initialize_config_dir

    from mintrl.build.run import resume_checkpoint

    with initialize_config_dir(config_dir=str(TESTS.parent / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.output_dir={tmp_path}", "ckpt_path=last"])
        auto = compose("train", overrides=[f"paths.output_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="ckpt_path=last: no checkpoint at"):
        resume_checkpoint(cfg)
    assert resume_checkpoint(auto) is None
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert resume_checkpoint(auto) == str(tmp_path / "checkpoints" / "last.ckpt")


_WRITER = """
import sys, torch
from mintrl.training.checkpointing import AtomicCheckpointIO
AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(400_000_000, dtype=torch.uint8), "step": 2}, sys.argv[1])
"""


def test_a_kill_during_a_save_leaves_the_previous_checkpoint(tmp_path):
    target = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, target)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], start_new_session=True)
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size > 0 for p in tmp_path.glob(".last.ckpt.tmp-*")):
        assert proc.poll() is None and time.monotonic() < deadline, "the writer never started writing"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert torch.load(target, weights_only=True) == {"step": 1}  # the old checkpoint, intact
    AtomicCheckpointIO().save_checkpoint({"step": 3}, target)
    assert torch.load(target, weights_only=True) == {"step": 3}
    assert not list(tmp_path.glob(".last.ckpt.tmp-*")), "the next save removes what the killed one left"
