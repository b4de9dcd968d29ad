"""Exact arithmetic for the rule judge: find ``a op b = c`` claims and final answers in text."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from fractions import Fraction

NUMBER = r"-?\d+(?:\.\d+)?"
# an expression of >= 2 numbers joined by + - * / x × ÷ (parentheses allowed), "=", a number. Each run of
# whitespace has one place in the pattern (no two \s* side by side around an optional parenthesis), so a
# long chain of operands without "=" fails in linear time instead of backtracking exponentially.
CLAIM = re.compile(
    rf"(?<![\w.])((?:\(\s*)*{NUMBER}(?:\s*(?:\)\s*)*[-+*/x×÷]\s*(?:\(\s*)*{NUMBER})+(?:\s*\))*)"
    rf"\s*=\s*({NUMBER})(?![\d.]*\d)"
)
ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S)
ANSWER_PHRASE = re.compile(rf"answer is:?\s*\$?({NUMBER})", re.I)

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def evaluate(expression: str) -> Fraction | None:
    """Exact value of an arithmetic expression of numbers, + - * / (also x, ×, ÷) and parentheses.

    Returns None for anything else (names, calls, powers, division by zero): never raises.
    """
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("x", "*")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return None

    def walk(node) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError("unsupported")

    try:
        return walk(tree)
    except (ValueError, ZeroDivisionError):
        return None


def to_number(text: str) -> Fraction | None:
    """``Fraction`` of a plain decimal number string (commas allowed), else None."""
    text = text.strip().replace(",", "")
    if re.fullmatch(NUMBER, text):
        return Fraction(text)
    return None


def format_number(value: Fraction) -> str:
    """Integers as ``7``, other values as a short decimal."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6g}"


def answer_matches(stated: str, reference: str) -> bool:
    """Whether a stated answer equals the reference: numerically when both are numbers, else as
    stripped strings."""
    value, ref = to_number(stated), to_number(reference)
    if value is not None and ref is not None:
        return value == ref
    return stated.strip() == reference.strip()


@dataclass
class Claim:
    """A checkable statement found in text (character span, whether it holds, its correct form)."""

    start: int
    end: int
    holds: bool
    correction: str


def find_claims(text: str, reference: str | None) -> list[Claim]:
    """All equation claims (``lhs = c`` checked exactly) and final-answer claims (``<answer>X</answer>``
    or "the answer is X", checked against ``reference`` when it is a number) in ``text``, in order.
    """
    claims: list[Claim] = []
    for m in CLAIM.finditer(text):
        value, stated = evaluate(m.group(1)), to_number(m.group(2))
        if value is None or stated is None:
            continue
        claims.append(Claim(m.start(), m.end(), value == stated, f"{m.group(1).strip()} = {format_number(value)}"))
    if reference is not None:
        for pattern, tagged in ((ANSWER_TAG, True), (ANSWER_PHRASE, False)):
            for m in pattern.finditer(text):
                holds = answer_matches(m.group(1), reference)
                correction = f"<answer>{reference}</answer>" if tagged else f"The answer is {reference}."
                claims.append(Claim(m.start(), m.end(), holds, correction))
    return sorted(claims, key=lambda c: c.start)
