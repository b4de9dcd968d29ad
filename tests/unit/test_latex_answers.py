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


def _entry(dataset: str, index: int, answer: str | None = None):
    entry = dict(reasoning_gym.create_dataset(dataset, size=5, seed=1)[index])
    if answer is not None:  # the same task scorer, another gold answer
        entry["answer"] = answer
    return type("Item", (), {"entry": entry})()


def test_latex_fractions_score_exactly_as_the_plain_fraction():
    """Gold "1/2" (dice: an exact string scorer): every LaTeX way of writing one half scores 1, every
    other fraction 0."""
    half = _entry("dice", 1)
    assert half.entry["answer"] == "1/2"
    right = [
        "\\boxed{\\frac{1}{2}}",
        "\\boxed{\\dfrac{1}{2}}",
        "<answer>\\tfrac{1}{2}</answer>",
        "<answer>$\\frac{1}{2}$</answer>",
        "\\boxed{\\frac12}",
        "\\boxed{\\dfrac 1 2}",
        "\\boxed{\\frac{1}{2}\\!}",
        "<answer>\\left.\\frac{1}{2}\\right.</answer>",
    ]
    wrong = [
        "\\boxed{\\frac{1}{3}}",
        "\\boxed{\\frac{2}{1}}",
        "\\boxed{-\\frac{1}{2}}",
        "\\boxed{\\frac{-1}{2}}",
        "\\boxed{\\frac{1}{2}+1}",
        "\\boxed{\\frac{1}{2}3}",
        "\\boxed{\\frac{12}{2}}",
        "\\boxed{\\frac123}",
        "\\boxed{\\frac{1}{2",
    ]
    reward = ReasoningGymReward()
    assert reward(right, [half] * len(right)) == [1.0] * len(right)
    assert reward(wrong, [half] * len(wrong)) == [0.0] * len(wrong)


def test_negative_latex_fractions_score_as_the_negative_plain_fraction():
    minus = _entry("dice", 0, answer="-3/4")
    right = [
        "\\boxed{-\\frac{3}{4}}",
        "\\boxed{\\frac{-3}{4}}",
        "<answer>- \\dfrac{3}{4}</answer>",
        "\\boxed{-\\tfrac34}",
    ]
    wrong = ["\\boxed{\\frac{3}{4}}", "\\boxed{-\\frac{-3}{4}}", "\\boxed{-\\frac{4}{3}}"]
    reward = ReasoningGymReward()
    assert reward(right, [minus] * len(right)) == [1.0] * len(right)
    assert reward(wrong, [minus] * len(wrong)) == [0.0] * len(wrong)


@pytest.mark.parametrize(
    "answer",
    ["<answer>-4</answer>", "<answer>$-4$</answer>", "\\boxed{-4}", "<answer>\\(-4\\)</answer>", "<answer>-4\\,</answer>",
     "<answer>\\left(-4\\right)</answer>", "<answer>-8/2</answer>", "the answer is -4", "no answer"],
)  # fmt: skip
def test_answers_without_a_latex_fraction_reach_the_scorer_unchanged(answer):
    """The training task (basic_arithmetic) gives partial credit for the gold inside a longer answer:
    an answer without a LaTeX fraction must score exactly as the task's scorer scores it."""
    from mintrl.text.answer import extract_answer

    item = _entry("basic_arithmetic", 0)
    assert item.entry["answer"] == "-4"
    scorer = reasoning_gym.get_score_answer_fn("basic_arithmetic")
    assert ReasoningGymReward()([answer], [item]) == [scorer(extract_answer(answer), item.entry)]
