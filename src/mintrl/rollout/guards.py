"""Fault containment for user-swappable components that run once per rollout (judges, rewards).

A judge or reward that raises, hangs or returns garbage must not kill or poison a run: the rows it
failed on get a documented fallback and are counted.

- judge: :func:`review_guarded`, fallback ``Verdict("failed")``, treated as Keep (counted in
  ``judge/failed``);
- reward: :func:`score_rewards_guarded`, fallback "no reward" (NaN: the rollout is excluded from its
  group's baseline and from the loss; counted in ``reward/failed``, ``reward/timeout``). A reward
  that returns a list of the wrong length is a configuration error, not a fault: the run stops
  with both lengths named (:func:`mintrl.reward.base.check_reward_count`).

A call that exceeds its time limit is abandoned in a daemon thread (Python cannot kill a thread):
the run goes on while the stuck call finishes or not in the background. The limit holds for calls
that wait (network, a lock, sleep) or run Python bytecode, which yields the GIL every few ms; a call
that holds the GIL inside one C function (a regular expression backtracking for minutes, as the rule
judge's claim pattern once did) blocks the caller as well, and the timeout fires only when it
returns. Components that run untrusted code put it in a process with its own limits (the code
sandbox), never in this thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from mintrl.core.checks import check_range
from mintrl.core.verdict import FAILED, ReviewRequest, Verdict
from mintrl.judge.base import Judge
from mintrl.reward.base import Reward, as_reward, check_reward_count

log = logging.getLogger(__name__)


class CallTimeout(Exception):
    """A guarded call did not return within its limit."""


def call_with_timeout(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """``fn()``, or :class:`CallTimeout` after ``timeout_s`` seconds (None: no limit, same thread).

    Raises:
        CallTimeout: the limit passed (the call keeps running in a daemon thread).
        Exception: whatever ``fn`` raised.
    """
    if timeout_s is None:
        return fn()
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="mintrl-guarded-call")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise CallTimeout(f"no answer within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass
class FaultCounts:
    """Events of one step (counts): calls that raised, timed out, or answered garbage."""

    errors: int = 0
    timeouts: int = 0
    garbage: int = 0
    first: list[str] = field(default_factory=list)  # the first messages, for the warning

    def add(self, kind: str, message: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.first) < 3:
            self.first.append(message)


def _valid_verdicts(value, n: int) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, Verdict) for v in value)


def check_verdict_count(judge: Judge, verdicts, n: int) -> None:
    """Raise when a judge answered a sequence of ``len(verdicts) != n`` verdicts for ``n`` requests:
    like a reward's wrong count, a configuration error (a judge that ignores its batch), never
    retried. Anything that is not a list or tuple is garbage, left to the caller.

    Raises:
        ValueError: ``"judge <class>.review returned {len} verdicts for {n} requests ..."``, the
            class of ``judge`` (the guard checks the judge it wraps, :attr:`GuardedJudge.inner`).
    """
    if isinstance(verdicts, (list, tuple)) and len(verdicts) != n:
        raise ValueError(
            f"judge {type(judge).__name__}.review returned {len(verdicts)} verdicts for {n} requests: a judge must return one "
            "verdict per request, in order"
        )


def review_guarded(
    judge: Judge, requests: Sequence[ReviewRequest], timeout_s: float | None, counts: FaultCounts
) -> list[Verdict]:
    """``judge.review(requests)`` that never raises on a fault: a batch that raises or answers garbage
    (anything but one :class:`Verdict` per request) is retried one request at a time, and each
    request that fails again gets ``Verdict("failed")``; a batch that times out fails all its
    requests (retrying each would cost a timeout apiece).

    Args:
        timeout_s: limit of one ``review`` call (seconds), or None.
        counts: incremented in place (errors, timeouts, garbage).

    Returns:
        one verdict per request, in order.

    Raises:
        ValueError: the judge returned a list of the wrong length, for the batch or for a
            one-request retry (:func:`check_verdict_count`).
    """
    if not requests:
        return []
    verdicts = None
    try:
        verdicts = call_with_timeout(lambda: judge.review(list(requests)), timeout_s)
    except CallTimeout as err:
        counts.add("timeouts", f"judge: {err}")
        return [Verdict(kind=FAILED) for _ in requests]
    except Exception as err:  # noqa: BLE001 - any judge failure is contained
        counts.add("errors", f"judge raised {type(err).__name__}: {err}")
    if verdicts is not None:
        check_verdict_count(judge, verdicts, len(requests))  # outside the try: the run stops
        if _valid_verdicts(verdicts, len(requests)):
            return list(verdicts)
        counts.add("garbage", f"judge answered {type(verdicts).__name__} for {len(requests)} requests")
    out = []
    for request in requests:
        try:
            one = call_with_timeout(lambda r=request: judge.review([r]), timeout_s)
        except CallTimeout as err:
            counts.add("timeouts", f"judge: {err}")
            one = None
        except Exception as err:  # noqa: BLE001
            counts.add("errors", f"judge raised {type(err).__name__}: {err}")
            one = None
        if one is not None:
            check_verdict_count(judge, one, 1)  # outside the try: the run stops
            if _valid_verdicts(one, 1):
                out.append(one[0])
                continue
            counts.add("garbage", f"judge answered {one!r:.80} for one request")
        out.append(Verdict(kind=FAILED))
    return out


def _number(value) -> float | None:
    """A finite float, NaN for None / NaN (no reward), or None for garbage (not a number, inf)."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isinf(f) else f


