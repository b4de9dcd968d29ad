"""Answer extraction and the reasoning-gym reward (``reward=reasoning_gym``)."""

from __future__ import annotations

import re
from typing import Any, Callable

import reasoning_gym

_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def locate_answer(response: str) -> tuple[str, int] | None:
    """The final answer of a response and its start offset: the content of the last
    ``<answer>...</answer>`` tag if any, else the last number in the text (commas removed);
    None when there is neither."""
    tags = list(_TAG.finditer(response))
    if tags:
        return tags[-1].group(1).strip(), tags[-1].start()
    numbers = list(_NUMBER.finditer(response))
    if numbers:
        return numbers[-1].group(0).replace(",", ""), numbers[-1].start()
    return None


def extract_answer(response: str) -> str | None:
    """The final answer of a response (see :func:`locate_answer`), or None."""
    located = locate_answer(response)
    return located[0] if located else None


class ReasoningGymReward:
    """Reward in [0, 1] from the task's own ``score_answer`` on the extracted answer.

    ``item.entry`` is the reasoning-gym entry; its ``metadata.source_dataset`` picks the scorer.
    A response with no extractable answer scores 0 (the scorer is called with None).
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
        return float(self._scorers[source](extract_answer(response), item.entry))
