"""`make reproduce-agents-smoke`: the wiring of `make reproduce-agents` (the SQL and shell multiruns of the four
agent rows, then mintrl-reproduce-agents) with 1 optimizer step of 2 tasks, 1 seed and 2 held-out tasks on the
embedded model, through the Makefile (slow: 8 jobs of about a minute each)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from make_helpers import run_make

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reproduce_agents_smoke_writes_the_section(tmp_path):
    done = run_make("reproduce-agents-smoke", f"REPRO_DIR={tmp_path}", timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    smoke = tmp_path / "agents_smoke"
    for level in ("sql", "shell"):
        jobs = sorted(p.name for p in (smoke / level).iterdir() if (p / ".hydra" / "overrides.yaml").is_file())
        assert jobs == ["0", "1", "2", "3"], level  # GRPO-8, entropy, RAIL, random anchors; seed 0
        for job in jobs:  # every row generated exactly 8 episodes per task (1 step of 2 tasks: 16)
            overrides = (smoke / level / job / ".hydra" / "overrides.yaml").read_text()
            assert "seed=0" in overrides and "trainer.max_steps=1" in overrides
        rail = smoke / level / "2" / "allocation_decisions.jsonl"
        decisions = [json.loads(line) for line in rail.read_text().splitlines()] if rail.exists() else []
        assert all(d["kind"] == "shadow" and d["step"] == 0 for d in decisions)  # 1 step: the shadow phase only
    text = (smoke / "reproduction.md").read_text()
    assert text.startswith("<!-- reproduce-agents:begin -->") and text.rstrip().endswith(
        "<!-- reproduce-agents:end -->"
    )
    for row in (
        "uniform GRPO-8 (`agent/grpo8_cpu`)",
        "entropy branching (`agent/entropy8_cpu`)",
        "RAIL (`agent/rail8_cpu`)",
        "random anchors (`agent/random8_cpu`)",
    ):
        assert text.count(f"| {row} | 0 (1) |") == 2, row  # one seed on each level
    assert text.count("| 8.000 |") == 8  # episodes generated per task, every row on both levels
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert head in text and "(R1)" in text and "(R4)" in text
    assert (smoke / "agents_success_vs_episodes.png").is_file() and not list(smoke.rglob("*.ckpt"))
