"""The Python-tool environment's action protocol and the texts the agent sees.

An action is, in this order of precedence:

- ``answer``: it holds an ``<answer>...</answer>`` tag (the last one counts);
- ``run``: it holds a fenced block opened by ```` ```python ```` (also ```` ```py ```` or
  ```` ```python3 ````; the first such block counts; a block left open at the very end of the
  action counts when ``allow_open``: the turn ended inside it); its code is the block's text,
  dedented, without leading blank lines or trailing space;
- ``invalid``: anything else, an empty block, or an action longer than ``max_chars``; the action's
  ``text`` is then the observation that tells the agent the protocol.
"""

from __future__ import annotations

import re
import textwrap

from mintrl.env.protocol import ANSWER, Action, TaggedProtocol, drop_leading_blank_lines, first_block

__all__ = ["ANSWER", "Action", "find_code", "output_observation", "parse_action", "too_long"]
_LANGUAGE = re.compile(r"(?:python3?|py)[ \t]*(?:\n|$)", re.I)

NO_ACTION = (
    "Your message has no ```python block and no <answer></answer> tag. To run Python, write code in a "
    "```python block that prints what you need; when you know the answer, write it inside <answer></answer> tags."
)
EMPTY_CODE = "Your ```python block is empty. Write Python code inside it that prints the result."
OUTPUT_HINT = "If this answers the question, write the answer inside <answer></answer> tags; if not, run more code."
ERROR_HINT = "Fix the code and run it again, or write the answer inside <answer></answer> tags."
NO_OUTPUT = "(nothing was printed: use print() to see a value)"


def output_observation(text: str, ok: bool = True) -> str:
    """The observation after code ran: ``"Output:"``, what it printed (or its error), then what to
    do next (a small model otherwise keeps running code or stops): :data:`OUTPUT_HINT` after code
    that ran to the end (``ok``), else :data:`ERROR_HINT`."""
    return f"Output:\n{text if text else NO_OUTPUT}\n{OUTPUT_HINT if ok else ERROR_HINT}"


def _code(body: str) -> str:
    """A block body's code: dedented, leading blank lines and trailing space removed."""
    return drop_leading_blank_lines(textwrap.dedent(body))


def find_code(text: str, allow_open: bool = True) -> Action | None:
    """The first ```python block of ``text`` as a ``run`` action (its ``text`` may be ""), or None
    (:func:`mintrl.env.protocol.first_block`; ``allow_open``: also a block never closed)."""
    return first_block(text, _LANGUAGE, _code, allow_open)


PROTOCOL = TaggedProtocol("python", find_code, NO_ACTION, EMPTY_CODE)
parse_action = PROTOCOL.parse  # (text, max_chars=1000, allow_open=True) -> Action; never raises
too_long = PROTOCOL.too_long  # (length, max_chars) -> the observation for an action over the limit
