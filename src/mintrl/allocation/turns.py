"""Turn anchors of an episode (RAIL at turn boundaries, multi-turn rollouts).

An episode's response is ``action_0 | observation_0 | action_1 | ... | action_k``
(:mod:`mintrl.rollout.episodes`); its turn anchors are the starts of its action turns. A branch at
the anchor of turn ``t`` keeps the parent's first ``t`` actions and observations (its token ids) and
writes a new action ``t`` onwards; turn 0's anchor is the episode's root (nothing shared: a fresh
episode of the same task, RAIL's task-level branching).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mintrl.allocation.anchor import Anchor

if TYPE_CHECKING:
    from mintrl.core.batch import Rollout


def turn_anchors(rollout: Rollout) -> list[Anchor]:
    """Candidate anchors of an episode: the start of each action turn whose first token the policy
    wrote (not the intervention).

    Returns:
        One :class:`~mintrl.allocation.anchor.Anchor` per such turn, in turn order (``step`` is the turn
        index, ``steps`` the episode's number of turns). Empty for a rollout without turns.
    """
    out = []
    for t, turn in enumerate(rollout.turns):
        k = turn.action_start
        if k < len(rollout.response_ids) and not rollout.intervention[k] and not rollout.environment[k]:
            out.append(Anchor(k, t, len(rollout.turns), -rollout.logprobs[k]))
    return out


def kind_sequence(rollout: Rollout) -> tuple[str, ...]:
    """The environment's kinds of an episode's actions, in order (e.g. ``("run", "answer")``)."""
    return tuple(t.kind for t in rollout.turns)


def turn_at(rollout: Rollout, anchor: int) -> int:
    """Index of the turn whose action starts at response token ``anchor``.

    Raises:
        ValueError: ``anchor`` is not the start of one of the episode's action turns.
    """
    for t, turn in enumerate(rollout.turns):
        if turn.action_start == anchor:
            return t
    raise ValueError(
        f"response token {anchor} is not a turn anchor of this episode (turn starts: "
        f"{[turn.action_start for turn in rollout.turns]})"
    )
