"""The anchor: a point of a rollout where an allocation may branch (RAIL sec. 3's branch point).

Every brancher's :meth:`~mintrl.allocation.branching.Brancher.anchors` returns :class:`Anchor` values: the step
starts of a single-turn response (:func:`mintrl.allocation.branching.anchors`) or the action-turn starts of an
episode (:func:`mintrl.allocation.turns.turn_anchors`). An allocation picks some of them and asks the brancher
for ``Brancher.branch(parent, anchor.token, m, temperature, item)``.
"""

from __future__ import annotations

from typing import NamedTuple


class Anchor(NamedTuple):
    """One candidate branch point of a rollout (a tuple: ``token, step, steps, surprisal = anchor`` unpacks it).

    Attributes:
        token: index into the rollout's ``response_ids`` where the branch starts writing (tokens): a branch keeps
            ``response_ids[:token]`` (the parent's tokens, environment observations included) and writes anew from
            there; 0 is the root (a fresh rollout of the same prompt or task).
        step: which step (single-turn: the step of MInTRL's segmentation that starts at ``token``, 1 for the
            second step) or action turn (episodes: 0 for the first action) the anchor opens (index).
        steps: the rollout's number of steps or action turns (count); ``step / steps`` is the anchor's depth.
        surprisal: ``-log pi_t`` of the policy's first token after the anchor (nats), a one-sample estimate of the
            anchor's entropy taken from the rollout's own log-probs.
    """

    token: int
    step: int
    steps: int
    surprisal: float
