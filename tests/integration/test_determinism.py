"""Determinism: the same config and seed give the same logged scalars, bit for bit, on CPU, for the
whole run: validation before and after training, rollouts, judge verdicts, rewards, allocation
branches and updates (two 2-step runs of the main job with entropy branching, side by side in fresh
processes on one thread each). Only wall-clock scalars (``perf/*``) may differ."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import TINY_RUN

from mintrl.analysis.tensorboard import load_scalars

SMALL = [
    "trainer.max_steps=2",
    *TINY_RUN,
    "allocation=entropy",
    "allocation.budget_per_step=12",  # 8 initial rollouts + up to 4 branches (rollouts)
    "callbacks.best=null",
    "module.optimizer.lr=1e-4",
]


def _runs(*outs: Path) -> list[dict[str, list[tuple[int, float]]]]:
    """One run of ``SMALL`` into each of ``outs``, all at once, each in a fresh process on one thread
    (the same thread count: the order of float reductions is the same); their scalars."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for out in outs:
        out.mkdir(parents=True)
        cmd = [sys.executable, "-m", "mintrl.cli.train", f"paths.output_dir={out}", f"hydra.run.dir={out}", *SMALL]
        log = open(out / "run.log", "w")  # noqa: SIM115 - closed below, after the process ends
        procs.append((subprocess.Popen(cmd, env=env, cwd=out.parent, stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        code = proc.wait(timeout=900)
        log.close()
        assert code == 0, Path(log.name).read_text()[-6000:]
    return [load_scalars(out) for out in outs]


def _is_clock(tag: str) -> bool:
    return tag.startswith("perf/") or tag.endswith("_seconds")


def test_same_seed_same_scalars_to_the_last_bit(tmp_path):
    first, second = _runs(tmp_path / "a", tmp_path / "b")
    assert set(first) == set(second)
    compared = [tag for tag in first if not _is_clock(tag)]
    # the run must have logged what this test claims to cover
    for tag in ("val/reward", "reward/control", "reward/semi", "judge/revise", "train/loss", "train/grad_norm"):
        assert tag in compared, tag
    assert any(tag.startswith("allocation/") for tag in compared)
    assert len(first["val/reward"]) == 2  # before and after training
    differ = {tag: (first[tag], second[tag]) for tag in compared if first[tag] != second[tag]}
    assert not differ, f"scalars that differ between two runs of one config: {differ}"
