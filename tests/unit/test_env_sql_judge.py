"""judge=sql: execution-based verdicts on hand cases."""

from __future__ import annotations

import pytest
from sql_helpers import task

from mintrl.core.verdict import KEEP, REVISE, ReviewRequest
from mintrl.judge.sql import SqlJudge, step_at

SELECT = task()  # SELECT age FROM people WHERE name = 'Ann' -> 34
UPDATE = task("update", "UPDATE people SET age = 35 WHERE name = 'Ann'")
REF_SELECT = "```sql\nSELECT age FROM people WHERE name = 'Ann'\n```"
REF_UPDATE = "```sql\nUPDATE people SET age = 35 WHERE name = 'Ann'\n```"


def review(steps, entry=SELECT, final=True, prefix=""):
    request = ReviewRequest("q", "ref", prefix, steps, final=final, entry=entry)
    verdict = SqlJudge().review([request])[0]
    return verdict.kind, verdict.step, verdict.correction


@pytest.mark.parametrize(
    "steps,entry,expected",
    [
        # a right query (other text, same result) -> Keep
        (["Look it up.\n\n", "```sql\nselect AGE from people where city = 'Rome'\n```"], SELECT, (KEEP, None, None)),
        # a wrong query -> Revise at the step where its block starts, with the reference action
        (
            ["Look it up.\n\n", "```sql\nSELECT age FROM people WHERE name = 'Ben'\n```"],
            SELECT,
            (REVISE, 1, REF_SELECT),
        ),
        # a failing query -> Revise
        (["```sql\nSELECT nope FROM people\n```"], SELECT, (REVISE, 0, REF_SELECT)),
        # answers of a SELECT task
        (["So the age is ", "<answer>34.0</answer>"], SELECT, (KEEP, None, None)),
        (["So the age is ", "<answer>21</answer>"], SELECT, (REVISE, 1, "<answer>34</answer>")),
        # a change task: same resulting table -> Keep, another -> Revise; its answer is kept (not seen)
        (["```sql\nUPDATE people SET age = age + 1 WHERE city = 'Rome'\n```"], UPDATE, (KEEP, None, None)),
        (["```sql\nUPDATE people SET age = 35\n```"], UPDATE, (REVISE, 0, REF_UPDATE)),
        (["```sql\nSELECT * FROM people\n```"], UPDATE, (REVISE, 0, REF_UPDATE)),
        (["<answer>done</answer>"], UPDATE, (KEEP, None, None)),
        # an invalid final turn -> Revise at its first step with the reference action
        (["I think ", "it is 34."], SELECT, (REVISE, 0, REF_SELECT)),
        # no entry -> Keep
        (["<answer>21</answer>"], None, (KEEP, None, None)),
    ],
)
def test_final_turns(steps, entry, expected):
    assert review(steps, entry) == expected


def test_unfinished_turns_wait_for_a_complete_block():
    assert review(["Let me ", "```sql\nSELECT age FROM people WHERE name = 'Ben'"], final=False) == (KEEP, None, None)
    assert review(["<answer>21</answer>"], final=False) == (KEEP, None, None)
    closed = ["Let me ", "```sql\nSELECT age FROM people WHERE name = 'Ben'\n```", " and"]
    assert review(closed, final=False) == (REVISE, 1, REF_SELECT)


def test_the_prefix_is_read_with_the_steps():
    # the block opened in the accepted prefix and closes in this chunk: Revise at step 0
    prefix = "Let me run ```sql\nSELECT age FROM people "
    assert review(["WHERE name = 'Ben'\n```"], prefix=prefix) == (REVISE, 0, REF_SELECT)
    # a block wholly in the accepted prefix was judged before
    prefix = "```sql\nSELECT age FROM people WHERE name = 'Ben'\n```\n"
    assert review(["and more."], prefix=prefix, final=False) == (KEEP, None, None)


def test_a_bad_entry_is_kept_and_counted():
    judge = SqlJudge()
    request = ReviewRequest("q", "r", "", ["<answer>1</answer>"], final=True, entry={"kind": "select"})
    assert judge.review([request])[0].kind == KEEP
    assert judge.metrics() == {"judge/sql_errors": 1.0} and judge.metrics() == {"judge/sql_errors": 0.0}


def test_hostile_sql_in_a_review_is_contained():
    steps = ["```sql\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c\n```"]
    request = ReviewRequest("q", "r", "", steps, final=True, entry=SELECT)
    assert SqlJudge(query_timeout_s=0.2).review([request])[0].kind == REVISE


def test_step_at():
    assert [step_at(["ab", "cd"], k) for k in (0, 1, 2, 3, 9)] == [0, 0, 1, 1, 1]
    assert step_at([], 5) == 0
