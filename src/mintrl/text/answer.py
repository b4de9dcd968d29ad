"""Where a response states its final answer: the last ``<answer>`` tag, else the last complete
``\\boxed{}``/``\\fbox{}``, else the number after GSM8K's ``####`` marker, else the last number."""

from __future__ import annotations

import re

_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKER = re.compile(r"####([^\n]*)")  # GSM8K's final-answer line: "#### 288"


def _closing_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` that closes the ``{`` at ``open_at`` (nested groups counted, ``\\{``
    and ``\\}`` skipped as escaped characters), or None when the group is never closed."""
    depth, i = 0, open_at
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def find_boxes(response: str) -> tuple[list[tuple[str, int]], bool]:
    """The complete ``\\boxed{...}`` and ``\\fbox{...}`` of a response.

    Returns:
        ``(boxes, any_opened)``: ``boxes`` is ``[(content, start offset of the command)]`` in the
        order the boxes open (a box inside a box comes after it), contents stripped, nested braces
        kept; an unclosed box (a truncated response) is left out. ``any_opened`` is True when the
        response opens at least one box, complete or not.
    """
    boxes, opened = [], False
    for m in _BOX.finditer(response):
        opened = True
        close = _closing_brace(response, m.end() - 1)
        if close is not None:
            boxes.append((response[m.end() : close].strip(), m.start()))
    return boxes, opened


def marker_answer(response: str) -> tuple[str, int] | None:
    """GSM8K's final answer: the first number on the line of the last ``####`` marker (commas
    removed) and its start offset, whatever follows; None without a marker or a number after it."""
    markers = list(_MARKER.finditer(response))
    if not markers:
        return None
    number = _NUMBER.search(markers[-1].group(1))
    if number is None:
        return None
    return number.group(0).replace(",", ""), markers[-1].start(1) + number.start()


def locate_answer(response: str) -> tuple[str, int] | None:
    """The final answer of a response and its start offset, by the first rule that applies:

    1. the content of the last ``<answer>...</answer>`` tag;
    2. the content of the last complete ``\\boxed{}``/``\\fbox{}`` (the one opened last); a response
       that opens boxes but closes none has no answer (None), so a truncated box never scores;
    3. the first number after the last GSM8K ``####`` marker on its line;
    4. the last number in the text.

    Numbers have their thousands commas removed. None when no rule finds anything.
    """
    tags = list(_TAG.finditer(response))
    if tags:
        return tags[-1].group(1).strip(), tags[-1].start()
    boxes, opened = find_boxes(response)
    if opened:
        return boxes[-1] if boxes else None
    marked = marker_answer(response)
    if marked is not None:
        return marked
    numbers = list(_NUMBER.finditer(response))
    if numbers:
        return numbers[-1].group(0).replace(",", ""), numbers[-1].start()
    return None


def extract_answer(response: str) -> str | None:
    """The final answer of a response (see :func:`locate_answer`), or None."""
    located = locate_answer(response)
    return located[0] if located else None
