"""LaTeX fractions in answers reach the reasoning-gym scorer as plain fractions."""

from __future__ import annotations

import pytest
import reasoning_gym

from mintrl.reward.reasoning_gym import ReasoningGymReward
from mintrl.text.latex import plain_fractions


@pytest.mark.parametrize(
    "answer,plain",
    [
        ("\\frac{1}{2}", "1/2"),
        ("\\dfrac{1}{2}", "1/2"),
        ("\\tfrac{ 1 }{ 2 }", "1/2"),
        ("-\\frac{3}{4}", "-3/4"),
        ("\\frac{-3}{4}", "-3/4"),
        ("-\\frac{-3}{4}", "3/4"),
        ("$\\frac{737}{960}$", "737/960"),
        ("\\(\\frac{7}{8}\\)", "7/8"),
        ("x = \\frac{1}{2}", "x = 1/2"),
        ("1\\,000", "1000"),
        ("737/960", "737/960"),
        ("12", "12"),
        (None, None),
    ],
)
def test_plain_fractions(answer, plain):
    assert plain_fractions(answer) == plain


def test_a_latex_fraction_scores_as_the_plain_one():
    entry = reasoning_gym.create_dataset("dice", size=5, seed=1)[0]
    assert entry["answer"] == "737/960"
    item = type("Item", (), {"entry": entry})()
    reward = ReasoningGymReward()
    right = ["<answer>737/960</answer>", "\\boxed{\\frac{737}{960}}", "<answer>\\dfrac{737}{960}</answer>",
             "<answer>$\\tfrac{737}{960}$</answer>"]  # fmt: skip
    wrong = ["\\boxed{\\frac{736}{960}}", "<answer>\\frac{960}{737}</answer>", "<answer>-\\frac{737}{960}</answer>"]
    assert reward(right, [item] * 4) == [1.0] * 4
    assert reward(wrong, [item] * 3) == [0.0] * 3
