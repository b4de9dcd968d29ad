"""A brancher without a language model, for allocation tests in the unit tier: rollouts are made by hand
(:func:`fake_rollout`) and every branch's rewards come from a script, so a controller's choices can be checked
against hand-computed values in milliseconds.

The allocation contract only asks a brancher for ``anchors``, ``branch``, ``diversity``, ``metrics``,
``temperature`` and ``intervene`` (:class:`mintrl.allocation.branching.Brancher`); :class:`FakeBrancher` has them.
"""

from __future__ import annotations

from typing import Callable, Sequence

from mintrl.allocation.anchor import Anchor
from mintrl.allocation.features import answer_diversity
from mintrl.core.batch import BranchRecord, Rollout


def fake_rollout(group: int, reward: float, surprisals: Sequence[float], row: int = -1) -> Rollout:
    """A control rollout of ``group`` with one response token per entry of ``surprisals``: token ``k``'s log-prob
    is ``-surprisals[k]`` (nats), so :meth:`FakeBrancher.anchors` finds an anchor at every token after the first
    with that surprisal."""
    r = Rollout(group=group, is_control=True, prompt_ids=[group], row=row)
    r.append(list(range(100, 100 + len(surprisals))), [-float(s) for s in surprisals], intervention=False)
    r.reward, r.finished = float(reward), True
    return r


class FakeBrancher:
    """Anchors at every response token after the first (surprisal ``-logprobs[k]``) and branches scored by a
    script.

    Args:
        rewards: ``(parent, anchor token, temperature, i) -> reward`` of the ``i``-th of a branch's children.
        temperature: the training temperature (what a top-up branch uses).

    Attributes:
        calls: every :meth:`branch` call as ``(group, anchor token, m, temperature)``, in order.
    """

    intervene = None

    def __init__(self, rewards: Callable[[Rollout, int, float, int], float], temperature: float = 1.0):
        self.rewards, self.temperature = rewards, temperature
        self.calls: list[tuple[int, int, int, float]] = []

    def anchors(self, rollout: Rollout, delimiters: Sequence[str]) -> list[Anchor]:
        """:class:`~mintrl.allocation.anchor.Anchor` at tokens 1..n-1 (step ``k`` of ``n``), policy tokens only."""
        n = len(rollout.response_ids)
        return [Anchor(k, k, n, -rollout.logprobs[k]) for k in range(1, n) if not rollout.intervention[k]]

    def metrics(self) -> dict[str, float]:
        return {}

    def diversity(self, group: Sequence[Rollout]) -> float:
        """Distinct rewards / group size (a stand-in for distinct answers)."""
        return answer_diversity([str(r.reward) for r in group])

    def branch(self, parent: Rollout, anchor: int, m: int, temperature: float, item) -> list[Rollout]:
        """``m`` children sharing ``parent``'s first ``anchor`` tokens, one new token each, rewards from the script."""
        self.calls.append((parent.group, anchor, m, temperature))
        children = []
        for i in range(m):
            child = Rollout(
                group=parent.group,
                is_control=True,
                prompt_ids=list(parent.prompt_ids),
                branch=BranchRecord("resample", anchor, parent.row, float(temperature)),
            )
            child.append(parent.response_ids[:anchor], parent.logprobs[:anchor], intervention=False)
            child.append([7], [-1.0], intervention=False)
            child.reward, child.finished = float(self.rewards(parent, anchor, temperature, i)), True
            children.append(child)
        return children
