"""What a judge says about a chunk and what it is shown: the verdict types every package that
reads a review shares (the judges, the rollout engines, the batch's review records).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class VerdictKind(str, Enum):
    """What a judge said about a chunk. ``UNPARSEABLE`` (an LLM verdict that could not be read) and
    ``FAILED`` (the judge call failed or timed out) are treated as Keep and counted. A ``str`` enum:
    each member equals its value (``VerdictKind.KEEP == "keep"``) and prints as it."""

    KEEP = "keep"
    REVISE = "revise"
    UNPARSEABLE = "unparseable"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


KEEP, REVISE, UNPARSEABLE, FAILED = VerdictKind.KEEP, VerdictKind.REVISE, VerdictKind.UNPARSEABLE, VerdictKind.FAILED


@dataclass
class ReviewRequest:
    """One chunk under review (MInTRL eq. 2: ``(a, e) = J(x, c)``).

    Attributes:
        question: the task text ``x`` as the policy saw it (without chat markup).
        reference: privileged context ``z`` (the reference answer), never shown to the policy.
        prefix_text: the accepted response so far (decoded).
        steps: the new chunk split into steps (see :func:`mintrl.text.steps.split_steps`).
        final: True when the chunk ended the response (EOS), so a claim at its very end is complete.
            In an episode (:mod:`mintrl.rollout.episodes`) the chunk is one action turn and ``final``
            is True when the action ended its turn.
        entry: the prompt item's task data (:attr:`mintrl.data.base.PromptItem.entry`), privileged:
            what an environment's rule judge executes (e.g. the SQL task's table and reference
            query); None where the caller has no item.
    """

    question: str
    reference: str
    prefix_text: str
    steps: list[str]
    final: bool = False
    entry: dict | None = None


@dataclass
class Verdict:
    """A judge's answer for one chunk.

    Attributes:
        kind: a :class:`VerdictKind` (its string value is accepted and converted).
        step: index into ``ReviewRequest.steps`` of the earliest wrong step (Revise only).
        correction: a short corrected claim the judge can state (the rule judge does), or None.

    Raises:
        ValueError: ``kind`` is not a verdict kind (a misspelled kind must not pass as Keep).
    """

    kind: VerdictKind = VerdictKind.KEEP
    step: int | None = None
    correction: str | None = None

    def __post_init__(self):
        try:
            self.kind = VerdictKind(self.kind)
        except ValueError:
            kinds = ", ".join(k.value for k in VerdictKind)
            raise ValueError(f"Verdict.kind={self.kind!r} is not one of {kinds}") from None

    @property
    def revise(self) -> bool:
        """True for a Revise verdict."""
        return self.kind == REVISE
