"""The agents section's place in a markdown file: the text between ``<!-- reproduce-agents:begin -->`` and
``<!-- reproduce-agents:end -->`` (markers included) is ``mintrl-reproduce-agents``'s; it replaces that block
when present and is appended at the end otherwise, leaving every other byte of the file as it was, and
``mintrl-reproduce`` (:func:`mintrl.analysis.report.write_report`) keeps it when it rewrites the rest."""

from __future__ import annotations

BEGIN, END = "<!-- reproduce-agents:begin -->", "<!-- reproduce-agents:end -->"


def block_span(text: str) -> tuple[int, int] | None:
    """Where the agents block lies in ``text``: ``(start, end)`` character offsets, from the first character of
    :data:`BEGIN` to just after :data:`END`; None when ``text`` has neither marker.

    Raises:
        ValueError: a marker without its partner, the end before the begin, or more than one block.
    """
    begins, ends = text.count(BEGIN), text.count(END)
    if begins == ends == 0:
        return None
    if begins != 1 or ends != 1:
        raise ValueError(f"expected one {BEGIN} and one {END}, found {begins} and {ends}")
    start, end = text.index(BEGIN), text.index(END)
    if end < start:
        raise ValueError(f"{END} comes before {BEGIN}")
    return start, end + len(END)


def agents_block(text: str) -> str | None:
    """The agents block of ``text`` (markers included), None without one (:func:`block_span`'s errors)."""
    span = block_span(text)
    return None if span is None else text[span[0] : span[1]]


def put_agents_block(text: str, block: str) -> str:
    """``text`` with its agents block replaced by ``block`` (which starts with :data:`BEGIN` and ends with
    :data:`END`), or, without one, ``block`` appended after a blank line and ending in a newline; every other
    character of ``text`` is kept as it was.

    Raises:
        ValueError: ``block`` does not start and end with the markers, or ``text``'s markers are malformed
            (:func:`block_span`).
    """
    if not (block.startswith(BEGIN) and block.endswith(END)):
        raise ValueError(f"an agents block starts with {BEGIN} and ends with {END}")
    span = block_span(text)
    if span is not None:
        return text[: span[0]] + block + text[span[1] :]
    separator = "" if not text else "\n" if text.endswith("\n") else "\n\n"
    return text + separator + block + "\n"


def keep_agents_block(new_text: str, old_text: str) -> str:
    """``new_text`` (a rewritten report) with ``old_text``'s agents block, unchanged, put in
    (:func:`put_agents_block`: appended at the end); ``new_text`` itself when ``old_text`` has none.

    Raises:
        ValueError: malformed markers in either text (:func:`block_span`).
    """
    block = agents_block(old_text)
    return new_text if block is None else put_agents_block(new_text, block)
