"""What the text environments' action protocols share (``env/sql``, ``env/python_tool``,
``env/shell``): a final answer in ``<answer>...</answer>`` tags (the last one counts), else the first
fenced block of the environment's language, else an invalid action whose text tells the agent the
protocol (:class:`TaggedProtocol`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
FENCE = "```"


@dataclass(frozen=True)
class Action:
    """One parsed action.

    Attributes:
        kind: ``"answer"``, ``"invalid"`` or the environment's block kind (``"query"``, ``"run"``).
        text: the block's content (statement, code), the answer (stripped), or for ``invalid`` the
            observation to show.
        start: character offset in the action of the block's opening fence or of the ``<answer>``
            tag (-1 for ``invalid``).
        end: character offset just past the block's closing fence (the action's end for an open
            block) or the ``</answer>`` tag (-1 for ``invalid``).
    """

    kind: str
    text: str
    start: int = -1
    end: int = -1


def fenced_blocks(text: str, allow_open: bool = True) -> Iterator[tuple[str, int, int]]:
    """The fenced blocks of ``text`` in order as ``(body, start, end)``: fences pair up in order
    (1st opens, 2nd closes, ...); ``body`` is the text between them (the language tag included),
    ``start`` the opening fence's offset, ``end`` just past the closing fence (characters). With
    ``allow_open`` a block opened by the last fence and never closed comes last, ending at the
    end of ``text``."""
    fences = [m.start() for m in re.finditer(FENCE, text)]
    for k in range(0, len(fences), 2):
        start, closed = fences[k], k + 1 < len(fences)
        if not closed and not allow_open:
            return
        stop = fences[k + 1] if closed else len(text)
        yield text[start + len(FENCE) : stop], start, stop + len(FENCE) if closed else len(text)


def first_block(text: str, language: re.Pattern, clean: Callable[[str], str], allow_open: bool = True) -> Action | None:
    """The first fenced block of ``text`` whose body starts with ``language`` (a compiled pattern
    matching the fence's language tag), as a ``run`` action whose ``text`` is ``clean`` of the body
    after the tag (may be ""), or None. Fences pair up in order (:func:`fenced_blocks`); a pair
    without the tag is skipped.

    Args:
        allow_open: also accept a block opened by the last fence and never closed.
    """
    for body, start, end in fenced_blocks(text, allow_open):
        lang = language.match(body)
        if lang:
            return Action("run", clean(body[lang.end() :]), start, end)
    return None


def drop_leading_blank_lines(body: str) -> str:
    """``body`` with trailing space and its leading blank lines removed."""
    lines = body.rstrip().split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


@dataclass(frozen=True)
class TaggedProtocol:
    """One environment's action protocol (see the module docstring): an ``<answer>`` tag, else the
    environment's first fenced block, else an invalid action whose text tells the agent the protocol.

    Attributes:
        block: the fence language the agent is told to write (``python``, ``bash``, ``sql``).
        find_block: ``(text, allow_open) ->`` the environment's first block of ``text`` as an action
            (its text may be ""), or None.
        no_action, empty_block: the observations for an action with neither a block nor an answer,
            and for an empty block.
    """

    block: str
    find_block: Callable[[str, bool], Action | None]
    no_action: str
    empty_block: str

    def too_long(self, length: int, max_chars: int) -> str:
        """The observation for an action over the limit (``length`` and ``max_chars`` in characters)."""
        return (
            f"Your message is too long ({length} characters; at most {max_chars} are read). "
            f"Write one short ```{self.block} block or an <answer></answer> tag."
        )

    def parse(self, text: str, max_chars: int = 1000, allow_open: bool = True) -> Action:
        """Read one action; never raises.

        Args:
            text: the agent's whole turn.
            max_chars: longer actions are invalid (characters).
            allow_open: accept a block left open at the end (the turn ended inside it).
        """
        if len(text) > max_chars:
            return Action("invalid", self.too_long(len(text), max_chars))
        answers = list(ANSWER.finditer(text))
        if answers:
            last = answers[-1]
            return Action("answer", last.group(1).strip(), last.start(), last.end())
        block = self.find_block(text, allow_open)
        if block is None:
            return Action("invalid", self.no_action)
        if not block.text:
            return Action("invalid", self.empty_block)
        return block
