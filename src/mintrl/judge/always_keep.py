"""``judge=always_keep``: always Keep, so "semi-on-policy" rollouts are pure on-policy rollouts."""

from __future__ import annotations

from typing import Sequence

from mintrl.core.verdict import ReviewRequest, Verdict
from mintrl.judge.base import Judge


class AlwaysKeepJudge(Judge):
    """Answers Keep for every chunk (the no-intervention ablation). ``context`` is unused."""

    finds_errors = False

    def __init__(self, context=None):
        pass

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """Returns one Keep verdict per request."""
        return [Verdict() for _ in requests]
