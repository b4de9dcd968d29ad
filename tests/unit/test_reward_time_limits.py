"""A reward phase costs about one timeout plus the rows that really answer, whatever hangs: a reward
that hangs is cut by the guard (rows retried at once under one deadline), math-verify keeps
``rollout.reward_timeout_s`` by itself; a judge answering the wrong number of verdicts stops the run."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest

from mintrl.core.verdict import KEEP, ReviewRequest, Verdict
from mintrl.judge.base import Judge
from mintrl.reward import MathVerifyReward, Reward
from mintrl.rollout.guards import GuardedJudge, GuardedReward

# math-verify evaluates this sum term by term: far past any limit, but interruptible by its alarm
SLOW_SUM = "<answer>\\sum_{n=1}^{10^{7}} \\frac{1}{n}</answer>"


class _HangsOnSomeRows(Reward):
    """1.0 per row; a call that holds a response "hang" sleeps 30 s first (every batch call holds one)."""

    def __init__(self):
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, responses, items):
        with self.lock:
            self.calls.append(len(responses))
        if "hang" in responses:
            time.sleep(30)
        return [1.0] * len(responses)


def test_rows_that_answer_are_scored_however_many_rows_hang():
    """After the batch call times out, every row is retried at once under one deadline: the rows
    that answer get their reward, the hung ones NaN; the phase takes about two timeouts."""
    reward = _HangsOnSomeRows()
    guarded = GuardedReward(reward, timeout_s=0.5)
    rows = ["ok", "hang", "ok", "ok", "hang", "ok"]
    start = time.monotonic()
    values = guarded(rows, [None] * len(rows))
    elapsed = time.monotonic() - start
    assert [1.0 if v == 1.0 else "nan" if math.isnan(v) else v for v in values] == [1.0, "nan", 1.0, 1.0, "nan", 1.0]
    assert 1.0 <= elapsed < 1.5, elapsed
    assert sorted(reward.calls) == [1, 1, 1, 1, 1, 1, 6]  # the batch, then each row once
    assert guarded.metrics() == {"reward/failed": 0.0, "reward/timeout": 3.0}  # the batch and the two hung rows


def test_a_reward_that_hangs_on_every_row_costs_two_timeouts_not_one_per_row():
    reward = _HangsOnSomeRows()
    guarded = GuardedReward(reward, timeout_s=0.5)
    start = time.monotonic()
    values = guarded(["hang"] * 16, [None] * 16)
    elapsed = time.monotonic() - start
    assert len(values) == 16 and all(math.isnan(v) for v in values)
    assert 1.0 <= elapsed < 1.5, elapsed
    assert guarded.metrics() == {"reward/failed": 0.0, "reward/timeout": 17.0}


def test_math_verify_keeps_the_rollout_reward_timeout():
    """math-verify runs in the main thread (its own alarm); the guard hands it
    rollout.reward_timeout_s and the whole call keeps it: rows not graded in time are NaN, counted,
    never 0, and a right answer graded before the limit keeps its 1."""
    item = SimpleNamespace(reference="7")
    guarded = GuardedReward(MathVerifyReward(), timeout_s=2)  # each comparison alone may take 5 s
    start = time.monotonic()
    values = guarded(["<answer>7.0</answer>", SLOW_SUM, SLOW_SUM, SLOW_SUM], [item] * 4)
    elapsed = time.monotonic() - start
    assert values[0] == 1.0 and all(math.isnan(v) for v in values[1:]), values
    assert elapsed < 2 + 1.5, elapsed
    assert guarded.metrics() == {"reward/failed": 0.0, "reward/timeout": 3.0}


def test_a_hung_math_verify_answer_is_no_reward_with_its_own_limit():
    """Without a call limit, each parse or comparison keeps comparison_timeout_s: a hung one is NaN, counted."""
    reward = MathVerifyReward(comparison_timeout_s=1)
    start = time.monotonic()
    values = reward([SLOW_SUM, "<answer>7.0</answer>"], [SimpleNamespace(reference="7")] * 2)
    assert math.isnan(values[0]) and values[1] == 1.0 and time.monotonic() - start < 3
    assert reward.metrics() == {"reward/timeout": 1.0}


class _MiscountingJudge(Judge):
    """Keeps every request, but answers ``extra`` verdicts too many (after the batch raised, if ``batch_raises``)."""

    def __init__(self, extra: int, batch_raises: bool = False):
        self.extra, self.batch_raises, self.calls = extra, batch_raises, 0

    def review(self, requests):
        self.calls += 1
        if self.batch_raises and len(requests) > 1:
            raise ConnectionError("down")
        return [Verdict(KEEP)] * (len(requests) + self.extra)


@pytest.mark.parametrize(
    "judge,message",
    [
        (_MiscountingJudge(-1), "_MiscountingJudge.review returned 2 verdicts for 3 requests"),
        (_MiscountingJudge(1), "_MiscountingJudge.review returned 4 verdicts for 3 requests"),
        (_MiscountingJudge(1, batch_raises=True), "_MiscountingJudge.review returned 2 verdicts for 1 requests"),
    ],
)
def test_a_judge_answering_the_wrong_number_of_verdicts_stops_the_run(judge, message):
    """Never retried request by request: a configuration error, both counts named (the batch, or a
    one-request retry after the batch raised)."""
    guarded = GuardedJudge(judge, timeout_s=5)
    with pytest.raises(ValueError, match=message):
        guarded.review([ReviewRequest("q", "r", "", [f"step {i}"]) for i in range(3)])
    assert judge.calls == (2 if judge.batch_raises else 1)
