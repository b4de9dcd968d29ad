"""LaTeX answers as plain text, for scorers that compare plain strings or numbers (reasoning-gym's)."""

from __future__ import annotations

import re

_NUMBER = r"[-+]?\s*\d+(?:\.\d+)?"
_FRACTION = re.compile(rf"(?:(-)\s*)?\\[dt]?frac\s*\{{\s*({_NUMBER})\s*\}}\s*\{{\s*({_NUMBER})\s*\}}")
_MATH_DELIMITERS = re.compile(r"^\s*(?:\$\$?|\\\(|\\\[)(.*?)(?:\$\$?|\\\)|\\\])\s*$", re.S)
_THIN_SPACES = re.compile(r"\\[,!;: ]")


def plain_fractions(answer: str | None) -> str | None:
    """``answer`` with its LaTeX number fractions written as ``a/b``: ``\\frac{1}{2}``, ``\\dfrac``,
    ``\\tfrac`` -> ``1/2``; ``-\\frac{3}{4}`` and ``\\frac{-3}{4}`` -> ``-3/4`` (two minus signs
    cancel); an answer wholly inside ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` loses the delimiters
    and LaTeX thin spaces (``\\,``, ``\\!``) go. Text without a backslash or ``$`` is returned as it
    is, and so is None (no answer)."""
    if answer is None or ("\\" not in answer and "$" not in answer):
        return answer
    text = answer
    inner = _MATH_DELIMITERS.match(text)
    if inner:
        text = inner.group(1)
    text = _THIN_SPACES.sub("", text)

    def fraction(match: re.Match) -> str:
        outer, top, bottom = match.group(1), match.group(2).replace(" ", ""), match.group(3).replace(" ", "")
        negative = bool(outer) != top.startswith("-")
        return f"{'-' if negative else ''}{top.lstrip('+-')}/{bottom}"

    return _FRACTION.sub(fraction, text).strip()
