"""Answer extraction and the reasoning-gym reward (``reward=reasoning_gym``)."""

from __future__ import annotations

import re
from typing import Any, Callable

import reasoning_gym

_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_answer(response: str) -> str | None:
    """The final answer of a response: the content of the last ``<answer>...</answer>`` tag if any,
    else the last number in the text (commas removed), else None."""
    tags = _TAG.findall(response)
    if tags:
        return tags[-1].strip()
    numbers = _NUMBER.findall(response)
    return numbers[-1].replace(",", "") if numbers else None


class ReasoningGymReward:
    """Reward in [0, 1] from the task's own ``score_answer`` on the extracted answer.

    ``item.entry`` is the reasoning-gym entry; its ``metadata.source_dataset`` picks the scorer.
    A response with no extractable answer scores 0 (the scorer is called with None).
    """

    def __init__(self) -> None:
        self._scorers: dict[str, Callable[[str | None, dict[str, Any]], float]] = {}

    def __call__(self, response: str, item) -> float:
        """Score one decoded response (special tokens removed) for its prompt item."""
        source = item.entry["metadata"]["source_dataset"]
        if source not in self._scorers:
            self._scorers[source] = reasoning_gym.get_score_answer_fn(source)
        return float(self._scorers[source](extract_answer(response), item.entry))
