"""``judge=rule``: a noise-free judge for arithmetic tasks.

It checks every explicit claim of each step with exact arithmetic (``3 + 4 = 8`` is false) and a
stated final answer against the reference answer, and revises the earliest step with a false
claim. With ``check_last_number``, a chunk that ends the response must also leave a final answer,
as the reward reads it (:func:`mintrl.text.answer.locate_answer`: the last ``<answer>`` tag, else
the last complete box, else the ``####`` number, else the last number), that matches the
reference; if it does not, the step holding it is revised with a correction stating the reference
answer (a much more frequent intervention: see the pilot table of docs/measurements.md, "Which
judge and intervention the embedded default uses").

The first step is read together with the unfinished last step of the accepted prefix, so a
claim split across the chunk boundary is still checked; a claim that ends exactly where a
non-final chunk ends may be incomplete ("= 1" of "= 12") and waits for the next chunk.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Sequence

from mintrl.core.verdict import REVISE, ReviewRequest, Verdict
from mintrl.judge.arithmetic import answer_matches, find_claims
from mintrl.judge.base import Judge
from mintrl.text.answer import locate_answer
from mintrl.text.steps import split_steps


class RuleJudge(Judge):
    """Exact-arithmetic judge (see module docstring).

    Args:
        context: unused (judges receive the run's ModelContext).
        check_final_answer: check stated final answers (``<answer>`` tags, "the answer is X")
            against the reference.
        check_last_number: also treat the final answer of a finished response as the reward reads it
            (no tag: the last box, the ``####`` number or the last number) as its final answer.
    """

    def __init__(self, context=None, check_final_answer: bool = True, check_last_number: bool = False):
        self.check_final_answer = check_final_answer
        self.check_last_number = check_last_number

    def review_one(self, request: ReviewRequest) -> Verdict:
        """Verdict for one request: Revise at the earliest step holding a false claim, else Keep."""
        reference = request.reference if self.check_final_answer else None
        steps = request.steps
        tail = ""
        if request.prefix_text:
            last = split_steps(request.prefix_text)
            tail = last[-1].text if last else ""
            if tail.endswith("\n\n") or tail.rstrip(" \t") != tail.rstrip():  # prefix ended on a delimiter
                tail = ""
        text_end = sum(len(s) for s in steps)
        offset = 0
        for index, step in enumerate(steps):
            text = (tail + step) if index == 0 else step
            skip = len(tail) if index == 0 else 0
            for claim in find_claims(text, reference):
                if claim.end <= skip:
                    continue  # wholly inside the accepted prefix: already judged
                at_chunk_end = offset + claim.end - skip >= text_end
                if at_chunk_end and not request.final:
                    continue  # may still be incomplete
                if not claim.holds:
                    return Verdict(kind=REVISE, step=index, correction=claim.correction)
            offset += len(step)
        if request.final and reference is not None and self.check_last_number:
            return self._check_final_answer(request, reference)
        return Verdict()

    @staticmethod
    def _check_final_answer(request: ReviewRequest, reference: str) -> Verdict:
        """Revise the step holding a wrong final answer (reward's extraction rule) of a final chunk."""
        chunk = "".join(request.steps)
        located = locate_answer(request.prefix_text + chunk)
        if located is None:
            return Verdict()
        answer, position = located
        position -= len(request.prefix_text)
        if answer_matches(answer, reference) or position < 0:
            return Verdict()  # right, or stated in already-accepted text
        ends = accumulate(len(step) for step in request.steps)
        index = next(i for i, end in enumerate(ends) if position < end)
        return Verdict(kind=REVISE, step=index, correction=f"<answer>{reference}</answer>")

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One verdict per request (never raises on text)."""
        return [self.review_one(r) for r in requests]
