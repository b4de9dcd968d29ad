"""RAIL at turn anchors: branching more episodes from an episode's turn boundaries.

The allocations (``allocation=entropy``, ``allocation=rail``) work on episodes unchanged: they ask
the :class:`EpisodeBrancher` for a rollout's anchors (its turn starts,
:func:`mintrl.allocation.turns.turn_anchors`), for a group's diversity (tool-sequence diversity,
RAIL's state table) and for branches.

A branch at the anchor of turn ``t`` of a parent episode

1. copies the parent's response up to the anchor, token in / token out: the exact ids, their
   log-probs, behaviour log-probs and provenance (policy, intervention, environment), and the
   parent's first ``t`` :class:`~mintrl.core.batch.TurnRecord`
   (:func:`mintrl.allocation.branching.fork_prefix`);
2. rebuilds the environment state at the anchor by replaying the parent's first ``t`` actions
   (their text, decoded from the parent's ids as the environment first received it) in fresh
   episodes: ``env.reset`` with the branch's ``m`` copies of the task, then ``t`` steps.
   Environments are deterministic given task and actions (:mod:`mintrl.env.base`); a replay whose
   observations differ from the parent's recorded ones, or that ends early, drops the branch
   (counted in ``allocation/replay_mismatches``; its budget stays spent);
3. continues the ``m`` episodes with the policy at the branch's temperature until each ends (the
   environment ends it, its tokens run out, or ``rollout.max_turns`` actions: the parent's count),
   scored by the environment; sampled log-probs are the behaviour, the training log-probs are
   rescored at the rollout temperature when the branch's differs.

**Why the same environment can be reset here.** Allocation runs after every episode of the step
has ended and been scored (:meth:`mintrl.rollout.episodes.EpisodeRollout.generate`), so no episode
is running when a branch resets the environment; branches (and shadow trials) run one after
another, each in its own fresh episodes. Replayed actions count in the environment's own counters
(``env/*``, e.g. ``env/tool_calls``) but not in ``episode/actions_*``.

An intervene action (``allocation.intervene_lengths``) at turn ``t`` replays the same way, then the
judge reviews the parent's action ``t`` (the same review as a semi-on-policy episode's turn); on
Revise the action is cut before its earliest wrong step, the intervention writes a correction of up
to the action's length and the end-of-turn id, the environment executes it and the policy plays on
unreviewed. A kept action gives no branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from mintrl.allocation.branching import Brancher, fork_prefix
from mintrl.allocation.features import tool_sequence_diversity
from mintrl.allocation.turns import kind_sequence, turn_anchors, turn_at
from mintrl.core.batch import BranchRecord, Rollout
from mintrl.data.base import PromptItem

if TYPE_CHECKING:
    from mintrl.rollout.episodes import EpisodeRollout


class EpisodeBrancher(Brancher):
    """Branches episodes from turn anchors (see the module docstring).

    Args:
        engine: the step's :class:`mintrl.rollout.episodes.EpisodeRollout` (its sampler,
            environment, judge, intervention and counters).
    """

    def __init__(self, engine: EpisodeRollout):
        super().__init__(
            engine.sampler,
            engine.tokenizer,
            None,  # the environment scores episodes
            engine.temperature,
            engine.top_p,
            engine.max_response_tokens,
            intervene=self.intervene_turn,
        )
        self.engine = engine
        self.replay_mismatches = 0

    # ------------------------------------------------------------------ the allocations' questions
    def anchors(self, rollout: Rollout, delimiters: Sequence[str]) -> list[tuple[int, int, int, float]]:
        """The episode's turn anchors (:func:`mintrl.allocation.turns.turn_anchors`); ``delimiters``
        are unused (within-turn step anchors are not offered)."""
        return turn_anchors(rollout)

    def diversity(self, group: Sequence[Rollout]) -> float:
        """Tool-sequence diversity of the group (distinct action-kind sequences / group size)."""
        return tool_sequence_diversity([kind_sequence(r) for r in group])

    def metrics(self) -> dict[str, float]:
        """``allocation/replay_mismatches``: branches dropped because the replay did not
        reproduce the parent's observations (count, this step)."""
        return {"allocation/replay_mismatches": float(self.replay_mismatches)}

    # ------------------------------------------------------------------ replay
    def replay(self, parent: Rollout, turns: int, m: int, item: PromptItem) -> bool:
        """Reset the environment to ``m`` fresh episodes of ``item`` and step each with the
        parent's first ``turns`` actions. Returns False (and counts a mismatch) when an observation
        differs from the parent's recorded one or an episode ends before the anchor."""
        engine = self.engine
        engine._reset([item] * m)
        for turn in parent.turns[:turns]:
            ids = parent.response_ids[turn.action_start : turn.action_end]
            action = self.tokenizer.decode(ids, skip_special_tokens=True)
            result = engine._step_env(list(range(m)), [action] * m)
            engine.tally.env_seconds += result.seconds
            if any(result.done) or any(o != turn.observation for o in result.observations):
                self.replay_mismatches += 1
                return False
        return True

    # ------------------------------------------------------------------ branches
    def branch(self, parent: Rollout, anchor: int, m: int, temperature: float, item: PromptItem) -> list[Rollout]:
        """``m`` episodes that share ``parent``'s response up to the turn anchor ``anchor`` and play
        on at ``temperature``, scored by the environment (control rollouts of the parent's group;
        ``branch`` records the anchor, the parent's row and the temperature).

        Raises:
            ValueError: ``anchor`` is not one of the parent's turn starts.
        """
        t = turn_at(parent, anchor)
        if m <= 0 or anchor >= self.max_response_tokens or not self.replay(parent, t, m, item):
            return []
        record = BranchRecord("resample", anchor, parent.row, float(temperature))
        children = [fork_prefix(parent, anchor, record, is_control=True, turns=t) for _ in range(m)]
        engine = self.engine
        engine._play(children, {parent.group: item}, list(range(m)), engine.tally, False, temperature)
        if temperature != self.temperature:
            self._rescore(children, anchor)
        return children

    def _rescore(self, children: list[Rollout], anchor: int) -> None:
        """Training log-probs of the policy tokens after ``anchor`` at the rollout temperature
        (``behaviour`` keeps the sampling ones; environment tokens keep 0.0)."""
        scored = self.sampler.score(
            [c.prompt_ids + c.response_ids for c in children], [len(c.prompt_ids) for c in children], self.temperature
        )
        for c, lp in zip(children, scored):
            c.logprobs = [
                float(lp[k]) if k >= anchor and not c.environment[k] else old for k, old in enumerate(c.logprobs)
            ]

    def intervene_turn(self, parent: Rollout, anchor: int, length: int, item: PromptItem) -> list[Rollout]:
        """An intervene branch at a turn anchor (see the module docstring): the semi-on-policy
        episode whose action at ``anchor`` the judge revised and the intervention corrected (at
        most ``length`` tokens), played to its end; ``[]`` when the judge keeps the action.

        Raises:
            ValueError: ``anchor`` is not one of the parent's turn starts.
        """
        t = turn_at(parent, anchor)
        if not self.replay(parent, t, 1, item):
            return []
        engine = self.engine
        record = BranchRecord("intervene", anchor, parent.row, float(engine.temperature))
        child = fork_prefix(parent, anchor, record, is_control=False, turns=t)
        turn = parent.turns[t]
        ids = parent.response_ids[turn.action_start : turn.action_end]
        ended = bool(ids) and ids[-1] in self.sampler.eos_token_ids
        action = (torch.tensor(ids), torch.tensor(parent.logprobs[turn.action_start : turn.action_end]), ended)
        items = {parent.group: item}
        starts = engine._action_turn([child], items, {id(child)}, None, {id(child): action}, correction_len=length)
        if child.revisions == 0:
            return []
        [over] = engine._env_turn([child], [0], starts, engine.tally)
        if not over:
            engine._play([child], items, [0], engine.tally, False)
        elif not child.finished:
            child.reward = float(engine.env.score_final([0])[0])
        engine._score_interventions([child])
        return [child]
