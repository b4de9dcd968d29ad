"""The shell environment's action protocol, the texts the agent sees, and answer checks.

An action is, in this order of precedence:

- ``answer``: it holds an ``<answer>...</answer>`` tag (the last one counts);
- ``run``: it holds a fenced block opened by ```` ```bash ```` (also ```` ```sh ````, ```` ```shell ````
  or ```` ```console ````; the first such block counts; a block left open at the very end of the
  action counts when ``allow_open``: the turn ended inside it); its command is the block's text
  without leading blank lines and trailing space;
- ``invalid``: anything else, an empty block, or an action longer than ``max_chars``; the action's
  ``text`` is then the observation that tells the agent the protocol.

An answer is compared with a task's label after :func:`normalize` (line ends unified, surrounding
space and quotes stripped, every run of whitespace one space) by one of :data:`CHECKS`, the check
names of AgentBench's OS tasks: ``exact`` (string-match), ``integer`` (integer-match),
``size`` (size-match: ``4K`` equals ``4096``), ``containing`` (the answer contains the label),
``in`` (the non-empty answer is part of the label); and the two forms of AgentBench's ``match``
object: ``literal`` (``{"answer": ..., "strip": false}``: the answer, as the action protocol gives
it, stripped, equals the label character for character, no other normalization) and ``regex``
(``{"regex": ...}``: the label is a Python regular expression that ``re.search`` finds in the
answer; the pattern is trusted data, the answer at most ``max_action_chars`` characters).
Several checks joined with ``+`` (``integer+exact``) all must hold: a check chain of AgentBench
with several comparison scripts after the example.
"""

from __future__ import annotations

import re

from mintrl.env.protocol import ANSWER, Action, TaggedProtocol, drop_leading_blank_lines, first_block

__all__ = ["ANSWER", "Action", "CHECKS", "answers_match", "check_names", "find_command", "normalize", "parse_action"]
_LANGUAGE = re.compile(r"(?:bash|sh|shell|console)[ \t]*(?:\n|$)", re.I)
CHECKS = ("exact", "integer", "size", "containing", "in", "literal", "regex")
_SIZE_UNITS = {"": 1, "B": 1, "BYTE": 1, "BYTES": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20}
_SIZE_UNITS |= {"G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40}
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$")

NO_ACTION = (
    "Your message has no ```bash block and no <answer></answer> tag. To run a command, write it in a ```bash "
    "block; when you know the answer, write it inside <answer></answer> tags."
)
EMPTY_COMMAND = "Your ```bash block is empty. Write a command inside it."
OUTPUT_HINT = (
    "If this answers the question, write the answer inside <answer></answer> tags; if not, run another command."
)
NO_OUTPUT = "(no output)"


def output_observation(text: str, exit_code: int | None, note: str = "") -> str:
    """The observation after a command: ``"Output:"``, its output (or :data:`NO_OUTPUT`), the exit
    code when not 0, an optional ``note`` (a cut, a timeout, a restart), then :data:`OUTPUT_HINT`
    (what to do next; a small model otherwise keeps running commands or stops)."""
    parts = [f"Output:\n{text if text else NO_OUTPUT}"]
    if exit_code not in (0, None):
        parts.append(f"(exit code {exit_code})")
    if note:
        parts.append(note)
    parts.append(OUTPUT_HINT)
    return "\n".join(parts)


def find_command(text: str, allow_open: bool = True) -> Action | None:
    """The first ```bash block of ``text`` as a ``run`` action (its ``text`` may be ""), or None
    (:func:`mintrl.env.protocol.first_block`; ``allow_open``: also a block never closed)."""
    return first_block(text, _LANGUAGE, drop_leading_blank_lines, allow_open)


PROTOCOL = TaggedProtocol("bash", find_command, NO_ACTION, EMPTY_COMMAND)
parse_action = PROTOCOL.parse  # (text, max_chars=1000, allow_open=True) -> Action; never raises
too_long = PROTOCOL.too_long  # (length, max_chars) -> the observation for an action over the limit


def normalize(text: str) -> str:
    """An answer or label as compared: ``\\r\\n`` and ``\\r`` as ``\\n``, surrounding whitespace and
    one pair of matching quotes or backticks stripped, every run of whitespace one space."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        text = text[1:-1].strip()
    return " ".join(text.split())


def size_bytes(text: str) -> int | None:
    """A size as AgentBench's size-match reads it (``4096``, ``4K``, ``1.5M``, ``12 B``; units
    powers of 1024), in bytes, or None when it is not a size."""
    match = _SIZE.match(normalize(text))
    if match is None or match.group(2).upper() not in _SIZE_UNITS:
        return None
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


def _integer(text: str) -> int | None:
    try:
        return int(normalize(text))
    except ValueError:
        return None


def check_names(check: str) -> list[str]:
    """The checks of a check field (one name, or several joined with ``+``).

    Raises:
        ValueError: a name not in :data:`CHECKS` (or an empty field).
    """
    names = str(check).split("+")
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown answer check {check!r} (one of {CHECKS}, or several joined with '+')")
    return names


def answers_match(answer: str, label: str, check: str = "exact") -> bool:
    """True when ``answer`` is right for ``label`` under ``check`` (one of :data:`CHECKS`, or
    several joined with ``+``, all of which must hold; see the module docstring); an answer that
    cannot be read as the check's type is wrong.

    Raises:
        ValueError: an unknown check.
    """
    return all(_one_match(answer, label, name) for name in check_names(check))


def _one_match(answer: str, label: str, check: str) -> bool:
    if check == "literal":
        return answer == label
    if check == "regex":
        return re.search(label, answer) is not None
    a, b = normalize(answer), normalize(label)
    if check == "exact":
        return a == b
    if check == "integer":
        x, y = _integer(a), _integer(b)
        return x is not None and x == y
    if check == "size":
        x, y = size_bytes(a), size_bytes(b)
        return x is not None and x == y
    if check == "containing":
        return b in a
    return bool(a) and a in b  # "in"
