"""Reference solutions of prompt items (``PromptItem.solution``): the text a guide splices in
(:mod:`mintrl.guide`: a prefix of it, or all of it as a demonstration).

Each is written in the answer format its reward reads: math solutions end in
``<answer>...</answer>`` (:func:`mintrl.text.answer.extract_answer` reads the tag first), code
solutions are one fenced ``python`` block (:func:`mintrl.reward.code.extract_code`). A source
without a solution gives None: such a prompt gets no guide (counted, ``guide/no_solution``).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

_TERM = re.compile(r"\s*([+-])\s*")
_NUMBER = re.compile(r"-?\d+")


def answer_tag(answer: str) -> str:
    """``<answer>{answer}</answer>``: the answer format of ``reward=reasoning_gym``."""
    return f"<answer>{answer}</answer>"


def _format(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def arithmetic_solution(expression: str, answer: str) -> str | None:
    """A worked left-to-right solution of a chain of integer additions and subtractions, one
    step per line in the rule judge's claim format, then the tagged answer:
    ``"4 + 1 + 7"`` -> ``"4 + 1 = 5\\n5 + 7 = 12\\n<answer>12</answer>"``.

    Args:
        expression: e.g. reasoning-gym ``basic_arithmetic``'s ``metadata["expression"]``.
        answer: the reference answer (the solution must reach it exactly).

    Returns:
        The solution text, or None when the expression is not such a chain (other operators,
        parentheses) or its value is not ``answer`` (an exact solution or none).
    """
    parts = _TERM.split(expression.strip())  # [a, op, b, op, c, ...]
    if len(parts) < 3 or len(parts) % 2 == 0 or not all(_NUMBER.fullmatch(p) for p in parts[::2]):
        return None
    value, lines = Fraction(parts[0]), []
    for op, term in zip(parts[1::2], parts[2::2]):
        new = value + Fraction(term) if op == "+" else value - Fraction(term)
        lines.append(f"{_format(value)} {op} {term} = {_format(new)}")
        value = new
    if _format(value) != answer.strip():
        return None
    return "\n".join(lines + [answer_tag(answer.strip())])


def reasoning_gym_solution(entry: dict[str, Any]) -> str | None:
    """The solution of a reasoning-gym entry: an exact worked solution of an addition /
    subtraction chain (``metadata["expression"]``), else the task's own worked solution where its
    metadata has one (``answer_cot``, e.g. ``gsm_symbolic``; ``solution``), followed by the tagged
    answer; else None."""
    meta, answer = entry.get("metadata") or {}, str(entry.get("answer", ""))
    if isinstance(meta.get("expression"), str):
        worked = arithmetic_solution(meta["expression"], answer)
        if worked is not None:
            return worked
    for key in ("answer_cot", "solution"):
        text = meta.get(key)
        if isinstance(text, str) and text.strip():
            return f"{text.strip()}\n{answer_tag(answer.strip())}"
    return None


def champ_solution(problem) -> str | None:
    """A CHAMP problem's reference solution: its solution steps one per line, then the tagged
    answer (None when it has no steps)."""
    steps = [s.text.strip() for s in getattr(problem.solution, "steps", None) or [] if s.text.strip()]
    if not steps:
        return None
    return "\n".join(steps + [answer_tag(str(problem.answer).strip())])


def code_solution(code: str) -> str:
    """A code solution as one fenced python block (what ``reward=code`` extracts)."""
    return f"```python\n{code.rstrip()}\n```"
