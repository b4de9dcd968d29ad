"""``intervention=rule``: state the judge's corrected claim (arithmetic tasks)."""

from __future__ import annotations

from typing import Sequence

from mintrl.intervention.base import Correction, Intervention, InterventionRequest


class RuleIntervention(Intervention):
    """Writes the rule judge's correction (e.g. ``3 + 4 = 7``, or ``<answer>7</answer>``) as tokens.

    The text is ``template.format(correction=...)``, preceded by a space when the retained response
    does not end in whitespace, tokenized with the policy tokenizer and cut to ``max_new_tokens``.
    A verdict without a correction yields no tokens (the chunk is still cut). The writer is
    deterministic: every token's behaviour log-prob is 0 (probability 1).

    Args:
        context: the run's :class:`mintrl.build.components.ModelContext` (for the policy tokenizer).
        template: wording around the corrected claim.
        demonstration: complete response written by :meth:`demonstrate`, with ``{reference}``.
    """

    white_box = True  # deterministic: behaviour log-probs are exactly 0

    def __init__(
        self, context, template: str = "{correction}", demonstration: str = "The answer is <answer>{reference}</answer>"
    ):
        if "{correction}" not in template:
            raise ValueError("intervention.template must contain '{correction}'")
        if "{reference}" not in demonstration:
            raise ValueError("intervention.demonstration must contain '{reference}'")
        self.tokenizer = context.tokenizer
        self.template, self.demonstration = template, demonstration

    def _tokens(self, text: str, max_new_tokens: int, eos: bool = False) -> Correction:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if eos and self.tokenizer.eos_token_id is not None:
            ids = ids + [self.tokenizer.eos_token_id]
        ids = ids[:max_new_tokens]
        return Correction(ids, [0.0] * len(ids))

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """Token ids of each correction (empty where the verdict carries none)."""
        out = []
        for r in requests:
            if r.verdict is None or not r.verdict.correction:
                out.append(Correction([], []))
                continue
            text = self.template.format(correction=r.verdict.correction)
            if r.response_text and not r.response_text[-1].isspace():
                text = " " + text
            out.append(self._tokens(text, max_new_tokens))
        return out

    def demonstrate(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """The demonstration text with the reference answer, then EOS."""
        return [
            self._tokens(self.demonstration.format(reference=r.reference), max_new_tokens, eos=True) for r in requests
        ]
