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

import ast
import re
from collections import Counter

from mintrl.env.protocol import ANSWER, Action, TaggedProtocol, fenced_blocks

__all__ = [
    "ANSWER",
    "Action",
    "answers_match",
    "file_values_match",
    "find_query",
    "parse_action",
    "result_observation",
    "too_long",
]
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


def answer_items(text: str) -> list[str]:
    """The values of an answer: the items of a list literal (``["a, b", 3]``; a one-value tuple
    item ``(3,)`` is its value; an empty item is a value), else the text split on commas outside
    quotes (``"a, b", c`` is two values; empty values dropped), each stripped of spaces and of its
    quotes."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            value = None
        if isinstance(value, list):
            return [str(v[0] if isinstance(v, tuple) and len(v) == 1 else v).strip() for v in value]
        text = text[1:-1]
    items, current, quote = [], "", None
    for char in text:
        if quote is not None:
            if char == quote:
                quote = None
            else:
                current += char
        elif char in "'\"":
            quote = char
        elif char == ",":
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


_SPECIAL = {
    "none": "0", "null": "0", "undefined": "0", "nan": "0", "inf": "0", "infinity": "0", "-inf": "0",
    "-infinity": "0", "": "0",
}  # fmt: skip


def _file_value(value: str) -> str:
    """A DB-bench value as AgentBench normalises it: spaces and quotes stripped; then a value
    ending in ``%`` is the text before it (nothing else changed); else commas are removed
    (thousands separators) unless the value starts with ``[`` or ends with ``]``, and NULL-like
    words (``None``, ``NULL``, ``NaN``, ``inf``, empty, ...) become ``0``."""
    value = value.strip().strip("'\"").strip()
    if value.endswith("%"):
        return value[:-1].strip()
    if not value.startswith("[") and not value.endswith("]"):
        value = value.replace(",", "")
    return _SPECIAL.get(value.lower(), value)


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def file_values_match(answer: list[str], label: list[str]) -> bool:
    """AgentBench's DB-bench comparison of an answer's values with a label's, each value normalised
    (:func:`_file_value`): one value each, numbers within 0.01 (absolute) or equal text; several,
    all numbers: the same count, each matched to its own label value within 0.01; else equal sets
    of text (case kept, duplicates ignored)."""
    a, b = [_file_value(v) for v in answer], [_file_value(v) for v in label]
    numbers_a, numbers_b = [_number(v) for v in a], [_number(v) for v in b]
    numeric = all(x is not None for x in numbers_a + numbers_b)
    if len(a) == 1 and len(b) == 1:
        return abs(numbers_a[0] - numbers_b[0]) <= 0.01 if numeric else a[0] == b[0]
    if numeric and a and b:
        if len(a) != len(b):
            return False
        free = list(numbers_b)
        for x in numbers_a:
            match = next((i for i, y in enumerate(free) if abs(x - y) <= 0.01), None)
            if match is None:
                return False
            free.pop(match)
        return True
    return set(a) == set(b)


def answers_match(answer: str, label: str, label_values: list[str] | None) -> bool:
    """Whether an answer is right (every caller passes the task's ``label_values``, None or not).

    A generated task (``label_values`` None): ``answer`` and ``label`` hold the same values in any
    order (:func:`answer_values`). A DB-bench file row (``label_values``: its label list, rendered):
    by AgentBench's rule (:func:`file_values_match`); an answer that is a list literal (``[`` ...
    ``]``) gives its items; otherwise a one-value label takes the whole answer as one value (its
    commas kept) and a label of several values takes the answer's comma-separated values
    (:func:`answer_items`; AgentBench reads only list literals there, mintrl's protocol also takes
    comma-separated values, quotes keeping a value's commas)."""
    if label_values is None:
        return answer_values(answer) == answer_values(label)
    text = answer.strip()
    literal = text.startswith("[") and text.endswith("]")
    items = answer_items(text) if literal or len(label_values) > 1 else [text]
    return file_values_match(items, [str(v) for v in label_values])
