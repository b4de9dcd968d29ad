"""A judge's verdict applied to a freshly sampled chunk (MInTRL Algorithm 1, lines 5-8): what both
rollout engines do with a reviewed chunk (:mod:`mintrl.rollout.single_turn`: a chunk of a response;
:mod:`mintrl.rollout.episodes`: an action turn)."""

from __future__ import annotations

from mintrl.core.batch import ReviewRecord, Rollout
from mintrl.core.verdict import FAILED, REVISE, UNPARSEABLE
from mintrl.data.base import PromptItem
from mintrl.intervention.base import InterventionRequest
from mintrl.text.steps import token_index_of_char


def apply_verdict(
    rollout: Rollout,
    ids: list[int],
    logprobs: list[float],
    finished: bool,
    steps,
    verdict,
    item: PromptItem,
    tokenizer,
    min_kept_tokens: int = 0,
) -> InterventionRequest | None:
    """Apply a judge verdict to a freshly sampled chunk (MInTRL Alg. 1, lines 5-8).

    Keep (or an unusable verdict): the whole chunk joins the accepted prefix. Revise at step ``e``:
    only the tokens wholly before step ``e`` are kept (the cut drops any EOS) and an intervention
    request for the retained prefix is returned. A Revise whose cut would leave fewer than
    ``min_kept_tokens`` response tokens (the accepted prefix plus the chunk's tokens before step
    ``e``) is not applied: the chunk is kept as sampled, counted in ``rollout.early_cuts``
    (``min_kept_tokens=1``: no correction replaces a response from its first token). Counts
    reviews, revisions and unparseable verdicts, and appends the review to ``rollout.review_records``
    (:class:`mintrl.core.batch.ReviewRecord`).

    Args:
        rollout: the rollout to extend (mutated). ids, logprobs: the chunk's tokens and log-probs
            (nats), both of length ``n``.
        finished: the chunk ended with EOS. steps: ``split_steps`` of the decoded chunk.
        verdict: the judge's verdict. item: the prompt. tokenizer: policy tokenizer.
        min_kept_tokens: fewest response tokens a cut may leave (tokens; 0: every Revise applies).

    Returns:
        The :class:`InterventionRequest` on Revise, else None.
    """
    rollout.reviews += 1
    rollout.unparseable += verdict.kind == UNPARSEABLE
    rollout.failed += verdict.kind == FAILED
    revise = verdict.kind == REVISE and verdict.step is not None and 0 <= verdict.step < len(steps)
    keep = token_index_of_char(tokenizer, ids, steps[verdict.step].start) if revise else len(ids)
    if revise and len(rollout.response_ids) + keep < min_kept_tokens:
        revise = False
        rollout.early_cuts += 1
    if not revise:
        rollout.append(ids, logprobs, intervention=False)
        rollout.finished = finished
    else:
        rollout.revisions += 1
        rollout.revision_steps.append(verdict.step)
        rollout.append(ids[:keep], logprobs[:keep], intervention=False)
    rollout.review_records.append(
        ReviewRecord(
            round=rollout.reviews - 1,
            kind=verdict.kind,
            step=verdict.step,
            correction=verdict.correction,
            revised=revise,
            at_token=len(rollout.response_ids),
        )
    )
    if not revise:
        return None
    text = tokenizer.decode(rollout.response_ids)
    return InterventionRequest(
        item.question, item.reference, rollout.prompt_ids, list(rollout.response_ids), text, verdict
    )
