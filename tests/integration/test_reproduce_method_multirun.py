"""The README's multirun spelled with `method=` (no experiment, no sweep), trained for real on the embedded
model at test size, reaches mintrl-reproduce's rows: `mintrl-train -m method=grpo,mintrl_const seed=0,1`,
then `mintrl-reproduce <multirun>` (slow: 4 jobs of one step)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import TINY_RUN

# 1 optimizer step of 2 prompts x 4 rollouts, validation before and after it on 4 held-out prompts
ONE_STEP = [
    "trainer.max_steps=1",
    "trainer.val_check_interval=1",
    *TINY_RUN,
    "callbacks=sweep",
    "rollout.progress=false",
]


@pytest.mark.slow
def test_a_method_multirun_gets_both_rows(tmp_path):
    multirun = tmp_path / "multirun"
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    train = [sys.executable, "-m", "mintrl.cli.train", "-m", "method=grpo,mintrl_const", "seed=0,1"]
    done = subprocess.run(
        [*train, *ONE_STEP, f"hydra.sweep.dir={multirun}"], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "reproduction.md"
    report = [sys.executable, "-m", "mintrl.cli.reproduce", str(multirun), "--out", str(out)]
    done = subprocess.run(report, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    for row in ("| MInTRL-Const | 0, 1 (2) |", "| GRPO | 0, 1 (2) |"):
        assert row in text, text
    assert "method=" not in text.split("## ")[1]  # the table names the methods, not the overrides
