"""The review logic the execution-based judges of agent actions share (``judge=shell``, ``judge=sql``).

A turn holds at most one action: a fenced block the environment executes, or an ``<answer>``. The judge
parses the turn as the environment would and reviews only what lies past the accepted prefix:

- an unfinished turn (``final`` False) is judged only once it holds a complete (closed) block, and then
  only when that block is an executable action (an answer waits for the turn's end);
- an invalid action (no block and no answer, or over-long) is revised at step 0 with the reference
  action (``entry["reference_action"]``, else the environment's ``reference_action(entry)``);
- an answer is kept when :meth:`ActionJudge.answer_ok`, else revised with ``<answer>label</answer>``;
- an executable block is kept when :meth:`ActionJudge.action_ok`, else revised at the step where the
  block starts, with the reference action as the correction.

A request without an entry is kept; a request the judge cannot evaluate (an exception) is kept and
counted in ``judge/<name>_errors``: the judge never raises on model output.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from itertools import accumulate
from typing import Any, ClassVar, Sequence

from mintrl.core.checks import check_int
from mintrl.core.verdict import REVISE, ReviewRequest, Verdict
from mintrl.judge.base import Judge

log = logging.getLogger(__name__)


def step_at(steps: Sequence[str], offset: int) -> int:
    """Index of the step holding character ``offset`` of ``"".join(steps)`` (0 when before it, the
    last step when past it)."""
    for index, end in enumerate(accumulate(len(s) for s in steps)):
        if offset < end:
            return index
    return max(len(steps) - 1, 0)


class ActionJudge(Judge):
    """Execution-based judge of an environment's actions (see module docstring).

    A subclass names itself (:attr:`name`, the metric ``judge/<name>_errors``), the kind of an
    executable action its environment's ``parse_action`` returns (:attr:`action_kind`), and provides
    :meth:`check_entry`, :meth:`find_block`, :meth:`parse`, :meth:`reference`, :meth:`answer_ok` and
    :meth:`action_ok`.

    Args:
        max_action_chars: longer actions are invalid, as in the environment (characters, >= 1).

    Raises:
        ValueError: ``max_action_chars`` out of range (named ``judge.max_action_chars``).
    """

    name: ClassVar[str]
    action_kind: ClassVar[str]

    def __init__(self, max_action_chars: int):
        check_int("judge.max_action_chars", max_action_chars)
        self.max_action_chars = max_action_chars
        self.errors = 0

    @abstractmethod
    def check_entry(self, entry: dict[str, Any]) -> None:
        """Raise ValueError when the task entry lacks what the judge needs."""

    @abstractmethod
    def find_block(self, text: str, allow_open: bool):
        """The first executable block of ``text`` (with ``end``, a character offset), or None."""

    @abstractmethod
    def parse(self, text: str, allow_open: bool = True):
        """The turn's action as the environment parses it (``kind``, ``text``, ``start``, ``end``)."""

    @abstractmethod
    def reference(self, entry: dict[str, Any]) -> str:
        """The reference action of a task without ``entry["reference_action"]``."""

    @abstractmethod
    def answer_ok(self, entry: dict[str, Any], answer: str) -> bool:
        """Whether a final answer is kept."""

    @abstractmethod
    def action_ok(self, entry: dict[str, Any], action: str) -> bool:
        """Whether an executable action is kept (it does what the task needs)."""

    def review_one(self, request: ReviewRequest) -> Verdict:
        """Verdict for one request (see module docstring); never raises."""
        entry = request.entry
        if entry is None:
            return Verdict()
        try:
            return self._review(request, entry)
        except Exception as err:  # noqa: BLE001 - a judge never raises on model output
            self.errors += 1
            log.warning("%s judge failed: %s: %s", self.name, type(err).__name__, err)
            return Verdict()

    def _review(self, request: ReviewRequest, entry: dict) -> Verdict:
        self.check_entry(entry)
        prefix = request.prefix_text or ""
        text = prefix + "".join(request.steps)
        if not request.final:
            block = self.find_block(text, allow_open=False)
            if block is None or block.end <= len(prefix):
                return Verdict()
            action = self.parse(text, allow_open=False)
            if action.kind != self.action_kind:
                return Verdict()  # an answer or over-long text in an unfinished turn waits for its end
        else:
            action = self.parse(text)
        correction = entry.get("reference_action") or self.reference(entry)
        if action.kind == "invalid":
            return Verdict(kind=REVISE, step=0, correction=correction)
        if action.end <= len(prefix):
            return Verdict()  # judged with the accepted prefix
        step = step_at(request.steps, max(action.start - len(prefix), 0))
        if action.kind == "answer":
            if self.answer_ok(entry, action.text):
                return Verdict()
            return Verdict(kind=REVISE, step=step, correction=f"<answer>{entry['label']}</answer>")
        if self.action_ok(entry, action.text):
            return Verdict()
        return Verdict(kind=REVISE, step=step, correction=correction)

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One verdict per request (never raises)."""
        return [self.review_one(r) for r in requests]

    def metrics(self) -> dict[str, float]:
        """``judge/<name>_errors``: requests the judge could not evaluate (kept), since the last call."""
        out, self.errors = {f"judge/{self.name}_errors": float(self.errors)}, 0
        return out
