"""Branching: more continuations of a rollout from one of its step boundaries (an anchor)."""

from __future__ import annotations

from typing import Sequence

from mintrl.allocation.anchor import Anchor
from mintrl.allocation.features import answer_diversity
from mintrl.core.batch import BranchRecord, Rollout
from mintrl.reward.base import score_rewards
from mintrl.text.answer import extract_answer
from mintrl.text.steps import split_steps, token_index_of_char


def fork_prefix(parent: Rollout, cut: int, branch: BranchRecord, is_control: bool, turns: int = 0) -> Rollout:
    """A new rollout that starts as ``parent``'s first ``cut`` response tokens, token in / token
    out, for a branch to continue (resample and intervene branches of single-turn rollouts and of
    episodes).

    Copied (new lists of length ``cut``, positions ``[0, cut)`` of the parent's): ``response_ids``;
    ``logprobs`` (log pi_t at rollout time, nats); ``behaviour`` (log-prob of whoever wrote each
    token, nats); the provenance flags ``intervention``, ``environment`` and ``guide`` (a flag list
    shorter than the response counts as False past its end). Also copied: ``group``, ``prompt_ids``
    and the parent's first ``turns`` :class:`~mintrl.core.batch.TurnRecord` (an episode's turns
    wholly inside the prefix; 0 for single-turn rollouts).

    Set: ``is_control`` and ``branch`` (how the allocation made it). Reset to the
    :class:`~mintrl.core.batch.Rollout` defaults, since the child has done none of it yet:
    ``finished`` (False), ``reward`` (0.0), the judge counts (``reviews``, ``revisions``,
    ``unparseable``, ``failed``, ``early_cuts``: 0), ``revision_steps`` and ``review_records``
    (empty), ``row`` (-1), ``first_error`` (None). ``parent`` is not changed.

    Raises:
        ValueError: ``cut`` is outside ``[0, len(parent.response_ids)]``, or ``turns`` outside
            ``[0, len(parent.turns)]``.
    """
    if not 0 <= cut <= len(parent.response_ids):
        raise ValueError(
            f"fork_prefix: cut {cut} outside [0, {len(parent.response_ids)}] (the parent's response tokens)"
        )
    if not 0 <= turns <= len(parent.turns):
        raise ValueError(f"fork_prefix: {turns} turns of a parent with {len(parent.turns)}")

    def flags(values: list[bool]) -> list[bool]:
        head = list(values[:cut])
        return head + [False] * (cut - len(head))

    return Rollout(
        group=parent.group,
        is_control=is_control,
        prompt_ids=list(parent.prompt_ids),
        response_ids=list(parent.response_ids[:cut]),
        logprobs=list(parent.logprobs[:cut]),
        behaviour=list(parent.behaviour[:cut]),
        intervention=flags(parent.intervention),
        environment=flags(parent.environment),
        guide=flags(parent.guide),
        turns=list(parent.turns[:turns]),
        branch=branch,
    )


def anchors(rollout: Rollout, tokenizer, delimiters: Sequence[str]) -> list[Anchor]:
    """Candidate anchors of a rollout: the starts of its steps after the first (MInTRL's step
    segmentation), where the next token was written by the policy.

    Returns:
        One :class:`~mintrl.allocation.anchor.Anchor` per step start, in order.
    """
    steps = split_steps(tokenizer.decode(rollout.response_ids), delimiters)
    out, seen = [], set()
    for s, step in enumerate(steps[1:], start=1):
        k = token_index_of_char(tokenizer, rollout.response_ids, step.start)
        if 0 < k < len(rollout.response_ids) and k not in seen and not rollout.intervention[k]:
            seen.add(k)
            out.append(Anchor(k, s, len(steps), -rollout.logprobs[k]))
    return out


class Brancher:
    """Writes and scores branches with the rollout engine's sampler and reward; says where a
    rollout's anchors are and how diverse a group is (the allocations ask it, so that one
    allocation serves single-turn rollouts and episodes,
    :class:`mintrl.rollout.episode_branches.EpisodeBrancher`).

    Args:
        sampler, tokenizer, reward: the rollout engine's. temperature: the policy temperature of
        the training log-probs. top_p: nucleus of the branches. max_response_tokens: length limit
        (tokens, prefix included). intervene: the engine's judge-review-plus-correction at an anchor
        (:meth:`mintrl.rollout.single_turn.SingleTurnRollout.intervene_at`), for intervene actions.
    """

    def __init__(
        self, sampler, tokenizer, reward, temperature: float, top_p: float, max_response_tokens: int, intervene=None
    ):
        self.sampler, self.tokenizer, self.reward = sampler, tokenizer, reward
        self.temperature, self.top_p, self.max_response_tokens = temperature, top_p, max_response_tokens
        self.intervene = intervene  # (parent, anchor, length, item) -> [semi-on-policy rollout] | []

    def anchors(self, rollout: Rollout, delimiters: Sequence[str]) -> list[Anchor]:
        """Candidate anchors of ``rollout`` (:class:`~mintrl.allocation.anchor.Anchor`): its step boundaries
        (:func:`anchors`)."""
        return anchors(rollout, self.tokenizer, delimiters)

    def metrics(self) -> dict[str, float]:
        """The brancher's own counters of the step, logged with the allocation's (default none)."""
        return {}

    def diversity(self, group: Sequence[Rollout]) -> float:
        """The group's answer diversity (distinct extracted final answers / group size)."""
        texts = self.tokenizer.batch_decode([r.response_ids for r in group], skip_special_tokens=True)
        return answer_diversity([extract_answer(t) for t in texts])

    def branch(self, parent: Rollout, anchor: int, m: int, temperature: float, item) -> list[Rollout]:
        """``m`` on-policy rollouts that share ``parent``'s first ``anchor`` response tokens
        (:func:`fork_prefix`) and continue at ``temperature``; scored with the reward. Their ``logprobs`` are log pi_t at the
        training temperature (rescored when ``temperature`` differs), ``behaviour`` the sampling
        log-probs."""
        budget = self.max_response_tokens - anchor
        if m <= 0 or budget <= 0:
            return []
        prefix = parent.prompt_ids + parent.response_ids[:anchor]
        gen = self.sampler.generate([prefix] * m, budget, temperature, self.top_p)
        children = []
        for ids, lps, finished in zip(gen.token_ids, gen.logprobs, gen.finished):
            record = BranchRecord("resample", anchor, parent.row, float(temperature))
            child = fork_prefix(parent, anchor, record, is_control=True)
            child.append(ids.tolist(), lps.tolist(), intervention=False)
            child.finished = bool(finished)
            children.append(child)
        if temperature != self.temperature:
            scored = self.sampler.score(
                [c.prompt_ids + c.response_ids for c in children],
                [len(c.prompt_ids) for c in children],
                self.temperature,
            )
            for c, lp in zip(children, scored):
                c.logprobs = c.logprobs[:anchor] + [float(x) for x in lp[anchor:]]
        texts = self.tokenizer.batch_decode([c.response_ids for c in children], skip_special_tokens=True)
        for c, value in zip(children, score_rewards(self.reward, texts, [item] * len(children))):
            c.reward = value
        return children
