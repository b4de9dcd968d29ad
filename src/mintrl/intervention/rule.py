"""``intervention=rule``: state the judge's corrected claim (arithmetic tasks)."""

from __future__ import annotations

from typing import Sequence

from mintrl.intervention.base import InterventionRequest


class RuleIntervention:
    """Writes the rule judge's correction (e.g. ``3 + 4 = 7``, or ``<answer>7</answer>``) as tokens.

    The text is ``template.format(correction=...)``, preceded by a space when the retained response
    does not end in whitespace, tokenized with the policy tokenizer and cut to ``max_new_tokens``.
    A verdict without a correction yields no tokens (the chunk is still cut).

    Args:
        context: the run's :class:`mintrl.build.ModelContext` (for the policy tokenizer).
        template: wording around the corrected claim.
    """

    def __init__(self, context, template: str = "{correction}"):
        if "{correction}" not in template:
            raise ValueError("intervention.template must contain '{correction}'")
        self.tokenizer = context.tokenizer
        self.template = template

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[list[int]]:
        """Token ids of each correction (``[]`` where the verdict carries none)."""
        out = []
        for r in requests:
            if not r.verdict.correction:
                out.append([])
                continue
            text = self.template.format(correction=r.verdict.correction)
            if r.response_text and not r.response_text[-1].isspace():
                text = " " + text
            out.append(self.tokenizer.encode(text, add_special_tokens=False)[:max_new_tokens])
        return out
