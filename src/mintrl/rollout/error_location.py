"""The judge's first wrong step of a finished response, as a token position.

Both first-error credit (``objective=first_error``, after Cliff: Ko et al. 2026, arXiv 2606.25524,
"the first failure-triggering token") and intervention SFT (``sft=interventions``, after InT: Yang
et al. 2026, arXiv 2601.14209, "the model identifies the first error in its reasoning") need the
same thing: the configured judge reviews a *whole* finished response once, as one chunk of steps
after an empty prefix, and its Revise step is mapped to the response token where that step starts
(:func:`mintrl.text.steps.token_index_of_char`: the tokens before it lie wholly before the step).
All requests of a batch go to the judge in one ``review`` call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from mintrl.core.verdict import REVISE, ReviewRequest, Verdict
from mintrl.text.steps import split_steps, token_index_of_char


@dataclass(frozen=True)
class FirstError:
    """Where the judge found the first wrong step of one response.

    Attributes:
        token: response tokens wholly before the wrong step (the cut: ``response_ids[:token]`` is
            the error-free prefix; tokens from ``token`` on are the wrong step and what follows).
        step: index of the wrong step among the response's steps.
        verdict: the judge's Revise verdict (its ``correction`` feeds the intervention).
    """

    token: int
    step: int
    verdict: Verdict


def is_failed(reward: float) -> bool:
    """A rollout failed when it has a reward (finite) below 1, the full score of the rewards in
    ``[0, 1]``; a missing reward (NaN) is neither failed nor passed."""
    return math.isfinite(reward) and reward < 1.0


def locate_first_errors(
    judge,
    tokenizer,
    responses: Sequence[Sequence[int]],
    finished: Sequence[bool],
    items: Sequence,
    step_delimiters: Sequence[str] = ("blank_line", "code_fence"),
) -> list[FirstError | None]:
    """The first wrong step of each response, per the judge, in one ``judge.review`` call.

    Args:
        judge: a :class:`mintrl.judge.base.Judge` (the rollout engine's guarded judge: a failing
            call gives a "failed" verdict, i.e. no error found).
        tokenizer: the policy tokenizer (decodes the exact response ids; token in, token out).
        responses: per response its token ids. finished: per response, it ended with EOS (the
            judge then checks a claim at its very end).
        items: per response its :class:`mintrl.data.base.PromptItem` (question, reference, entry).
        step_delimiters: see :func:`mintrl.text.steps.split_steps`.

    Returns:
        per response a :class:`FirstError`, or None (Keep, an unusable verdict, an out-of-range step,
        or an empty response).
    """
    requests, splits = [], []
    for ids, done, item in zip(responses, finished, items, strict=True):
        steps = split_steps(tokenizer.decode(list(ids)), tuple(step_delimiters))
        splits.append(steps)
        requests.append(
            ReviewRequest(item.question, item.reference, "", [s.text for s in steps], bool(done), item.entry)
        )
    verdicts = judge.review(requests) if requests else []
    out: list[FirstError | None] = []
    for ids, steps, verdict in zip(responses, splits, verdicts):
        usable = verdict.kind == REVISE and verdict.step is not None and 0 <= verdict.step < len(steps)
        if not usable:
            out.append(None)
            continue
        token = token_index_of_char(tokenizer, list(ids), steps[verdict.step].start)
        out.append(FirstError(token, verdict.step, verdict))
    return out
