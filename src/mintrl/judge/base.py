"""The judge interface: review a chunk of steps, answer Keep or Revise with the earliest wrong step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping, Sequence

from mintrl.core.verdict import ReviewRequest, Verdict


class Judge(ABC):
    """Reviews chunks in a batch (``judge=`` config group); must never raise on model output.

    Contract: the constructor takes the keyword ``context`` (a
    :class:`mintrl.build.components.ModelContext`: the policy, its tokenizer, the frozen step-0 copy and
    loaded teachers), which ``build_components`` always passes; a judge that needs no model accepts
    and ignores it. Optional capability with a default: :meth:`metrics`.

    Attributes:
        finds_errors: class-level capability; False for a judge that never revises (``judge=always_keep``),
            which objectives crediting the first wrong step cannot use.
    """

    finds_errors: bool = True

    @classmethod
    def generates_with_step0_policy(cls, config: Mapping) -> bool:
        """Whether a judge built from ``config`` (its config node) runs Hugging Face ``generate``
        on the frozen step-0 policy (default False; a self-privileged judge without a ``teacher``
        does). Read by the config checks before anything is built."""
        return False

    @classmethod
    def context_models(cls, config: Mapping) -> tuple[tuple[str | None, str], ...]:
        """The models a judge built from ``config`` takes from the run's model context, as
        ``(path, dtype)`` pairs (path None: the frozen step-0 policy); default none. Read by the
        memory plan (:mod:`mintrl.build.memory_plan`) before anything is built."""
        return ()

    @abstractmethod
    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One verdict per request, in order."""

    def metrics(self) -> dict[str, float]:
        """Counters since the last call, logged with the step's rollout statistics (default none)."""
        return {}
