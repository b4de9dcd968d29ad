"""Math answers graded with ``math-verify`` (``benchmark=champ``, GSM8K and the hub math benchmarks)."""

from __future__ import annotations

from typing import Sequence

from mintrl.reward.base import Reward
from mintrl.text.answer import _TAG, find_boxes, marker_answer

REL_TOL = 1e-6  # two numbers are equal when |a - b| <= REL_TOL * max(|a|, |b|)


def parse_gold(answer: str):
    """``math_verify.parse`` of a reference answer written as plain math (wrapped in ``$...$``)."""
    import math_verify

    return math_verify.parse(answer if "$" in answer or "\\boxed" in answer else f"${answer}$")


def parse_response(response: str):
    """The model's final answer parsed by ``math_verify``, by the rules of
    :func:`mintrl.text.answer.locate_answer`: the last ``<answer>`` tag's content when it parses;
    else the last complete ``\\boxed{}``/``\\fbox{}`` (one box, never the set of all boxes; a
    response whose boxes are all unclosed has no answer, ``[]``); else the number after GSM8K's
    last ``####`` marker; else whatever ``math_verify`` finds in the whole response (``$...$``,
    the last number)."""
    import math_verify

    tags = _TAG.findall(response)
    if tags:
        parsed = parse_gold(tags[-1].strip())
        if parsed:
            return parsed
    boxes, opened = find_boxes(response)
    if opened:
        return math_verify.parse(f"\\boxed{{{boxes[-1][0]}}}") if boxes else []
    marked = marker_answer(response)
    if marked is not None:
        return parse_gold(marked[0])
    return math_verify.parse(response)


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
    the reference is ``item.reference`` and the answer is read by :func:`parse_response`. Runs in
    the calling (main) thread, since ``math-verify`` times out with signals (``main_thread_only``:
    the rollout's fault guard then contains its errors but leaves timing out to ``math-verify``)."""

    main_thread_only = True

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float]:
        """Rewards of ``N`` decoded responses for their prompt items."""
        import math_verify

        out = []
        for response, item in zip(responses, items):
            gold, answer = parse_gold(item.reference), parse_response(response)
            right = bool(gold) and bool(answer) and math_verify.verify(gold, answer)
            out.append(float(right and numbers_agree(gold, answer) is not False))
        return out
