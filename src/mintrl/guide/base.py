"""The guide interface: which prompts of a step get guided rollouts, and from which tokens."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from mintrl.core.batch import Rollout
from mintrl.core.checks import check_choice, check_int, check_range
from mintrl.data.base import PromptItem

log = logging.getLogger(__name__)

WHEN = ("always", "no_success")


@dataclass(frozen=True)
class GuideStart:
    """The start of one guided rollout.

    Attributes:
        group: index of its prompt in the step.
        ids: the guide's token ids (policy tokenizer), spliced into the response as ids.
        behaviour: per guide token, its log-prob under whatever wrote it (nats; 0.0 for a fixed
            text such as a dataset solution: probability 1).
        complete: a whole trace (EOS included when written): the policy writes nothing after it.
        fraction: the share of the reference solution's tokens given (1.0 for a whole trace).
    """

    group: int
    ids: list[int]
    behaviour: list[float]
    complete: bool
    fraction: float


def failed_groups(rollouts: Sequence[Rollout], num_groups: int, success_reward: float) -> list[bool]:
    """Per group, True when none of its control rollouts reached ``success_reward`` (BREAD's "no
    success in the group"; rollouts without a reward, NaN, count as failures). A group without
    control rollouts counts as failed."""
    solved = [False] * num_groups
    for r in rollouts:
        if r.is_control and r.reward >= success_reward:  # NaN >= x is False
            solved[r.group] = True
    return [not s for s in solved]


class SolutionTokens:
    """Token ids of reference solutions, tokenized once per distinct text and cached (the guide
    splices these ids; a response is never decoded and re-encoded).

    Args:
        tokenizer: the policy tokenizer. eos: append the EOS token (a complete demonstration).
    """

    def __init__(self, tokenizer, eos: bool = False):
        self.tokenizer, self.eos = tokenizer, eos
        self._cache: dict[str, list[int]] = {}

    def __call__(self, solution: str) -> list[int]:
        """The ids of ``solution`` (a fresh list each call)."""
        if solution not in self._cache:
            ids = self.tokenizer.encode(solution, add_special_tokens=False)
            if self.eos and self.tokenizer.eos_token_id is not None:
                ids = ids + [self.tokenizer.eos_token_id]
            self._cache[solution] = ids
        return list(self._cache[solution])


class Guide:
    """Base class and the ``guide=none`` component: no guided rollouts.

    A guide is asked once per training step, after the step's rollouts are sampled and scored,
    for the starts of its guided rollouts (:meth:`starts`); the rollout engine splices each start's
    ids (provenance guide), lets the policy continue unless the start is complete, scores the guide
    tokens under the rollout-time policy, computes rewards and reports back (:meth:`observe`).
    Guided rollouts join their prompt's group as non-control rows. Validation never guides.

    Attributes:
        adds_rollouts: class-level capability; False for ``guide=none`` (the engine skips it).

    Args:
        rollouts_per_prompt: guided rollouts per guided prompt (count).
        when: ``always``, or ``no_success``: only prompts whose control rollouts all failed (BREAD).
        success_reward: a reward at or above this is a success (reward units, in [0, 1]).

    Raises:
        ValueError: a bad knob, naming the ``guide.*`` field.
    """

    adds_rollouts: bool = False

    def __init__(self, rollouts_per_prompt: int = 1, when: str = "always", success_reward: float = 1.0):
        check_int("guide.rollouts_per_prompt", rollouts_per_prompt, 1)
        check_choice("guide.when", when, WHEN)
        check_range("guide.success_reward", success_reward, 0, 1)
        self.rollouts_per_prompt, self.when, self.success_reward = rollouts_per_prompt, when, success_reward
        self._metrics: dict[str, float] = {}

    def eligible(self, rollouts: Sequence[Rollout], items: Sequence[PromptItem]) -> list[bool]:
        """Per group, whether ``when`` lets it be guided (solutions aside)."""
        if self.when == "always":
            return [True] * len(items)
        return failed_groups(rollouts, len(items), self.success_reward)

    def starts(
        self, rollouts: Sequence[Rollout], items: Sequence[PromptItem], step: int, intervention, max_tokens: int
    ) -> list[GuideStart]:
        """The starts of this step's guided rollouts (none here).

        Args:
            rollouts: the step's scored rollouts. items: its prompts. step: the optimizer step.
            intervention: the run's intervention component (its ``demonstrate`` writes traces).
            max_tokens: the response length limit (tokens); a start is never longer.
        """
        return []

    def observe(self, guided: Sequence[Rollout], starts: Sequence[GuideStart], items: Sequence[PromptItem]) -> None:
        """Called with the scored guided rollouts (in the order of ``starts``)."""

    def count_missing(self, eligible: Sequence[bool], items: Sequence[PromptItem]) -> list[bool]:
        """``eligible`` restricted to prompts with a solution; prompts without one are counted in
        ``guide/no_solution`` (and logged) and get no guide."""
        missing = sum(1 for ok, item in zip(eligible, items) if ok and not item.solution)
        self._metrics["guide/no_solution"] = float(missing)
        if missing:
            log.info("guide: %d eligible prompt(s) of the step have no reference solution: not guided", missing)
        return [ok and bool(item.solution) for ok, item in zip(eligible, items)]

    def metrics(self) -> dict[str, float]:
        """The last step's guide statistics (``guide/*``)."""
        return dict(self._metrics)

    def state_dict(self) -> dict:
        """State kept in checkpoints (none here)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


class NoGuide(Guide):
    """``guide=none``: no guided rollouts (``tokenizer`` accepted and unused, as every guide is
    built with it)."""

    def __init__(self, tokenizer=None):
        super().__init__()
