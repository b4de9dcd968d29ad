"""The SQL environment's action protocol: read one action text, and compare a final answer with a label.

An action is, in this order of precedence:

- ``answer``: it holds an ``<answer>...</answer>`` tag (the last one counts);
- ``query``: it holds a fenced block ```` ```sql ... ``` ```` (the first one counts; a block without
  a language counts when its text starts with SELECT, INSERT, UPDATE, DELETE or WITH; a block left
  open at the very end of the action counts when ``allow_open``: the turn ended inside it);
- ``invalid``: anything else, an empty block, or an action longer than ``max_chars``; the action's
  ``text`` is then the observation that tells the agent the protocol.
"""

from __future__ import annotations

import re
from collections import Counter

from mintrl.env.protocol import ANSWER, Action, TaggedProtocol, fenced_blocks

__all__ = ["ANSWER", "Action", "answers_match", "find_query", "parse_action", "result_observation", "too_long"]
_LANGUAGE = re.compile(r"[ \t]*(?:sql|sqlite)\b[ \t]*\n?", re.I)
_STATEMENT = re.compile(r"(?:select|insert|update|delete|with)\b", re.I)
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")

NO_ACTION = (
    "Your message has no ```sql block and no <answer></answer> tag. To run SQL, write one statement in a "
    "```sql block; when you know the answer, write it inside <answer></answer> tags."
)
EMPTY_QUERY = "Your ```sql block is empty. Write one SQL statement inside it."
RESULT_HINT = (
    "If this answers the question, write the answer inside <answer></answer> tags; if not, run another statement."
)


def result_observation(result: str) -> str:
    """The observation after a statement ran: ``"Result:"``, its result text, then
    :data:`RESULT_HINT` (what to do next; a small model otherwise keeps querying or stops)."""
    return f"Result:\n{result}\n{RESULT_HINT}"


def _statement(body: str) -> str | None:
    """The SQL of a fenced block's body, or None when the block is not SQL."""
    lang = _LANGUAGE.match(body)
    if lang:
        return body[lang.end() :].strip()
    stripped = body.strip()
    return stripped if _STATEMENT.match(stripped) else None


def find_query(text: str, allow_open: bool = True) -> Action | None:
    """The first SQL block of ``text`` as a ``query`` action (its ``text`` may be ""), or None.

    Args:
        allow_open: also accept a block opened by the last fence and never closed.
    """
    for body, start, end in fenced_blocks(text, allow_open):
        statement = _statement(body)
        if statement is not None:
            return Action("query", statement, start, end)
    return None


PROTOCOL = TaggedProtocol("sql", find_query, NO_ACTION, EMPTY_QUERY)
parse_action = PROTOCOL.parse  # (text, max_chars=1000, allow_open=True) -> Action; never raises
too_long = PROTOCOL.too_long  # (length, max_chars) -> the observation for an action over the limit


def _value_key(part: str) -> tuple[str, str]:
    part = part.strip().strip("'\"`").strip().lower()
    if _NUMBER.match(part):
        number = float(part)
        return ("number", format(number if number else 0.0, ".9g"))
    return ("text", part[:-1].rstrip() if part.endswith(".") else part)


def answer_values(text: str) -> Counter:
    """The multiset of an answer's values: split on commas, each stripped of spaces and quotes and
    lower-cased; numbers compared by value to 9 significant digits (``34.0`` equals ``34``); text
    without one trailing period; empty parts dropped."""
    return Counter(_value_key(p) for p in text.split(",") if p.strip().strip("'\"`").strip())


def answers_match(answer: str, label: str) -> bool:
    """True when ``answer`` and ``label`` hold the same values in any order (:func:`answer_values`)."""
    return answer_values(answer) == answer_values(label)
