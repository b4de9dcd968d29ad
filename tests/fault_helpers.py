"""Faulty components for tests/test_faults.py (Hydra targets; importable from the tests folder)."""

from __future__ import annotations

import math
import time

import torch

from mintrl.judge.rule import RuleJudge
from mintrl.objective.regression import AdvantageRegression
from mintrl.reward import ReasoningGymReward

LOG: dict[str, list] = {"judge_calls": [], "reward_calls": [], "nan_rows": []}


class FlakyJudge(RuleJudge):
    """The rule judge, raising on every third ``review`` call (each call logged with its size)."""

    def review(self, requests):
        LOG["judge_calls"].append(len(requests))
        if len(LOG["judge_calls"]) % 3 == 0:
            raise RuntimeError("judge backend unavailable")
        return super().review(requests)


class BadReward(ReasoningGymReward):
    """The task reward, hanging on its first call (then answered row by row) and NaN for every
    response that contains the digit 7 (logged)."""

    def __call__(self, responses, items):
        LOG["reward_calls"].append(len(responses))
        call = len(LOG["reward_calls"])
        if call == 1:
            time.sleep(20)  # abandoned after rollout.reward_timeout_s
        values = super().__call__(responses, items)
        out = [math.nan if "7" in r else v for r, v in zip(responses, values)]
        if call > 1:  # the hung first call's late answer is discarded
            LOG["nan_rows"].append(sum(math.isnan(v) for v in out))
        return out


class NaNAfter(AdvantageRegression):
    """MInTRL-Const whose loss becomes NaN from its ``after``-th call on."""

    def __init__(self, after: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.after, self.calls = after, 0

    def __call__(self, batch, logprobs, totals):
        out = super().__call__(batch, logprobs, totals)
        self.calls += 1
        if self.calls > self.after:
            out.loss = out.loss * torch.tensor(float("nan"))
        return out


class NoReward(ReasoningGymReward):
    """A reward that is never available (None for every response)."""

    def __call__(self, responses, items):
        return [None] * len(responses)
