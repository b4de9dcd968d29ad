"""Math answers graded with ``math-verify`` (``benchmark=champ``, GSM8K and the hub math benchmarks)."""

from __future__ import annotations

import math
import time
from typing import Sequence

from mintrl.core.checks import check_int
from mintrl.reward.base import Reward
from mintrl.text.answer import _TAG, find_boxes, marker_answer

REL_TOL = 1e-6  # two numbers are equal when |a - b| <= REL_TOL * max(|a|, |b|)


class ComparisonTimeout(Exception):
    """A ``math-verify`` parse or comparison ran past its time limit."""


PARSE_TIMEOUT_S = 5  # math-verify's own default limit of one parse or comparison (whole seconds)


def _limit(timeout_s: int, deadline: float | None) -> int:
    """Whole seconds for the next parse or comparison: ``timeout_s``, or the time left before
    ``deadline`` (``time.monotonic()`` seconds) rounded up when that is shorter.

    Raises:
        ComparisonTimeout: ``deadline`` has passed.
    """
    if deadline is None:
        return timeout_s
    left = deadline - time.monotonic()
    if left <= 0:
        raise ComparisonTimeout("the call's time limit is spent")
    return min(timeout_s, math.ceil(left))


def _as_math(answer: str) -> str:
    """A reference answer written as plain math, wrapped in ``$...$`` for ``math_verify.parse``."""
    return answer if "$" in answer or "\\boxed" in answer else f"${answer}$"


def _parse(text: str, timeout_s: int, deadline: float | None = None):
    """``math_verify.parse(text)`` with its limit: ``[]`` on a parse error (as math-verify returns).

    Raises:
        ComparisonTimeout: the parse ran past ``timeout_s`` seconds or past ``deadline``.
    """
    import math_verify
    from math_verify.errors import TimeoutException

    limit = _limit(timeout_s, deadline)
    try:
        return math_verify.parse(text, parsing_timeout=limit, raise_on_error=True)
    except TimeoutException as err:
        raise ComparisonTimeout(str(err)) from None
    except Exception:  # noqa: BLE001 - an unparseable text has no answer, as in math-verify
        return []


def parse_gold(answer: str, timeout_s: int = PARSE_TIMEOUT_S, deadline: float | None = None):
    """``math_verify.parse`` of a reference answer written as plain math (wrapped in ``$...$``).

    Raises:
        ComparisonTimeout: the parse ran past ``timeout_s`` seconds or past ``deadline``
            (``time.monotonic()`` seconds; None: none).
    """
    return _parse(_as_math(answer), timeout_s, deadline)


def parse_response(response: str, timeout_s: int = PARSE_TIMEOUT_S, deadline: float | None = None):
    """The model's final answer parsed by ``math_verify``, by the rules of
    :func:`mintrl.text.answer.locate_answer`: the last ``<answer>`` tag's content when it parses;
    else the last complete ``\\boxed{}``/``\\fbox{}`` (one box, never the set of all boxes; a
    response whose boxes are all unclosed has no answer, ``[]``); else the number after GSM8K's
    last ``####`` marker; else whatever ``math_verify`` finds in the whole response (``$...$``,
    the last number).

    Raises:
        ComparisonTimeout: a parse ran past ``timeout_s`` seconds or past ``deadline``
            (``time.monotonic()`` seconds; None: none).
    """
    tags = _TAG.findall(response)
    if tags:
        parsed = parse_gold(tags[-1].strip(), timeout_s, deadline)
        if parsed:
            return parsed
    boxes, opened = find_boxes(response)
    if opened:
        return _parse(f"\\boxed{{{boxes[-1][0]}}}", timeout_s, deadline) if boxes else []
    marked = marker_answer(response)
    if marked is not None:
        return parse_gold(marked[0], timeout_s, deadline)
    return _parse(response, timeout_s, deadline)


