"""Known failure cases of RL-for-LLM frameworks that need the embedded model (issue 18)."""

from __future__ import annotations

import pytest
import torch
from conftest import ARITHMETIC

from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.reward import Reward
from mintrl.rollout.semi_on_policy import SemiOnPolicyRollout
from mintrl.sampler import HFSampler
from mintrl.training.build import ModelContext


class _OneValueReward(Reward):
    def __call__(self, responses, items):
        return [1.0]


def test_rollout_with_a_wrong_count_reward_stops_naming_both_lengths(embedded, tokenizer):
    """Item 4: before, the guard retried row by row and the batch got rewards [1, 1, 1, 1]."""
    items = ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=2, val_size=1).build("train", tokenizer)
    engine = SemiOnPolicyRollout(
        HFSampler(embedded.model, tokenizer),
        RuleJudge(),
        RuleIntervention(ModelContext(embedded)),
        _OneValueReward(),
        tokenizer,
        n_control=2,
        n_semi=0,
        chunk_size=4,
        max_reviews=1,
        continuation_len=4,
        max_response_tokens=4,
    )
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="returned 1 rewards for 4 responses"):
        engine.generate(items[:2], step=0)
