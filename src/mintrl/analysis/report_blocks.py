"""The sections of a markdown report that other writers own: the text between ``<!-- <name>:begin -->`` and
``<!-- <name>:end -->`` (markers included) belongs to one writer, which replaces that block when present and
appends it at the end otherwise, leaving every other byte of the file as it was; a writer that rewrites the rest
of the file (``mintrl-reproduce``, :func:`mintrl.analysis.report.write_report`) keeps the blocks it does not own
(:func:`keep_blocks`).

The blocks of ``docs/reproduction.md``: :data:`AGENTS` (``mintrl-reproduce-agents``, RAIL on agent tasks) and
:data:`CONFIRM` (``mintrl-reproduce-confirm``, the claims at seeds fixed in advance) and :data:`STALENESS`
(``mintrl-reproduce-staleness``, training on stale rollouts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

AGENTS, CONFIRM, STALENESS = "reproduce-agents", "reproduce-confirm", "reproduce-staleness"
KEPT = (AGENTS, CONFIRM, STALENESS)  # the blocks mintrl-reproduce keeps when it rewrites the report


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of the block ``name``, e.g. ``markers("reproduce-agents") ==
    ("<!-- reproduce-agents:begin -->", "<!-- reproduce-agents:end -->")``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def block_span(text: str, name: str) -> tuple[int, int] | None:
    """Where the block ``name`` lies in ``text``: ``(start, end)`` character offsets, from the first character of
    its begin marker to just after its end marker (:func:`markers`); None when ``text`` has neither marker.

    Raises:
        ValueError: a marker without its partner, the end before the begin, or more than one block.
    """
    begin, end_marker = markers(name)
    begins, ends = text.count(begin), text.count(end_marker)
    if begins == ends == 0:
        return None
    if begins != 1 or ends != 1:
        raise ValueError(f"expected one {begin} and one {end_marker}, found {begins} and {ends}")
    start, end = text.index(begin), text.index(end_marker)
    if end < start:
        raise ValueError(f"{end_marker} comes before {begin}")
    return start, end + len(end_marker)


def find_block(text: str, name: str) -> str | None:
    """The block ``name`` of ``text`` (markers included), None without one (:func:`block_span`'s errors)."""
    span = block_span(text, name)
    return None if span is None else text[span[0] : span[1]]


def put_block(text: str, block: str, name: str) -> str:
    """``text`` with its block ``name`` replaced by ``block`` (which starts with the begin marker and ends with the
    end marker), or, without one, ``block`` appended after a blank line and ending in a newline; every other
    character of ``text`` is kept as it was.

    Raises:
        ValueError: ``block`` does not start and end with the markers, or ``text``'s markers are malformed
            (:func:`block_span`).
    """
    begin, end = markers(name)
    if not (block.startswith(begin) and block.endswith(end)):
        raise ValueError(f"a {name} block starts with {begin} and ends with {end}")
    span = block_span(text, name)
    if span is not None:
        return text[: span[0]] + block + text[span[1] :]
    separator = "" if not text else "\n" if text.endswith("\n") else "\n\n"
    return text + separator + block + "\n"


def keep_blocks(new_text: str, old_text: str, names: Sequence[str] = KEPT) -> str:
    """``new_text`` (a rewritten report) with ``old_text``'s blocks of these names, unchanged, put in
    (:func:`put_block`: appended at the end, in the order ``old_text`` holds them); ``new_text`` itself when
    ``old_text`` has none.

    Raises:
        ValueError: malformed markers in either text (:func:`block_span`).
    """
    spans = sorted((span, name) for name in names if (span := block_span(old_text, name)) is not None)
    for (start, end), name in spans:
        new_text = put_block(new_text, old_text[start:end], name)
    return new_text


def write_block(out: str | Path, block: str, name: str) -> Path:
    """Put ``block`` into the file ``out`` (:func:`put_block`: replacing the block ``name``, else appended; every
    other byte kept; the file and its folder created when absent). Returns ``out`` as a Path.

    Raises:
        ValueError: malformed markers in the file or the block (checked before anything is written).
    """
    out = Path(out)
    old = out.read_bytes().decode("utf-8") if out.is_file() else ""
    text = put_block(old, block, name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(text.encode("utf-8"))
    return out
