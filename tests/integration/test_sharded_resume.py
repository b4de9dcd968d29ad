"""Exact resume from a sharded checkpoint: a 2-rank ``trainer=fsdp`` run (gloo, CPU, through the real
entry point) SIGKILLed after 2 of 4 steps and resumed from its ``checkpoints/last.ckpt/`` folder
(``ckpt_path: auto``) trains steps 3-4 as the straight 4-step run does, on every rank: same prompts,
rewards, losses and gradient norms (each rank's generators, data position and rollout state are in
the folder). ``mintrl-eval`` then evaluates the folder. The single-process counterpart is
tests/integration/test_resume.py."""

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
from hang_guard import describe, run_guarded
from resume_helpers import KEYS

TESTS = Path(__file__).resolve().parents[1]  # tests/: its helper modules (resume_helpers)
COMMON = [
    "trainer=fsdp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.precision=32-true",
    "sampler.dtype=fp32",
    "trainer.max_steps=4",
    "validate_at_start=false",
    "data.prompts_per_step=2",
    "data.prompts.val_size=2",
    "data.val_samples_per_prompt=1",
    "rollout.max_response_tokens=8",
    "rollout.chunk_size=8",
    "rollout.continuation_len=8",
    "callbacks.checkpoint.every_n_train_steps=2",
    "callbacks.best=null",
    "callbacks.records=null",
    "module.optimizer.lr=1e-4",
]
TIMEOUT_S = 900  # per run; a hang fails here rather than blocking the suite


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }


def _train(out: Path, *extra: str, wait_for: Path | None = None) -> None:
    """One 2-rank run into ``out``; with ``wait_for``, SIGKILLed (every rank) once that file exists.
    Each rank's collectives are logged in ``out/collectives``: a run past ``TIMEOUT_S`` fails naming
    each rank's last collective (tests/hang_guard.py)."""
    collectives = out / "collectives"
    cmd = [
        sys.executable,
        "-m",
        "mintrl.cli.train",
        f"paths.output_dir={out}",
        f"hydra.run.dir={out}/hydra",
        *COMMON,
        "+callbacks.steps._target_=resume_helpers.StepLog",
        f"+callbacks.steps.path={out}/steps.jsonl",
        "+callbacks.collectives._target_=hang_guard.CollectiveLog",
        f"+callbacks.collectives.out={collectives}",
        *extra,
    ]
    if wait_for is None:
        done = run_guarded(cmd, collectives, TIMEOUT_S, cwd=out.parent)
        assert done.returncode == 0, done.stderr[-4000:]
        return
    proc = subprocess.Popen(
        cmd,
        env=_env(),
        cwd=out.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not wait_for.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            raise AssertionError(
                f"the run never reached the kill point:\n{describe(collectives)}\n{proc.stdout.read()[-4000:]}"
            )
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # a real kill, mid-run: both ranks
    proc.wait(timeout=60)
    proc.stdout.close()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # 3 two-rank runs of the embedded model + one evaluation: 2.4-3.8 min on 2 shared cores
def test_killed_and_resumed_sharded_run_equals_the_straight_run(tmp_path):
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
    folder = resumed / "checkpoints" / "last.ckpt"
    assert folder.is_dir() and torch.load(folder / "meta.pt", weights_only=True)["global_step"] == 2
    before = {r: len(_rows(resumed / f"steps.jsonl.rank{r}")) for r in (0, 1)}
    assert before == {0: 2, 1: 2}
    _train(resumed)  # ckpt_path=auto: checkpoints/last.ckpt/ is a sharded folder
    for r in (0, 1):
        a = {row.pop("step"): row for row in _rows(straight / f"steps.jsonl.rank{r}")}
        rows = _rows(resumed / f"steps.jsonl.rank{r}")
        assert [row["step"] for row in rows[before[r] :]] == [3, 4], "the resumed run did not start at step 3"
        b = {row.pop("step"): row for row in rows}
        assert sorted(a) == sorted(b) == [1, 2, 3, 4]
        assert all(k in a[step] for k in KEYS for step in a), f"scalars missing from the step log: {a[1]}"
        for step in (3, 4):
            assert a[step] == b[step], f"rank {r} step {step}: straight {a[step]} vs resumed {b[step]}"
    steps = [_rows(straight / f"steps.jsonl.rank{r}") for r in (0, 1)]
    assert steps[0][0]["questions"] != steps[1][0]["questions"], "the ranks trained on the same prompts"
    final = torch.load(folder / "meta.pt", weights_only=True)
    assert final["global_step"] == 4 and not list(folder.parent.glob(".last.ckpt.*"))

    # mintrl-eval evaluates the sharded folder through its entry point
    cmd = [
        sys.executable,
        "-m",
        "mintrl.cli.eval",
        f"ckpt_path={folder}",
        "n=1",
        "ks=[1]",
        "limit=2",
        "max_response_tokens=8",
        f"paths.output_dir={tmp_path / 'eval'}",
        f"hydra.run.dir={tmp_path / 'eval'}/hydra",
        "trainer.accelerator=cpu",
        "trainer.precision=32-true",
    ]
    done = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["problems"] == 2 and result["checkpoint"] == str(folder)
