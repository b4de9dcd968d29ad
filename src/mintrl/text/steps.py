"""Step segmentation of a policy chunk (MInTRL section 2.3, "step-level intervention localization").

A chunk is split into steps at blank lines (``\\n\\n``) and at code-fence lines (a line starting
with `````). Steps are contiguous character spans that cover the whole text: joining them gives the
text back, so a step index maps to a cut position in the text and then to a token index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

BLANK_LINE = r"\n(?:[ \t]*\n)+"  # a line break and the blank lines after it (the next line's indent stays with it)
CODE_FENCE = r"(?m)^[ \t]*```"


@dataclass(frozen=True)
class Step:
    """One step: ``text[start:end]`` of the segmented chunk (character offsets)."""

    start: int
    end: int
    text: str


def split_steps(text: str, delimiters: tuple[str, ...] = ("blank_line", "code_fence")) -> list[Step]:
    """Split ``text`` into contiguous steps.

    Args:
        text: decoded chunk text.
        delimiters: any of ``"blank_line"`` (a step ends after a run of blank lines, which stays
            with it) and ``"code_fence"`` (a fence line starts a new step, and the line after a
            closing or opening fence starts another), or raw regular expressions whose match *end*
            is a step boundary.

    Returns:
        Non-empty steps in order; ``"".join(s.text for s in steps) == text``. Text without any
        delimiter is one step; trailing text after the last delimiter is its own step; an empty
        text gives ``[]``.

    Raises:
        ValueError: an unknown named delimiter (names listed).
    """
    cuts: set[int] = set()
    for name in delimiters:
        if name == "blank_line":
            cuts.update(m.end() for m in re.finditer(BLANK_LINE, text))
        elif name == "code_fence":
            for m in re.finditer(CODE_FENCE, text):
                cuts.add(m.start())
                eol = text.find("\n", m.end())
                if eol != -1:
                    cuts.add(eol + 1)
        elif name.startswith("regex:"):
            cuts.update(m.end() for m in re.finditer(name[len("regex:") :], text))
        else:
            raise ValueError(f"unknown step delimiter {name!r}; valid: 'blank_line', 'code_fence', 'regex:<pattern>'")
    bounds = sorted(c for c in cuts if 0 < c < len(text))
    edges = [0, *bounds, len(text)]
    return [Step(a, b, text[a:b]) for a, b in zip(edges, edges[1:]) if b > a]


def token_index_of_char(tokenizer, ids: Sequence[int], char: int) -> int:
    """Largest ``k`` with ``len(decode(ids[:k])) <= char``: the number of tokens that lie wholly
    before character ``char`` of ``decode(ids)`` (a token straddling it is dropped). Binary search."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tokenizer.decode(list(ids[:mid]))) <= char:
            lo = mid
        else:
            hi = mid - 1
    return lo
