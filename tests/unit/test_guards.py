"""Fault guards around judges and rewards (mintrl.rollout.guards): a judge that raises is retried row
by row, garbage and timeouts become failed verdicts, a reward that hangs or answers NaN gives no reward
for the rows it hits (whole runs with faults: integration/test_fault_runs.py)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from mintrl.core.verdict import FAILED, KEEP, REVISE, ReviewRequest, Verdict
from mintrl.judge.base import Judge
from mintrl.reward.base import Reward
from mintrl.rollout.guards import FaultCounts, GuardedJudge, GuardedReward, review_guarded, score_rewards_guarded


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
        return [{"nan": math.nan, "none": None, "word": "yes", "inf": math.inf, "ok": 1, "bool": True, "late": 1}[r]]

    counts = FaultCounts()
    rows = ["ok", "nan", "none", "word", "inf", "raise", "bool", "hang", "late"]
    values = score_rewards_guarded(reward, rows, [None] * len(rows), 0.3, counts)
    assert values[0] == 1.0 and values[6] == 1.0 and values[8] == 1.0
    assert all(math.isnan(v) for v in values[1:6] + values[7:8])
    # the batch and "raise" raised; "word" and "inf" are garbage; "hang" timed out while the rows retried
    # with it ("late" too) answered; NaN / None are no reward, not faults
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


def test_a_judge_answering_the_wrong_number_of_verdicts_stops_the_run():
    """A verdict count other than the request count is a configuration error (as for rewards),
    named with both counts, never retried row by row."""
    short = _Judge(lambda call, requests: [Verdict(KEEP)] * (len(requests) - 1))
    with pytest.raises(ValueError, match="returned 2 verdicts for 3 requests"):
        review_guarded(short, _requests(3), None, FaultCounts())
    assert short.calls == 1


def test_a_reward_that_always_hangs_costs_about_two_timeouts_per_phase():
    """After a batch timeout the rows are retried at once, cut at one more timeout: a reward that
    hangs on every call must not cost (1 + rows) x timeout."""
    calls = []

    def hangs(responses, items):
        calls.append(len(responses))
        time.sleep(5)

    counts = FaultCounts()
    start = time.monotonic()
    values = score_rewards_guarded(hangs, ["a"] * 6, [None] * 6, 0.3, counts)
    elapsed = time.monotonic() - start
    assert all(math.isnan(v) for v in values) and len(values) == 6
    assert elapsed < 0.3 * 2 + 0.4, elapsed
    assert counts.timeouts == 7 and sorted(calls) == [1] * 6 + [6]  # the batch, then every row, each counted once


def test_a_hung_math_verify_comparison_is_no_reward_never_zero(monkeypatch):
    """A comparison that hangs is cut at the reward's comparison limit and gives no reward (NaN,
    counted in reward/timeout), not a wrong answer's 0."""
    import math_verify.grader

    from mintrl.reward import MathVerifyReward

    def hang(*args, **kwargs):
        time.sleep(30)

    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", hang)
    item = type("Item", (), {"reference": "7"})()
    guarded = GuardedReward(MathVerifyReward(comparison_timeout_s=1), timeout_s=30)
    start = time.monotonic()
    values = guarded(["<answer>7.0</answer>"], [item])
    assert math.isnan(values[0]) and time.monotonic() - start < 5
    assert guarded.metrics() == {"reward/failed": 0.0, "reward/timeout": 1.0}


def test_the_guard_takes_judges_and_rewards_only_and_names_the_field():
    """A judge must be a :class:`Judge` and a reward a :class:`Reward` or a plain function; anything
    else is refused where it enters the guard, naming the field, not counted as a fault per call."""
    with pytest.raises(TypeError, match=r"judge must be a mintrl\.judge\.base\.Judge, got str"):
        GuardedJudge("rule")
    with pytest.raises(TypeError, match=r"reward must be a mintrl\.reward\.base\.Reward or a function .*got int"):
        GuardedReward(42)
    with pytest.raises(TypeError, match=r"reward must be a mintrl\.reward\.base\.Reward or a function .*got int"):
        score_rewards_guarded(42, ["a"], [None], 0.3, FaultCounts())
    assert GuardedReward(lambda responses, items: [1.0] * len(responses)).inner.main_thread_only is False


def test_a_main_thread_only_reward_runs_here_with_the_limit_and_others_in_a_thread():
    """``Reward.main_thread_only`` (declared on the base, False) decides where the guard calls a reward."""
    seen = []

    class Here(Reward):
        main_thread_only = True

        def __call__(self, responses, items):
            seen.append((threading.current_thread() is threading.main_thread(), self.time_limit_s))
            return [1.0] * len(responses)

    def anywhere(responses, items):
        seen.append((threading.current_thread() is threading.main_thread(), None))
        return [0.5] * len(responses)

    assert Reward.main_thread_only is False and GuardedReward(Here()).main_thread_only is True
    assert score_rewards_guarded(Here(), ["a", "b"], [None, None], 2.0, FaultCounts()) == [1.0, 1.0]
    assert score_rewards_guarded(anywhere, ["a"], [None], 2.0, FaultCounts()) == [0.5]
    assert seen == [(True, 2.0), (False, None)]


def test_a_miscounting_judge_is_named_by_its_own_class_through_the_guard():
    short = _Judge(lambda call, requests: [Verdict(KEEP)] * (len(requests) + 1))
    assert GuardedJudge(short).inner is short
    with pytest.raises(ValueError, match=r"judge _Judge\.review returned 3 verdicts for 2 requests"):
        GuardedJudge(short, 5.0).review(_requests(2))