def verify_bounded(gold, answer, timeout_s: int = PARSE_TIMEOUT_S, deadline: float | None = None) -> bool:
    """``math_verify.verify(gold, answer)``, pair by pair with its limit: True when any pair of
    parsed gold and answer values is equal; a pair whose comparison raises counts as unequal (as in
    math-verify).

    Raises:
        ComparisonTimeout: a comparison ran past ``timeout_s`` seconds or past ``deadline``
            (``time.monotonic()`` seconds; None: none).
    """
    import math_verify
    from math_verify.errors import TimeoutException

    for g in gold:
        for a in answer:
            limit = _limit(timeout_s, deadline)
            try:
                if math_verify.verify([g], [a], timeout_seconds=limit, raise_on_error=True):
                    return True
            except TimeoutException as err:
                raise ComparisonTimeout(str(err)) from None
            except Exception:  # noqa: BLE001 - a failed comparison is unequal, as in math-verify
                continue
    return False


def numbers_agree(gold, answer, rel_tol: float = REL_TOL) -> bool | None:
    """Relative numeric check of two parsed answers (the first element of ``math_verify.parse``).

    ``math_verify.verify`` rounds numbers to 6 decimals, so ``1/2^99`` and ``1/2^98`` (both 0.000000)
    compare equal; here two numbers agree when ``|a - b| <= rel_tol * max(|a|, |b|)``, evaluated
    with 30 significant digits (``\\sqrt{17}`` agrees with ``4.123105625617661``).

    Returns:
        True or False when both are single numbers (real or complex), None otherwise (sets,
        intervals, equations, expressions with symbols, or an evaluation error).
    """
    import sympy

    a, b = (gold[0] if gold else None), (answer[0] if answer else None)
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr) and a.is_number and b.is_number):
        return None
    try:
        diff = abs(sympy.N(a - b, 30))
        scale = max(abs(sympy.N(a, 30)), abs(sympy.N(b, 30)))
        return bool(diff <= rel_tol * scale)
    except (TypeError, ValueError, ArithmeticError):
        return None


class MathVerifyReward(Reward):
    """1.0 when ``math_verify.verify(gold, answer)`` holds (equivalent expressions, sets, intervals)
    and, for two numbers, they also agree to a relative ``1e-6`` (:func:`numbers_agree`), else 0.0;
    the reference is ``item.reference`` and the answer is read by :func:`parse_response`.

    A parse or comparison that runs past its limit gives that row no reward (NaN, counted in
    ``reward/timeout``), never 0: a hung check says nothing about the answer. Runs in the calling
    (main) thread, since ``math-verify`` times out with ``SIGALRM`` (``main_thread_only``): the
    rollout's fault guard cannot cut it, so it hands this reward ``rollout.reward_timeout_s`` as
    :attr:`time_limit_s` and the whole call keeps that limit itself: each parse or comparison gets
    ``comparison_timeout_s`` or the time left (whole seconds, rounded up, so a call ends at most
    about 1 s late), and the rows not graded when the limit is spent get no reward (NaN, counted).

    Args:
        comparison_timeout_s: limit of one ``math-verify`` parse or comparison (whole seconds,
            >= 1; ``signal.alarm`` counts in seconds); 5 is math-verify's own default.

    Raises:
        ValueError: ``comparison_timeout_s`` not a positive integer.
    """

    main_thread_only = True

    def __init__(self, comparison_timeout_s: int = 5):
        check_int("reward.comparison_timeout_s", comparison_timeout_s, 1)
        self.comparison_timeout_s = comparison_timeout_s
        self.timeouts = 0

    def _grade(self, response: str, reference: str, deadline: float | None) -> float:
        limit = self.comparison_timeout_s
        try:
            gold, answer = parse_gold(reference, limit, deadline), parse_response(response, limit, deadline)
            right = bool(gold) and bool(answer) and verify_bounded(gold, answer, limit, deadline)
        except ComparisonTimeout:
            self.timeouts += 1
            return math.nan
        return float(right and numbers_agree(gold, answer) is not False)

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float]:
        """Rewards of ``N`` decoded responses for their prompt items (NaN: a row that timed out or
        was not reached within :attr:`time_limit_s`)."""
        deadline = None if self.time_limit_s is None else time.monotonic() + self.time_limit_s
        return [self._grade(response, item.reference, deadline) for response, item in zip(responses, items)]

    def metrics(self) -> dict[str, float]:
        """``reward/timeout``: rows whose parse or comparison timed out since the last call (then 0)."""
        out, self.timeouts = {"reward/timeout": float(self.timeouts)}, 0
        return out
