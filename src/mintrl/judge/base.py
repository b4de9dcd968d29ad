"""The judge interface: review a chunk of steps, answer Keep or Revise with the earliest wrong step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

KEEP, REVISE, UNPARSEABLE, FAILED = "keep", "revise", "unparseable", "failed"


@dataclass
class ReviewRequest:
    """One chunk under review (MInTRL eq. 2: ``(a, e) = J(x, c)``).

    Attributes:
        question: the task text ``x`` as the policy saw it (without chat markup).
        reference: privileged context ``z`` (the reference answer), never shown to the policy.
        prefix_text: the accepted response so far (decoded).
        steps: the new chunk split into steps (see :func:`mintrl.text.steps.split_steps`).
        final: True when the chunk ended the response (EOS), so a claim at its very end is complete.
    """

    question: str
    reference: str
    prefix_text: str
    steps: list[str]
    final: bool = False


@dataclass
class Verdict:
    """A judge's answer for one chunk.

    Attributes:
        kind: ``"keep"``, ``"revise"``, ``"unparseable"`` (an LLM verdict that could not be read)
            or ``"failed"`` (the judge call failed or timed out); the last two are treated as Keep
            and counted.
        step: index into ``ReviewRequest.steps`` of the earliest wrong step (Revise only).
        correction: a short corrected claim the judge can state (the rule judge does), or None.
    """

    kind: str = KEEP
    step: int | None = None
    correction: str | None = None

    @property
    def revise(self) -> bool:
        """True for a Revise verdict."""
        return self.kind == REVISE


class Judge(Protocol):
    """Reviews chunks in a batch; must never raise on model output."""

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One verdict per request, in order."""
        ...