def _call_reward(reward: Reward, responses: list, items: list, timeout_s: float | None) -> list:
    """One reward call within ``timeout_s`` seconds (None: no limit): in a daemon thread cut by
    :func:`call_with_timeout`, or, for a reward that declares ``main_thread_only``
    (:class:`mintrl.reward.base.Reward`), in this thread with the limit handed over as its
    ``time_limit_s`` (it keeps the limit itself).

    Raises:
        CallTimeout: the limit passed. Exception: whatever the reward raised.
    """
    if reward.main_thread_only:
        reward.time_limit_s = timeout_s
        return list(reward(responses, items))
    return list(call_with_timeout(lambda: reward(responses, items), timeout_s))


def _rows_at_once(reward: Reward, responses: list, items: list, timeout_s: float) -> list[tuple[str, Any]]:
    """Every row's one-row call in its own daemon thread, all started at once and all cut at one
    deadline ``timeout_s`` seconds on: ``("value", values)``, ``("error", exception)`` or
    ``("timeout", None)`` per row, in order (a row cut at the deadline runs on, abandoned)."""
    boxes: list[dict[str, Any]] = [{} for _ in responses]

    def row(k: int) -> None:
        try:
            boxes[k]["value"] = list(reward([responses[k]], [items[k]]))
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            boxes[k]["error"] = err

    threads = [
        threading.Thread(target=row, args=(k,), daemon=True, name="mintrl-reward-row") for k in range(len(responses))
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [("timeout", None) if thread.is_alive() else next(iter(box.items())) for thread, box in zip(threads, boxes)]


def _rows_in_turn(reward: Reward, responses: list, items: list, timeout_s: float | None) -> list[tuple[str, Any]]:
    """Every row's one-row call in this thread, one after another, all within ``timeout_s``
    seconds in all (None: no limit); a row not reached in time is a timeout. Results as
    :func:`_rows_at_once`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    out: list[tuple[str, Any]] = []
    for response, item in zip(responses, items):
        left = None if deadline is None else deadline - time.monotonic()
        try:
            if left is not None and left <= 0:
                raise CallTimeout("the rows' retry time is spent")
            out.append(("value", _call_reward(reward, [response], [item], left)))
        except CallTimeout:
            out.append(("timeout", None))
        except Exception as err:  # noqa: BLE001
            out.append(("error", err))
    return out


def score_rewards_guarded(
    reward: Reward | Callable, responses: Sequence[str], items: Sequence, timeout_s: float | None, counts: FaultCounts
) -> list[float]:
    """Rewards of a batch, faults contained: a batch call that raises or times out is retried one
    row at a time, all the rows started at once and cut at one deadline ``timeout_s`` later, so a
    reward phase takes at most about two timeouts however many rows hang, and every row that
    answers in that time gets its reward. A row whose call fails or is cut, or whose value is not a
    number or infinite, gets NaN (no reward). None and NaN values are "no reward" as well, but not
    faults. A ``main_thread_only`` reward runs in this thread and keeps the limit itself (handed
    over as its ``time_limit_s``; its rows are retried one after another within one more
    ``timeout_s``). Without a limit (None) the rows are retried one after another in this thread.

    Args:
        reward: a :class:`mintrl.reward.base.Reward`, or a plain ``(responses, items) -> values``
            function (:func:`mintrl.reward.base.as_reward`).
        timeout_s: limit of the batch call, and of all the rows' retries together (seconds), or None.
        counts: incremented in place: ``timeouts`` (the batch call, then each row not answered in
            time), ``errors`` (calls that raised), ``garbage`` (values that are not finite numbers).

    Returns:
        ``N`` floats (NaN: no reward; see :func:`mintrl.objective.advantages.valid_rows`).

    Raises:
        ValueError: a call returned a sequence of the wrong length (the batch call, or a one-row
            retry): a configuration error, not retried (both lengths named).
        TypeError: ``reward`` is neither a Reward nor callable.
    """
    reward = as_reward(reward)
    responses, items = list(responses), list(items)
    if not responses:
        return []
    values = None
    try:
        values = _call_reward(reward, responses, items, timeout_s)
    except CallTimeout as err:
        counts.add("timeouts", f"reward: {err}")
    except Exception as err:  # noqa: BLE001
        counts.add("errors", f"reward raised {type(err).__name__}: {err}")
    if values is not None:
        check_reward_count(values, len(responses))  # outside the try: the run stops
    else:
        in_turn = timeout_s is None or reward.main_thread_only
        rows = (_rows_in_turn if in_turn else _rows_at_once)(reward, responses, items, timeout_s)
        values = []
        for kind, result in rows:
            if kind == "timeout":
                counts.add("timeouts", f"reward: a row gave no answer within {timeout_s} s")
                values.append(math.nan)
            elif kind == "error":
                counts.add("errors", f"reward raised {type(result).__name__}: {result}")
                values.append(math.nan)
            else:
                check_reward_count(result, 1)  # a configuration error: the run stops
                values.append(result[0])
    out = []
    for i, v in enumerate(values):
        f = _number(v)
        if f is None:
            counts.add("garbage", f"reward row {i}: {v!r:.80} is not a finite number")
            f = math.nan
        out.append(f)
    return out


class GuardedJudge(Judge):
    """A judge whose ``review`` never raises or hangs past ``timeout_s`` (:func:`review_guarded`).

    ``metrics()`` returns the wrapped judge's metrics plus, reset at each call, the step's
    ``judge/errors``, ``judge/timeouts`` and ``judge/garbage`` counts (each failed request also
    counts in ``judge/failed`` through its verdict). ``inner`` is the wrapped judge: errors name
    its class.

    Raises:
        TypeError: ``judge`` is not a :class:`mintrl.judge.base.Judge`.
    """

    def __init__(self, judge: Judge, timeout_s: float | None = None):
        check_range("rollout.judge_timeout_s", timeout_s, 0, low_open=True, none_ok=True)  # seconds
        if not isinstance(judge, Judge):
            raise TypeError(f"judge must be a mintrl.judge.base.Judge, got {type(judge).__name__}")
        self.inner: Judge = judge
        self.timeout_s, self.counts = timeout_s, FaultCounts()

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        return review_guarded(self.inner, requests, self.timeout_s, self.counts)

    def metrics(self) -> dict[str, float]:
        c, self.counts = self.counts, FaultCounts()
        if c.first:
            log.warning("judge faults this step (verdict 'failed', treated as Keep): %s", "; ".join(c.first))
        out = dict(self.inner.metrics())
        out.update(
            {"judge/errors": float(c.errors), "judge/timeouts": float(c.timeouts), "judge/garbage": float(c.garbage)}
        )
        return out


class GuardedReward(Reward):
    """A reward whose call never raises or hangs past about two ``timeout_s``
    (:func:`score_rewards_guarded`). A reward with ``main_thread_only = True`` (it times out by
    itself with signals, as ``math-verify`` does) runs in the calling thread and gets
    ``timeout_s`` as its ``time_limit_s``, which it keeps itself.

    ``metrics()`` returns the wrapped reward's metrics plus, reset at each call, the step's
    ``reward/failed`` (calls that raised or values that are not finite numbers) and
    ``reward/timeout`` counts (the guard's timeouts plus those the reward counted itself). A reward that returns the wrong number of values stops the run
    (:func:`score_rewards_guarded`). ``inner`` is the wrapped reward (a plain function is wrapped in
    :class:`mintrl.reward.base.FunctionReward`); its ``main_thread_only`` and ``handles_code`` are
    the guard's.

    Raises:
        TypeError: ``reward`` is neither a Reward nor callable (:func:`mintrl.reward.base.as_reward`).
    """

    def __init__(self, reward: Reward | Callable, timeout_s: float | None = None):
        check_range("rollout.reward_timeout_s", timeout_s, 0, low_open=True, none_ok=True)  # seconds
        self.inner: Reward = as_reward(reward)
        self.timeout_s, self.counts = timeout_s, FaultCounts()
        self.main_thread_only, self.handles_code = self.inner.main_thread_only, self.inner.handles_code

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float]:
        return score_rewards_guarded(self.inner, responses, items, self.timeout_s, self.counts)

    def metrics(self) -> dict[str, float]:
        c, self.counts = self.counts, FaultCounts()
        if c.first:
            log.warning("reward faults this step (no reward for those rollouts): %s", "; ".join(c.first))
        out = dict(self.inner.metrics())
        inner_timeouts = out.get("reward/timeout", 0.0)  # a reward that times out by itself (math-verify)
        out.update({"reward/failed": float(c.errors + c.garbage), "reward/timeout": float(c.timeouts) + inner_timeouts})
        return out


class Guarded:
    """An attribute of a rollout engine that always holds a guarded component: assigning a
    component stores it wrapped in ``guard`` (:class:`GuardedJudge` or :class:`GuardedReward`) with
    the time limit the engine holds in its attribute ``timeout_attr`` (seconds or None); an already
    guarded component is stored as it is. Reading returns the guard (``.inner`` is the component).
    Swapping the component later (the pilot swaps judges) keeps it guarded.

    Args:
        guard: the wrapper class, called as ``guard(component, timeout_s)``.
        timeout_attr: the engine attribute with the limit of one call (set before the component).
    """

    def __init__(self, guard: type, timeout_attr: str):
        self.guard, self.timeout_attr = guard, timeout_attr

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, engine, owner=None):
        return self if engine is None else getattr(engine, self.slot)

    def __set__(self, engine, component) -> None:
        if not isinstance(component, self.guard):
            component = self.guard(component, getattr(engine, self.timeout_attr))
        setattr(engine, self.slot, component)
