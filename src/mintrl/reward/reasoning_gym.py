"""The reasoning-gym reward (``reward=reasoning_gym``): the task's own scorer on the extracted answer."""

from __future__ import annotations

import re
from typing import Any, Callable

import reasoning_gym

from mintrl.reward.base import Reward
from mintrl.text.answer import extract_answer
from mintrl.text.latex import plain_fractions

_FRACTION_COMMAND = re.compile(r"\\[dt]?frac(?![A-Za-z])")
_SHORT_FRACTION = re.compile(r"(\\[dt]?frac)\s*(\d)\s*(\d)")  # \frac12: one-digit arguments need no braces
_SIZED_DELIMITER = re.compile(r"\\(?:left|right)(?![A-Za-z])\s*\.?")  # \left( -> (, \left. -> nothing


def plain_answer(answer: str | None) -> str | None:
    """The answer the task's scorer sees: an answer holding a LaTeX fraction command (``\\frac``,
    ``\\dfrac``, ``\\tfrac``) has its number fractions written as ``a/b``
    (:func:`mintrl.text.latex.plain_fractions`: ``-\\frac{3}{4}`` and ``\\frac{-3}{4}`` -> ``-3/4``,
    ``$...$`` and thin spaces such as ``\\!`` dropped), ``\\frac12`` read as ``\\frac{1}{2}`` and
    ``\\left``/``\\right`` dropped (their delimiter kept, ``\\left.`` dropped whole). Any other
    answer, and None (no answer), is returned unchanged, so a task whose answers hold no LaTeX
    fraction scores exactly as reasoning-gym scores it."""
    if answer is None or not _FRACTION_COMMAND.search(answer):
        return answer
    text = _SHORT_FRACTION.sub(r"\1{\2}{\3}", _SIZED_DELIMITER.sub("", answer))
    return plain_fractions(text)


class ReasoningGymReward(Reward):
    """Reward in [0, 1] from the task's own ``score_answer`` on the extracted answer.

    ``item.entry`` is the reasoning-gym entry; its ``metadata.source_dataset`` picks the scorer. An
    answer holding a LaTeX fraction reaches the scorer with its number fractions as ``a/b``
    (:func:`plain_answer`: ``\\boxed{\\frac{1}{2}}`` scores as ``1/2``); any other answer reaches it
    unchanged. A response with no extractable answer scores 0 (the scorer is called with None).
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
        return float(self._scorers[source](plain_answer(extract_answer(response)), item.entry))
