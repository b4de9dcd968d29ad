"""`make reproduce-smoke`: the wiring of `make reproduce` (the core multirun, then mintrl-reproduce) with 1 optimizer
step, 1 seed and tiny sizes on the embedded model, through the Makefile (slow: 3 jobs of about a minute each)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from make_helpers import run_make

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reproduce_smoke_writes_the_report(tmp_path):
    # REPRO_DIR: outside the repository
    done = run_make("reproduce-smoke", f"REPRO_DIR={tmp_path}", timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    smoke = tmp_path / "smoke"
    jobs = sorted(p.name for p in smoke.iterdir() if (p / ".hydra" / "overrides.yaml").is_file())
    assert jobs == ["0", "1", "2"]  # MInTRL-Const, GRPO, no-intervention; seed 0 only
    text = (smoke / "reproduction.md").read_text()
    for row in ("| MInTRL-Const | 0 (1) |", "| GRPO | 0 (1) |", "| no-intervention | 0 (1) |"):
        assert row in text, text
    assert "(n=1, no interval)" in text and "**undecided**" in text  # one seed: no interval, no verdict
    assert (
        "equal budget** (steps, prompts per step, rollouts per prompt, response limit in every job's config): yes"
        in text
    )
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert head in text
    assert (smoke / "reproduction_curves.png").is_file() and (smoke / "reproduction_training.png").is_file()
    assert not list(smoke.rglob("*.ckpt"))  # callbacks=sweep: no Lightning checkpoints
