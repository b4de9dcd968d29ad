"""Math answers graded with ``math-verify`` (``benchmark=champ`` and the hub math benchmarks)."""

from __future__ import annotations

from typing import Sequence

from mintrl.reward.base import Reward
from mintrl.text.answer import _TAG


def parse_gold(answer: str):
    """``math_verify.parse`` of a reference answer written as plain math (wrapped in ``$...$``)."""
    import math_verify

    return math_verify.parse(answer if "$" in answer or "\\boxed" in answer else f"${answer}$")


def parse_response(response: str):
    """The model's final answer: the last ``<answer>`` tag's content parsed as math when there is
    one, else whatever ``math_verify`` finds in the whole response (``\\boxed{}``, ``$...$``, the
    last number)."""
    import math_verify

    tags = _TAG.findall(response)
    if tags:
        parsed = parse_gold(tags[-1].strip())
        if parsed:
            return parsed
    return math_verify.parse(response)


class MathVerifyReward(Reward):
    """1.0 when ``math_verify.verify(gold, answer)`` holds (equivalent expressions, sets, intervals),
    else 0.0; the reference is ``item.reference``. Runs in the calling (main) thread, since
    ``math-verify`` times out with signals (``main_thread_only``: the rollout's fault guard then
    contains its errors but leaves timing out to ``math-verify``)."""

    main_thread_only = True

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float]:
        """Rewards of ``N`` decoded responses for their prompt items."""
        import math_verify

        out = []
        for response, item in zip(responses, items):
            gold, answer = parse_gold(item.reference), parse_response(response)
            out.append(float(bool(gold) and bool(answer) and math_verify.verify(gold, answer)))
        return out
