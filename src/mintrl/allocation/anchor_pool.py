"""The step's pool of branch anchors and a fixed-action pass over it: what entropy branching and random-anchor
branching share (they differ only in the order they visit the pool)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Iterable, Sequence

from mintrl.allocation.decisions import BranchDecision, DecisionKind, DecisionLog
from mintrl.allocation.gain import realized_gain

if TYPE_CHECKING:
    from mintrl.allocation.branching import Brancher
    from mintrl.allocation.budget import RolloutBudget
    from mintrl.core.batch import Rollout
    from mintrl.data.base import PromptItem

PoolAnchor = tuple[float, "Rollout", int]  # (first-token surprisal in nats, control rollout, token index)


def control_anchor_pool(rollouts: Sequence[Rollout], brancher: Brancher, delimiters: Sequence[str]) -> list[PoolAnchor]:
    """Every anchor of the step's control rollouts (:meth:`Brancher.anchors`: step or turn starts written by the
    policy), in rollout order, as ``(surprisal, rollout, token index)``."""
    return [(a.surprisal, r, a.token) for r in rollouts if r.is_control for a in brancher.anchors(r, delimiters)]


def branch_each(
    ordered: Iterable[PoolAnchor],
    rollouts: Sequence[Rollout],
    items: Sequence[PromptItem],
    brancher: Brancher,
    budget: RolloutBudget,
    branch_budget: int,
    temperature: float,
    kind: DecisionKind,
    log: DecisionLog,
) -> tuple[list[Rollout], list[float]]:
    """Branch ``branch_budget`` continuations at ``temperature`` from each anchor of ``ordered`` in turn until
    the step's budget is spent; each branch joins its group before the next one's gain is measured.

    Returns:
        The new scored rollouts and the realised gain of each branch (reward^2, RAIL eq. 2:
        ``I(Y_b) - I(Y_0)`` against the group's rewards so far); one :class:`BranchDecision` of ``kind`` per
        branch is added to ``log`` (no prediction; ``kind`` one of the allocation's declared kinds).
    """
    rewards = defaultdict(list)  # group -> rewards so far (branches join their group)
    for r in rollouts:
        rewards[r.group].append(r.reward)
    name = f"m{branch_budget}_t{temperature:g}"
    new, gains = [], []
    for surprisal, r, k in ordered:
        m = budget.take(branch_budget)
        if m == 0:
            break
        children = brancher.branch(r, k, m, temperature, items[r.group])
        gains.append(realized_gain(rewards[r.group], [c.reward for c in children]))
        log.add(BranchDecision(kind.name, r.group, name, len(children), None, gains[-1], True, surprisal))
        rewards[r.group] += [c.reward for c in children]
        new += children
    return new, gains


def branch_stats(gains: Sequence[float]) -> dict[str, float]:
    """``allocation/branches`` (count) and, when it branched, ``allocation/realized_gain`` (mean, reward^2)."""
    stats = {"allocation/branches": float(len(gains))}
    if gains:
        stats["allocation/realized_gain"] = sum(gains) / len(gains)
    return stats
