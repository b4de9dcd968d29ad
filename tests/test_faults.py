"""Faults during rollouts and updates: a judge that raises, a reward that hangs or answers NaN or
garbage, a non-finite loss. The run goes on with the documented fallbacks and counts them; too many
bad steps in a row stop it with a clear error and a checkpoint of the last good state."""

from __future__ import annotations

import math
import time
from pathlib import Path

import fault_helpers
import pytest
import torch
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mintrl.judge.base import FAILED, KEEP, REVISE, Judge, ReviewRequest, Verdict
from mintrl.rollout.guards import FaultCounts, GuardedJudge, GuardedReward, review_guarded, score_rewards_guarded
from mintrl.training.run import run

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
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


def _requests(n):
    return [ReviewRequest("q", "r", "", [f"step {i}"]) for i in range(n)]


class _Judge(Judge):
    def __init__(self, behaviour):
        self.behaviour, self.calls = behaviour, 0

    def review(self, requests):
        self.calls += 1
        return self.behaviour(self.calls, requests)


def test_judge_that_raises_is_retried_row_by_row():
    def behaviour(call, requests):  # the batch (call 1) and the second row (call 3) raise
        if call in (1, 3):
            raise ConnectionError("down")
        return [Verdict(REVISE, step=0)] * len(requests)

    counts = FaultCounts()
    verdicts = review_guarded(_Judge(behaviour), _requests(3), None, counts)
    assert [v.kind for v in verdicts] == [REVISE, FAILED, REVISE]
    assert (counts.errors, counts.timeouts, counts.garbage) == (2, 0, 0)


def test_judge_garbage_and_timeout_become_failed_verdicts():
    counts = FaultCounts()
    garbage = _Judge(lambda call, requests: ["keep"] * len(requests) if call == 1 else [Verdict(KEEP)] * len(requests))
    assert [v.kind for v in review_guarded(garbage, _requests(2), None, counts)] == [KEEP, KEEP]
    assert counts.garbage == 1
    slow = _Judge(lambda call, requests: time.sleep(5) or [Verdict(KEEP)] * len(requests))
    start = time.monotonic()
    assert [v.kind for v in review_guarded(slow, _requests(4), 0.2, counts)] == [FAILED] * 4
    assert time.monotonic() - start < 2 and counts.timeouts == 1 and slow.calls == 1  # no per-row retry after a timeout
    guarded = GuardedJudge(garbage)
    assert guarded.metrics() == {"judge/errors": 0.0, "judge/timeouts": 0.0, "judge/garbage": 0.0}


def test_reward_faults_give_no_reward_for_the_rows_they_hit():
    def reward(responses, items):
        if len(responses) > 1:
            raise ValueError("batch scorer crashed")
        r = responses[0]
        if r == "hang":
            time.sleep(5)
        if r == "raise":
            raise KeyError("no answer")
        return [{"nan": math.nan, "none": None, "word": "yes", "inf": math.inf, "ok": 1, "bool": True}[r]]

    counts = FaultCounts()
    rows = ["ok", "nan", "none", "word", "inf", "raise", "hang", "bool"]
    values = score_rewards_guarded(reward, rows, [None] * len(rows), 0.3, counts)
    assert values[0] == 1.0 and values[7] == 1.0
    assert all(math.isnan(v) for v in values[1:7])
    # the batch and "raise" raised; "word" and "inf" are garbage; "hang" timed out; NaN / None are no reward, not faults
    assert (counts.errors, counts.garbage, counts.timeouts) == (2, 2, 1)
    g = GuardedReward(lambda responses, items: ["yes"] * len(responses))
    assert all(math.isnan(v) for v in g(["a", "b"], [None, None]))
    # both values are garbage (not numbers)
    assert g.metrics() == {"reward/failed": 2.0, "reward/timeout": 0.0}
    assert g.metrics()["reward/failed"] == 0.0  # counts are per step
    # the wrong number of values is a configuration error: the run stops, both lengths named
    with pytest.raises(ValueError, match="returned 3 rewards for 2 responses"):
        GuardedReward(lambda responses, items: [0.5] * (len(responses) + 1))(["a", "b"], [None, None])


def test_a_signal_timing_reward_still_runs_in_the_main_thread():
    """math-verify times out with SIGALRM, which only the main thread may set: through the guard
    it must still grade (a thread would make every call fail and every reward NaN)."""
    from mintrl.reward import MathVerifyReward

    item = type("Item", (), {"reference": "\\frac{1}{2}"})()
    guarded = GuardedReward(MathVerifyReward(), timeout_s=30)
    assert guarded(["so <answer>0.5</answer>", "<answer>2</answer>"], [item, item]) == [1.0, 0.0]
    assert guarded.metrics()["reward/failed"] == 0.0


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
    )
    with pytest.raises(RuntimeError, match=r"2 skipped steps in a row .*last-good.ckpt"):
        run(cfg)
    ckpt = torch.load(tmp_path / "checkpoints" / "last-good.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 1  # the one good update, nothing after it
    s = _scalars(tmp_path)
    assert max(v for _, v in s["train/skipped_updates"]) == 2


def test_batches_without_any_reward_are_not_trained_on(tmp_path):
    cfg = _cfg(tmp_path, "reward._target_=fault_helpers.NoReward", "module.max_bad_steps=2")
    with pytest.raises(RuntimeError, match="2 skipped steps in a row .*a rollout batch without a usable rollout"):
        run(cfg)
    ckpt = torch.load(tmp_path / "checkpoints" / "last-good.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 0  # no update was ever applied
    s = _scalars(tmp_path)
    assert max(v for _, v in s["train/skipped_batches"]) == 2 and "train/loss" not in s
