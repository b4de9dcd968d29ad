"""``guide=prefix``: rollouts that start from a prefix of the reference solution (BREAD, Prefix-RFT, QuestA).

- BREAD (Zhang et al. 2025, "BREAD: Branched Rollouts from Expert Anchors Bridge SFT & RL for
  Reasoning", arXiv 2506.17211): only prompts whose rollouts all failed get rollouts that start
  from a prefix of the expert solution (``when: no_success``); the prefix is searched per prompt
  (``schedule: adaptive`` here: a shorter prefix after a success, a longer one after a failure).
- Prefix-RFT (Huang et al. 2025, "Blending Supervised and Reinforcement Fine-Tuning with Prefix
  Sampling", arXiv 2507.01679): a demonstration prefix of sampled length, the policy continues,
  mixed into the group (``when: always``).
- QuestA (Li et al. 2025, "QuestA: Expanding Reasoning Capacity in LLMs via Question
  Augmentation", arXiv 2507.13266): partial solutions as hints, the hint share annealed
  (``schedule: cosine``). QuestA puts the hint into the question; here it is the response's prefix.

The prefix is cut on token boundaries: the first ``floor(p * n)`` of the solution's ``n`` token ids
(:func:`prefix_length`), tokenized once from the solution text and spliced as ids.
"""

from __future__ import annotations

import math
from typing import Sequence

from mintrl.core.batch import Rollout
from mintrl.core.checks import check_choice, check_int, check_range
from mintrl.data.base import PromptItem
from mintrl.guide.base import Guide, GuideStart, SolutionTokens

SCHEDULES = ("constant", "cosine", "adaptive")


def prefix_length(num_tokens: int, fraction: float) -> int:
    """Tokens in the first ``fraction`` of ``num_tokens``: ``floor(fraction * num_tokens)``,
    computed so that exact products are not lost to rounding (``0.3 * 10`` is 3, not 2)."""
    return min(num_tokens, math.floor(round(fraction * num_tokens, 9)))


def cosine_fraction(initial: float, step: int, decay_steps: int) -> float:
    """``initial * 0.5 (1 + cos(pi min(step / decay_steps, 1)))``: ``initial`` at step 0, 0 from
    ``decay_steps`` on (``decay_steps <= 0``: 0)."""
    if decay_steps <= 0:
        return 0.0
    return initial * 0.5 * (1.0 + math.cos(math.pi * min(step / decay_steps, 1.0)))


class PrefixGuide(Guide):
    """Guided rollouts from the first fraction ``p`` of the prompt's reference solution.

    Args:
        tokenizer: the policy tokenizer (solution ids).
        fraction: ``p`` in [0, 1]: the fixed share (``constant``), the share at step 0
            (``cosine``), or every prompt's first share (``adaptive``).
        schedule: ``constant``; ``cosine`` (``p`` decays to 0 over ``decay_steps`` optimizer steps);
            ``adaptive`` (per prompt, remembered across steps: ``p - adaptive_step`` after a step in
            which one of the prompt's guided rollouts succeeded, ``p + adaptive_step`` after one in
            which none did, within ``[min_fraction, 1]``: it settles at the shortest prefix that
            still yields a success).
        decay_steps: optimizer steps of the cosine decay. adaptive_step: change of ``p`` per step.
        min_fraction: the lowest adaptive ``p``.
        rollouts_per_prompt, when, success_reward: see :class:`mintrl.guide.base.Guide`.

    A prompt whose prefix is empty (``floor(p n) = 0``) gets no guided rollout (``guide/empty_prefix``).

    Raises:
        ValueError: a bad knob, naming the ``guide.*`` field.
    """

    adds_rollouts = True

    def __init__(
        self,
        tokenizer,
        fraction: float = 0.5,
        schedule: str = "constant",
        decay_steps: int = 100,
        adaptive_step: float = 0.25,
        min_fraction: float = 0.0,
        rollouts_per_prompt: int = 2,
        when: str = "always",
        success_reward: float = 1.0,
    ):
        super().__init__(rollouts_per_prompt, when, success_reward)
        check_range("guide.fraction", fraction, 0, 1)
        check_choice("guide.schedule", schedule, SCHEDULES)
        check_int("guide.decay_steps", decay_steps, 0)
        check_range("guide.adaptive_step", adaptive_step, 0, 1)
        check_range("guide.min_fraction", min_fraction, 0, 1)
        self.fraction, self.schedule, self.decay_steps = fraction, schedule, decay_steps
        self.adaptive_step, self.min_fraction = adaptive_step, min_fraction
        self.solution_ids = SolutionTokens(tokenizer)
        self.adaptive: dict[str, float] = {}  # "<task>/<index>" -> that prompt's current p

    @staticmethod
    def _key(item: PromptItem) -> str:
        return f"{item.task}/{item.index}"

    def fraction_for(self, item: PromptItem, step: int) -> float:
        """``p`` of ``item`` at optimizer ``step`` under the schedule."""
        if self.schedule == "cosine":
            return cosine_fraction(self.fraction, step, self.decay_steps)
        if self.schedule == "adaptive":
            return self.adaptive.get(self._key(item), self.fraction)
        return self.fraction

    def starts(
        self, rollouts: Sequence[Rollout], items: Sequence[PromptItem], step: int, intervention, max_tokens: int
    ) -> list[GuideStart]:
        guided = self.count_missing(self.eligible(rollouts, items), items)
        out, empty, fractions = [], 0, []
        for g, (item, ok) in enumerate(zip(items, guided)):
            if not ok:
                continue
            p = self.fraction_for(item, step)
            ids = self.solution_ids(item.solution)
            ids = ids[: min(prefix_length(len(ids), p), max(max_tokens - 1, 0))]  # the policy writes >= 1 token
            if not ids:
                empty += 1
                continue
            fractions.append(p)
            out += [GuideStart(g, list(ids), [0.0] * len(ids), False, p) for _ in range(self.rollouts_per_prompt)]
        self._metrics.update(
            {
                "guide/prompts": float(len(fractions)),
                "guide/empty_prefix": float(empty),
                "guide/prefix_fraction": sum(fractions) / len(fractions) if fractions else 0.0,
            }
        )
        return out

    def observe(self, guided: Sequence[Rollout], starts: Sequence[GuideStart], items: Sequence[PromptItem]) -> None:
        """Adaptive schedule: move each guided prompt's ``p`` (see the class docstring)."""
        success: dict[int, bool] = {}
        for r, s in zip(guided, starts):
            success[s.group] = success.get(s.group, False) or r.reward >= self.success_reward
        if guided:
            self._metrics["guide/success_rate"] = sum(r.reward >= self.success_reward for r in guided) / len(guided)
        if self.schedule != "adaptive":
            return
        for g, solved in success.items():
            key = self._key(items[g])
            p = self.adaptive.get(key, self.fraction)
            p = max(p - self.adaptive_step, self.min_fraction) if solved else min(p + self.adaptive_step, 1.0)
            self.adaptive[key] = p

    def state_dict(self) -> dict:
        """The adaptive per-prompt fractions."""
        return {"adaptive": dict(self.adaptive)}

    def load_state_dict(self, state: dict) -> None:
        self.adaptive = dict(state.get("adaptive", {}))
