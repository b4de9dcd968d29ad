"""The pass@k estimator by hand, its torchmetrics metric, and math-verify grading (the reduction over
two real ranks: integration/test_pass_at_k_ddp.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mintrl.metrics.pass_at_k import PassAtK, correct_counts, pass_at_k
from mintrl.reward import MathVerifyReward

NAN = float("nan")


@pytest.mark.parametrize("k, expected", [(1, 2 / 5), (2, 1 - 3 / 10), (3, 1 - 1 / 10), (4, 1.0), (5, 1.0)])
def test_pass_at_k_by_hand_n5_c2(k, expected):
    # 1 - C(3, k) / C(5, k): C(3,1)/C(5,1) = 3/5, C(3,2)/C(5,2) = 3/10, C(3,3)/C(5,3) = 1/10, then 0
    assert pass_at_k(5, 2, k) == pytest.approx(expected)


def test_pass_at_k_edges_and_bad_arguments():
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 5, 1) == 1.0 and pass_at_k(200, 1, 1) == pytest.approx(1 / 200)
    for n, c, k in ((5, 2, 0), (5, 2, 6), (5, 6, 1)):
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_metric_counts_correct_samples_and_skips_short_rows():
    rewards = torch.tensor(
        [
            [1.0, 0.0, 1.0, 0.0, 0.0],  # c = 2 of 5
            [0.5, 1.0, NAN, NAN, NAN],  # partial credit is not a pass; 2 valid samples
            [0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    assert correct_counts(rewards)[0].tolist() == [5, 2, 5] and correct_counts(rewards)[1].tolist() == [2, 1, 0]
    metric = PassAtK(ks=[1, 2, 3])
    metric.update(rewards)
    out = metric.compute()
    assert out[1] == pytest.approx((0.4 + 0.5 + 0.0) / 3)
    assert out[2] == pytest.approx((0.7 + 1.0 + 0.0) / 3)
    assert out[3] == pytest.approx((0.9 + 0.0) / 2)  # the 2-sample row cannot estimate pass@3
    assert metric.skipped.tolist() == [0.0, 0.0, 1.0]


def test_math_verify_reward_grades_equivalent_forms():
    reward = MathVerifyReward()
    items = [SimpleNamespace(reference="2^(n-1)")] * 4 + [SimpleNamespace(reference="72")] * 3
    responses = [
        "<answer>2^{n-1}</answer>",
        "so \\boxed{2^n}",
        "<answer>2^(n-1)</answer>",
        "no idea",
        "<answer>72</answer>",
        "<answer>\\frac{144}{2}</answer>",
        "<answer>71</answer>",
    ]
    assert reward(responses, items) == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
