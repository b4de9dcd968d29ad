"""The README's multirun spelled with `method=` (no experiment, no sweep), trained for real on the embedded
model at test size, reaches mintrl-reproduce's rows: `mintrl-train -m method=grpo,mintrl_const seed=0,1`,
then `mintrl-reproduce <multirun>` (slow: 4 jobs of one step)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# 1 optimizer step of 1 prompt x 4 rollouts of up to 16 tokens, validation before and after it on 2 held-out
# prompts (prompts, rollouts, tokens); no checkpoint, no policy export
ONE_STEP = [
    "trainer.max_steps=1", "trainer.val_check_interval=1", "data.prompts_per_step=1", "data.prompts.val_size=2",
    "data.val_samples_per_prompt=1", "rollout.max_response_tokens=16", "rollout.chunk_size=8",
    "rollout.continuation_len=8", "callbacks=sweep", "callbacks.hf_export=null", "rollout.progress=false",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(2400)  # 4 jobs, each loading the embedded model (about a minute each on 2 idle cores)
def test_a_method_multirun_gets_both_rows(tmp_path):
    multirun = tmp_path / "multirun"
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    train = [sys.executable, "-m", "mintrl.cli.train", "-m", "method=grpo,mintrl_const", "seed=0,1"]
    done = subprocess.run(
        [*train, *ONE_STEP, f"hydra.sweep.dir={multirun}"], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=2300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "reproduction.md"
    report = [sys.executable, "-m", "mintrl.cli.reproduce", str(multirun), "--out", str(out)]
    done = subprocess.run(report, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    for row in ("| MInTRL-Const | 0,1 (2) |", "| GRPO | 0,1 (2) |"):  # the paper's rows, both seeds each
        assert row in text, text
    assert "| method=" not in text  # no row named by its overrides
    assert "lacks the" not in text  # the claims find both rows (paired by seed)
    assert "| mean [95% interval] | | |" in text and "(n=2)" in text
