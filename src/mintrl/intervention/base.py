"""The intervention interface: write a short correction after the retained prefix (MInTRL Alg. 1, line 7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from mintrl.judge.base import Verdict


@dataclass
class InterventionRequest:
    """One correction to write: ``h ~ pi_JI(. | x, p || c_<e)``.

    Attributes:
        question: task text ``x``; reference: privileged context ``z``.
        prompt_ids: the policy's prompt token ids (chat-templated).
        response_ids: the retained response so far (accepted prefix + kept steps of the chunk).
        response_text: its decoded text.
        verdict: the judge's Revise verdict (its ``correction`` may be used).
    """

    question: str
    reference: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    verdict: Verdict


class Intervention(Protocol):
    """Writes corrections in the policy's token ids; at most ``max_new_tokens`` each, no EOS."""

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[list[int]]:
        """One correction per request, as policy token ids (at most ``max_new_tokens``, no EOS)."""
        ...
