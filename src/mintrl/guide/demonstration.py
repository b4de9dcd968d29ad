"""``guide=demonstration``: whole off-policy traces join their prompt's group (LUFFY).

LUFFY (Yan et al. 2025, "Learning to Reason under Off-Policy Guidance", arXiv 2504.14945) adds
off-policy demonstrations to each prompt's group of on-policy rollouts; group advantages are
computed over both, and off-policy tokens are trained with policy shaping (``objective=luffy``,
:mod:`mintrl.objective.luffy`). The trace is the dataset's reference solution (``source:
solution``) or written by the judge-intervention model (``source: intervention``, its
``demonstrate``: the same model and privileged context that write MInTRL's corrections).
"""

from __future__ import annotations

from typing import Sequence

from mintrl.core.batch import Rollout
from mintrl.core.checks import check_choice
from mintrl.data.base import PromptItem
from mintrl.guide.base import Guide, GuideStart, SolutionTokens
from mintrl.intervention.base import InterventionRequest

SOURCES = ("solution", "intervention")


class DemonstrationGuide(Guide):
    """Complete off-policy traces as extra group members (every token provenance guide).

    Args:
        tokenizer: the policy tokenizer (solution ids; EOS appended).
        source: ``solution`` (the prompt's reference solution; prompts without one get none,
            counted) or ``intervention`` (the intervention's ``demonstrate``; its log-probs are
            the traces' behaviour log-probs).
        rollouts_per_prompt, when, success_reward: see :class:`mintrl.guide.base.Guide`.

    Raises:
        ValueError: a bad knob, naming the ``guide.*`` field.
    """

    adds_rollouts = True

    def __init__(
        self,
        tokenizer,
        source: str = "solution",
        rollouts_per_prompt: int = 1,
        when: str = "always",
        success_reward: float = 1.0,
    ):
        super().__init__(rollouts_per_prompt, when, success_reward)
        check_choice("guide.source", source, SOURCES)
        self.source = source
        self.solution_ids = SolutionTokens(tokenizer, eos=True)

    def starts(
        self, rollouts: Sequence[Rollout], items: Sequence[PromptItem], step: int, intervention, max_tokens: int
    ) -> list[GuideStart]:
        eligible = self.eligible(rollouts, items)
        if self.source == "solution":
            eligible = self.count_missing(eligible, items)
        groups = [g for g, ok in enumerate(eligible) if ok for _ in range(self.rollouts_per_prompt)]
        if self.source == "solution":
            out = []
            for g in groups:
                ids = self.solution_ids(items[g].solution)[:max_tokens]
                out.append(GuideStart(g, ids, [0.0] * len(ids), True, 1.0))
        else:
            requests = [
                InterventionRequest(items[g].question, items[g].reference, list(items[g].prompt_ids), [], "", None)
                for g in groups
            ]
            demos = intervention.demonstrate(requests, max_tokens) if requests else []
            out = [GuideStart(g, list(d.ids), list(d.logprobs), True, 1.0) for g, d in zip(groups, demos)]
        out = [s for s in out if s.ids]
        self._metrics["guide/prompts"] = float(len({s.group for s in out}))
        return out

    def observe(self, guided: Sequence[Rollout], starts: Sequence[GuideStart], items: Sequence[PromptItem]) -> None:
        if guided:
            self._metrics["guide/success_rate"] = sum(r.reward >= self.success_reward for r in guided) / len(guided)
