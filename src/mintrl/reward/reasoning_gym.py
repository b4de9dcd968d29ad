"""The reasoning-gym reward (``reward=reasoning_gym``): the task's own scorer on the extracted answer."""

from __future__ import annotations

from typing import Any, Callable

import reasoning_gym

from mintrl.reward.base import Reward
from mintrl.text.answer import extract_answer
from mintrl.text.latex import plain_fractions


class ReasoningGymReward(Reward):
    """Reward in [0, 1] from the task's own ``score_answer`` on the extracted answer.

    ``item.entry`` is the reasoning-gym entry; its ``metadata.source_dataset`` picks the scorer.
    LaTeX number fractions in the answer reach the scorer as ``a/b``
    (:func:`mintrl.text.latex.plain_fractions`: ``\\boxed{\\frac{1}{2}}`` scores as ``1/2``); an
    answer without LaTeX reaches it unchanged. A response with no extractable answer scores 0 (the
    scorer is called with None).
    """

    def __init__(self) -> None:
        self._scorers: dict[str, Callable[[str | None, dict[str, Any]], float]] = {}

    def __call__(self, responses, items) -> list[float]:
        """Scores of decoded responses (special tokens removed), one per ``(response, item)`` pair."""
        return [self.score(r, item) for r, item in zip(responses, items)]

    def score(self, response: str, item) -> float:
        """Score one decoded response for its prompt item."""
        source = item.entry["metadata"]["source_dataset"]
        if source not in self._scorers:
            self._scorers[source] = reasoning_gym.get_score_answer_fn(source)
        return float(self._scorers[source](plain_fractions(extract_answer(response)), item.entry))
