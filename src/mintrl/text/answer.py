"""Where a response states its final answer: the last ``<answer>`` tag, else the last number."""

from __future__ import annotations

import re

_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def locate_answer(response: str) -> tuple[str, int] | None:
    """The final answer of a response and its start offset: the content of the last
    ``<answer>...</answer>`` tag if any, else the last number in the text (commas removed);
    None when there is neither."""
    tags = list(_TAG.finditer(response))
    if tags:
        return tags[-1].group(1).strip(), tags[-1].start()
    numbers = list(_NUMBER.finditer(response))
    if numbers:
        return numbers[-1].group(0).replace(",", ""), numbers[-1].start()
    return None


def extract_answer(response: str) -> str | None:
    """The final answer of a response (see :func:`locate_answer`), or None."""
    located = locate_answer(response)
    return located[0] if located else None
