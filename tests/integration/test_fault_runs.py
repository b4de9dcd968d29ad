"""Faults in whole runs: a flaky judge and a hanging NaN reward, non-finite updates (skipped, then the
run stops with a clear error and a checkpoint of the last good state), batches without any reward."""

from __future__ import annotations

import math
from pathlib import Path

import fault_helpers
import pytest
import torch
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run

SMALL = [
    "trainer.max_steps=2",
    "validate_at_start=false",
    "data.prompts_per_step=2",
    "data.prompts.val_size=2",
    "data.val_samples_per_prompt=1",
    "rollout.max_response_tokens=24",
    "rollout.chunk_size=8",
    "rollout.continuation_len=8",
]


def _scalars(out: Path) -> dict[str, list[tuple[int, float]]]:
    values: dict[str, list[tuple[int, float]]] = {}
    for event in (out / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(event))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            values.setdefault(tag, []).extend((s.step, s.value) for s in acc.Scalars(tag))
    return values


def _cfg(out: Path, *overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=[f"paths.output_dir={out}", *SMALL, *overrides])


@pytest.mark.slow  # 17 s on 2 cores; tests/unit/test_api_judge_and_schedule.py checks judge timeouts and failures
def test_run_survives_a_flaky_judge_and_a_hanging_nan_reward(tmp_path):
    for calls in fault_helpers.LOG.values():
        calls.clear()
    cfg = _cfg(
        tmp_path,
        "judge._target_=fault_helpers.FlakyJudge",
        "reward._target_=fault_helpers.BadReward",
        "rollout.reward_timeout_s=1",
        "rollout.max_reviews=3",
        "+trainer.limit_val_batches=0",
    )  # training rewards only
    summary = run(cfg)
    assert summary["steps"] == 2
    s = _scalars(tmp_path)
    calls = fault_helpers.LOG["judge_calls"]  # request count of every review call, in order
    raised = [k for k in range(1, len(calls) + 1) if k % 3 == 0]
    assert raised, "the test needs at least one failing judge call"
    # replay the guard: a raising batch call is followed by one single-row retry per row; a row
    # whose retry raises too keeps a "failed" verdict (Keep)
    failed_rows, i = 0, 0
    while i < len(calls):
        if (i + 1) % 3 == 0:
            failed_rows += sum(1 for j in range(i + 1, i + 1 + calls[i]) if (j + 1) % 3 == 0)
            i += 1 + calls[i]
        else:
            i += 1
    assert sum(v for _, v in s["judge/errors"]) == len(raised)
    assert sum(v for _, v in s["judge/failed"]) == failed_rows
    # the first reward call hung: one timeout, then its rows were scored one by one
    assert sum(v for _, v in s["reward/timeout"]) == 1 and fault_helpers.LOG["reward_calls"][1] == 1
    assert sum(v for _, v in s["reward/failed"]) == 0
    # NaN rewards are "no reward", not faults: counted in reward/missing, one per NaN row
    assert sum(v for _, v in s["reward/missing"]) == sum(fault_helpers.LOG["nan_rows"])
    assert all(math.isfinite(v) for _, v in s["train/loss"])
    assert (tmp_path / "hf_policy" / "config.json").is_file()


def test_non_finite_updates_are_skipped_then_the_run_stops_with_the_last_good_state(tmp_path):
    cfg = _cfg(
        tmp_path,
        "objective._target_=fault_helpers.NaNAfter",
        "+objective.after=1",
        "module.max_bad_steps=2",
        "trainer.max_steps=5",
        "rollout.max_response_tokens=8",  # one chunk: the loss, not the rollouts, is under test
    )
    with pytest.raises(RuntimeError, match=r"2 skipped steps in a row .*last-good.ckpt"):
        run(cfg)
    ckpt = torch.load(tmp_path / "checkpoints" / "last-good.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 1  # the one good update, nothing after it
    s = _scalars(tmp_path)
    assert max(v for _, v in s["train/skipped_updates"]) == 2


def test_batches_without_any_reward_are_not_trained_on(tmp_path):
    cfg = _cfg(
        tmp_path, "reward._target_=fault_helpers.NoReward", "module.max_bad_steps=2", "rollout.max_response_tokens=8"
    )
    with pytest.raises(RuntimeError, match="2 skipped steps in a row .*a rollout batch without a usable rollout"):
        run(cfg)
    ckpt = torch.load(tmp_path / "checkpoints" / "last-good.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 0  # no update was ever applied
    s = _scalars(tmp_path)
    assert max(v for _, v in s["train/skipped_batches"]) == 2 and "train/loss" not in s
