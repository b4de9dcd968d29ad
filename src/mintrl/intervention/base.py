"""The intervention interface: write a short correction after the retained prefix (MInTRL Alg. 1, line 7)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Mapping, Sequence

from mintrl.core.verdict import Verdict


@dataclass
class InterventionRequest:
    """One correction to write: ``h ~ pi_JI(. | x, p || c_<e)``.

    Attributes:
        question: task text ``x``; reference: privileged context ``z``.
        prompt_ids: the policy's prompt token ids (chat-templated).
        response_ids: the retained response so far (accepted prefix + kept steps of the chunk).
        response_text: its decoded text.
        verdict: the judge's Revise verdict (its ``correction`` may be used).
        entry: the prompt item's task data (privileged; see :class:`mintrl.judge.base.ReviewRequest`),
            or None.
    """

    question: str
    reference: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    verdict: Verdict
    entry: dict | None = None


@dataclass
class Correction:
    """Tokens written by the judge-intervention policy, in the policy's token ids.

    Attributes:
        ids: token ids (policy tokenizer).
        logprobs: per token, log-prob under the intervention policy's own sampling distribution
            (nats), the behaviour policy of these tokens; ``0.0`` each for a deterministic writer
            (the rule intervention: probability 1) and for black-box writers whose log-probs are
            unknown (documented fallback).
    """

    ids: list[int]
    logprobs: list[float]

    def __post_init__(self):
        if len(self.ids) != len(self.logprobs):
            raise ValueError(f"correction has {len(self.ids)} ids but {len(self.logprobs)} log-probs")


class Intervention(ABC):
    """Writes corrections in the policy's token ids (``intervention=`` config group).

    Contract: the constructor takes the keyword ``context`` (a
    :class:`mintrl.build.components.ModelContext`), which ``build_components`` always passes; an
    intervention that needs no model accepts and ignores it.

    Attributes:
        white_box: True when :attr:`Correction.logprobs` are the real log-probs (nats) of the
            distribution that wrote the tokens (a model we hold, or a deterministic writer: 0);
            False for black-box writers whose log-probs are a 0.0 fallback. Logged statistics of
            behaviour log-probs (``rollout/intervention_logprob``) are reported only when True.
    """

    white_box: bool = False

    @classmethod
    def generates_with_step0_policy(cls, config: Mapping) -> bool:
        """Whether a intervention built from ``config`` (its config node) runs Hugging Face ``generate``
        on the frozen step-0 policy (default False; a self-privileged intervention without a ``teacher``
        does). Read by the config checks before anything is built."""
        return False

    @classmethod
    def context_models(cls, config: Mapping) -> tuple[tuple[str | None, str], ...]:
        """The models an intervention built from ``config`` takes from the run's model context, as
        ``(path, dtype)`` pairs (path None: the frozen step-0 policy); default none. Read by the
        memory plan (:mod:`mintrl.build.memory_plan`) before anything is built."""
        return ()

    @abstractmethod
    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """One correction per request: at most ``max_new_tokens`` tokens, no EOS (control returns
        to the policy)."""

    @abstractmethod
    def demonstrate(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """A complete response per request (empty ``response_ids``), EOS included when written:
        the judge-intervention model's own trajectories, for the SFT stage of SFT+GRPO."""
