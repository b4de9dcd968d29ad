"""Step segmentation, the rule judge's earliest false claim, and LLM verdict parsing."""

import subprocess
import sys

import pytest

from mintrl.core.verdict import KEEP, REVISE, UNPARSEABLE, ReviewRequest
from mintrl.judge.arithmetic import evaluate, find_claims
from mintrl.judge.rule import RuleJudge
from mintrl.judge.self_privileged import parse_verdict
from mintrl.text.steps import split_steps

FENCE = "`" * 3


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a\n\nb\n\nc", ["a\n\n", "b\n\n", "c"]),  # blank lines; trailing text is a step
        ("one line only", ["one line only"]),  # no delimiter
        ("x\n\n\n\ny\n\n", ["x\n\n\n\n", "y\n\n"]),  # a run of blank lines stays with its step
        (
            f"Plan:\n{FENCE}python\nx = 1\n{FENCE}\nDone",
            ["Plan:\n", f"{FENCE}python\n", "x = 1\n", f"{FENCE}\n", "Done"],
        ),
        ("", []),
    ],
)
def test_split_steps(text, expected):
    steps = split_steps(text)
    assert [s.text for s in steps] == expected
    assert "".join(s.text for s in steps) == text
    assert all(text[s.start : s.end] == s.text for s in steps)


def test_split_steps_rejects_unknown_delimiter():
    with pytest.raises(ValueError, match="blank_line"):
        split_steps("a", ("semicolon",))


def test_exact_evaluation():
    assert evaluate("3 + 4 * 2") == 11
    assert evaluate("7 / 2") * 2 == 7
    assert evaluate("1 / 0") is None
    assert evaluate("__import__('os')") is None
    claims = find_claims("So 3 + 4 = 8 and 2 x 3 = 6.", reference=None)
    assert [(c.holds, c.correction) for c in claims] == [(False, "3 + 4 = 7"), (True, "2 x 3 = 6")]


# (steps, prefix, final, expected kind, expected step, expected correction); check_last_number=True
RULE_TABLE = [
    (["3 + 4 = 7\n\n", "7 + 1 = 8\n\n"], "", False, KEEP, None, None),
    (["3 + 4 = 7\n\n", "7 + 1 = 8\n\n"], "", True, REVISE, 1, "<answer>7</answer>"),  # final answer = last number 8
    (["It is 3 and 4.\n\n", "Result: 7"], "", True, KEEP, None, None),  # last number is right
    (["Describe the sum."], "", True, KEEP, None, None),  # no answer stated: nothing to check
    (["3 + 4 = 7\n\n", "7 + 1 = 9\n\n", "2 + 2 = 5"], "", True, REVISE, 1, "7 + 1 = 8"),  # earliest false
    (["3 + 4 = 8\n\n", "7 + 1 = 9"], "", True, REVISE, 0, "3 + 4 = 7"),
    (["The answer is <answer>8</answer>"], "", True, REVISE, 0, "<answer>7</answer>"),  # wrong final answer
    (["The answer is <answer>7</answer>"], "", True, KEEP, None, None),
    (["So the answer is 6."], "", True, REVISE, 0, "The answer is 7."),
    (["So it is 6."], "The sum 3 + 4 is 7.\n\n", True, REVISE, 0, "<answer>7</answer>"),
    (["3 + 4 = 1"], "", False, KEEP, None, None),  # may continue as "= 12": wait for the next chunk
    (["3 + 4 = 1"], "", True, REVISE, 0, "3 + 4 = 7"),
    (["2, done."], "Well, 3 + 4 = 1", True, REVISE, 0, "3 + 4 = 7"),  # claim split across the chunk boundary
    (["Then we stop."], "3 + 4 = 9\n\n", True, KEEP, None, None),  # already-accepted text is not re-judged
    (["No numbers here at all."], "", True, KEEP, None, None),
]


@pytest.mark.parametrize("steps,prefix,final,kind,step,correction", RULE_TABLE)
def test_rule_judge_table(steps, prefix, final, kind, step, correction):
    verdict = RuleJudge(check_last_number=True).review_one(ReviewRequest("Calculate 3 + 4.", "7", prefix, steps, final))
    assert (verdict.kind, verdict.step, verdict.correction) == (kind, step, correction)


def test_rule_judge_last_number_check_is_optional():
    request = ReviewRequest("Calculate 3 + 4.", "7", "", ["3 + 4 = 7\n\n", "7 + 1 = 8\n\n"], True)
    assert RuleJudge().review_one(request).kind == KEEP  # only explicit claims, all true
    assert RuleJudge(check_last_number=True).review_one(request).step == 1


@pytest.mark.parametrize(
    "reply,n,kind,step",
    [
        ("KEEP", 3, KEEP, None),
        ("keep.", 3, KEEP, None),
        ("REVISE 2", 3, REVISE, 1),
        ("Verdict: revise [3]", 3, REVISE, 2),
        ("REVISE step #1 because ...", 3, REVISE, 0),
        ("REVISE 7", 3, UNPARSEABLE, None),  # out of range
        ("REVISE", 3, UNPARSEABLE, None),  # no step
        ("The student is wrong", 3, UNPARSEABLE, None),
        ("", 3, UNPARSEABLE, None),
    ],
)
def test_parse_verdict(reply, n, kind, step):
    verdict = parse_verdict(reply, n)
    assert (verdict.kind, verdict.step) == (kind, step)


_CLAIM_SCAN = """
from mintrl.judge.arithmetic import find_claims
text = "(" + " +  ".join(["1  "] * 12) + "x and (1 +  2  ) = 3"
print([(c.holds, c.correction) for c in find_claims(text, None)])
"""


def test_claim_search_ends_on_long_operator_chains_without_an_equals_sign():
    """A response of spaced operands without '=' (seen in the intensity sweep: the rule judge's regex
    backtracked exponentially, 18 s for 6 operands, and stalled a run for 15 min) is scanned in
    linear time; the claim after it is still found. Run in a subprocess so a regression cannot hang
    the test run."""
    out = subprocess.run(
        [sys.executable, "-c", _CLAIM_SCAN], capture_output=True, text=True, timeout=20, check=True
    ).stdout
    assert out.strip() == "[(True, '(1 +  2  ) = 3')]"
