"""Whether the number of asserts a check runs can depend on the candidate's answer, decided on the syntax
trees (:func:`mintrl.reward.code.count_dependence`; no sandbox). It decides which rows without a reference
the code reward refuses; the sandboxed attacks are in integration/test_code_reward_hostile.py."""

from __future__ import annotations

import pytest

from mintrl.data.code import CodePrompts
from mintrl.reward.code import count_dependence, count_depends_on_answer

HEAD = "def check(candidate):\n    assert candidate(0) == 0\n"
HELPER = "def check(n):\n    assert square(n) == n * n\nassert square(0) == 0\n"  # MBPP form, no entry point

# (tests, entry point) -> the reason found
DEPENDS = {
    "for_over_the_answer": (
        "def check(candidate):\n    for x in candidate(10):\n        assert x % 2 == 0\n",
        "evens",
        "an assert under `for` over the answer (tests line 2)",
    ),
    "while_on_the_answer": (
        "def check(candidate):\n    i = 0\n    while candidate(i) != -1:\n        assert candidate(i) == i * i\n"
        "        i += 1\n",
        "square",
        "an assert under `while` on the answer (tests line 3)",
    ),
    "if_on_the_answer": (
        HEAD + "    if candidate(1) != -1:\n        assert candidate(3) == 9\n",
        "square",
        "an assert under `if` on the answer (tests line 3)",
    ),
    "else_branch": (
        HEAD + "    if candidate(1) == -1:\n        pass\n    else:\n        assert candidate(3) == 9\n",
        "square",
        "an assert under `if` on the answer (tests line 3)",
    ),
    "if_on_a_value_derived_from_the_answer": (
        HEAD + "    r = candidate(1)\n    ok = r != -1\n    if ok:\n        assert candidate(3) == 9\n",
        "square",
        "an assert under `if` on the answer (tests line 5)",
    ),
    "match_on_the_answer": (
        HEAD
        + "    match candidate(1):\n        case -1:\n            pass\n        case _:\n            assert candidate(3) == 9\n",
        "square",
        "an assert under `match` on the answer (tests line 3)",
    ),
    "match_guard_on_the_answer": (
        HEAD + "    match 1:\n        case 1 if candidate(1) == -1:\n            pass\n        case _:\n"
        "            assert candidate(3) == 9\n",
        "square",
        "an assert under `match` on the answer (tests line 3)",
    ),
    "break": (
        HEAD
        + "    for n in (3, 5):\n        if candidate(n) == -1:\n            break\n        assert candidate(n) == n * n\n",
        "square",
        "a `break` under `if` on the answer (tests line 4)",
    ),
    "continue": (
        HEAD
        + "    for n in (3, 5):\n        if candidate(n) == -1:\n            continue\n        assert candidate(n) == n * n\n",
        "square",
        "a `continue` under `if` on the answer (tests line 4)",
    ),
    "return": (
        HEAD + "    if candidate(1) == -1:\n        return\n    assert candidate(3) == 9\n",
        "square",
        "a `return` under `if` on the answer (tests line 3)",
    ),
    "try_body_calls_the_candidate": (
        HEAD + "    try:\n        r = candidate(3)\n        assert r == 9\n    except ValueError:\n        pass\n",
        "square",
        "an assert in a `try` whose body uses the answer (tests line 3)",
    ),
    "asserts_in_the_handler": (
        HEAD + "    try:\n        candidate(-1)\n    except ValueError:\n        assert candidate(3) == 9\n",
        "square",
        "an assert in a `try` whose body uses the answer (tests line 3)",
    ),
    "with_that_may_swallow_the_exception": (
        "import contextlib\n" + HEAD + "    with contextlib.suppress(ValueError):\n        r = candidate(3)\n"
        "        assert r == 9\n",
        "square",
        "an assert in a `with` whose body uses the answer (tests line 4)",
    ),
    "short_circuit_call_of_check": (
        HELPER + "square(1) != -1 and check(3)\n",
        None,
        "a counted call in a conditional expression on the answer (tests line 4)",
    ),
    "conditional_expression_call_of_check": (
        HELPER + "check(3) if square(1) != -1 else None\n",
        None,
        "a counted call in a conditional expression on the answer (tests line 4)",
    ),
    "check_called_under_if": (
        HELPER + "if square(1) != -1:\n    check(3)\n",
        None,
        "a counted call under `if` on the answer (tests line 4)",
    ),
    "check_mapped_over_the_answer": (
        HELPER + "list(map(check, square_list(3)))\n",
        None,
        "`check` passed on as a value in an expression that uses the answer (tests line 4)",
    ),
    "check_in_a_comprehension_over_the_answer": (
        HELPER + "all(check(x) for x in square_list(3))\n",
        None,
        "a counted call in a conditional expression on the answer (tests line 4)",
    ),
    "a_helper_that_calls_check_under_if": (
        HELPER + "def run(n):\n    check(n)\nif square(1) != -1:\n    run(3)\n",
        None,
        "a counted call under `if` on the answer (tests line 6)",
    ),
    "check_defined_under_if": (
        "if square(1) == -1:\n    def check(n):\n        assert square(0) == 0\nelse:\n    def check(n):\n"
        "        assert square(n) == n * n\ncheck(3)\n",
        None,
        "a definition of `check` under `if` on the answer (tests line 1)",
    ),
    "loop_over_a_helper_that_returns_the_answer": (
        "def evens10():\n    return candidate(10)\n\ndef check(candidate):\n    for x in evens10():\n"
        "        assert x % 2 == 0\n",
        "evens",
        "an assert under `for` over the answer (tests line 5)",
    ),
    "loop_over_a_list_the_answer_was_appended_to": (
        "def check(candidate):\n    out = []\n    out.extend(candidate(10))\n    for x in out:\n        assert x % 2 == 0\n",
        "evens",
        "an assert under `for` over the answer (tests line 4)",
    ),
}

FIXED = {
    "plain_asserts": (
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 2\n",
        "add",
    ),
    "loop_over_a_constant_range": (
        "def check(candidate):\n    for x in range(2, 8):\n        assert candidate(x, x + 1) == str(x)\n",
        "change_base",
    ),
    "if_on_a_random_value_not_the_answer": (
        "import random\n\ndef check(candidate):\n    rng = random.Random(42)\n    for _ in range(10):\n"
        "        c = rng.randint(-3, 3)\n        if c == 0:\n            c = 1\n        assert candidate(c) == c * c\n",
        "square",
    ),
    "try_without_the_answer_in_its_body": (
        "import math\n\ndef check(candidate):\n    try:\n        x = math.sqrt(4)\n    except ValueError:\n        x = 0\n"
        "    assert candidate(x) == 4\n",
        "square",
    ),
    "mbpp_asserts": ("assert triple(2) == 6\nassert round(triple(2.5), 1) == 7.5\n", None),
    "check_called_with_the_answer_unconditionally": (HELPER + "check(3)\n", None),
    "a_loop_without_asserts": ("def check(candidate):\n    for x in candidate(3):\n        pass\n", "square"),
}


@pytest.mark.parametrize("name", sorted(DEPENDS))
def test_where_the_answer_decides_how_many_asserts_run(name):
    tests, entry_point, reason = DEPENDS[name]
    assert count_dependence(tests, entry_point) == reason
    assert count_depends_on_answer(tests, entry_point)


@pytest.mark.parametrize("name", sorted(FIXED))
def test_where_the_count_is_fixed(name):
    tests, entry_point = FIXED[name]
    assert count_dependence(tests, entry_point) is None


def test_a_name_the_context_binds_is_not_the_candidates():
    tests = "def check(candidate):\n    for x in helper(3):\n        assert candidate(x) == x\n"
    assert count_dependence(tests, "ident", context="def helper(n):\n    return range(n)\n") is None
    # unbound, the name may be one the candidate defines
    assert count_dependence(tests, "ident") == "an assert under `for` over the answer (tests line 2)"
    # the context's helper that calls the entry point gives the answer
    context = "def helper(n):\n    return ident(list(range(n)))\n"
    assert count_dependence(tests, "ident", context=context) == "an assert under `for` over the answer (tests line 2)"


def test_no_humaneval_check_lets_the_answer_choose_its_count_and_every_row_has_its_reference():
    # the only control flow in HumanEval's 164 checks: `for` over range() or a constant (HumanEval/32, 38, 44,
    # 50, 53) and one `if` on a seeded random coefficient (HumanEval/32)
    prompts = CodePrompts()
    rows = prompts.split("train") + prompts.split("val")
    assert len(rows) == 164
    assert [r["task_id"] for r in rows if count_dependence(r["tests"], r["entry_point"], r["prompt"])] == []
    assert all(r["reference"].startswith(r["prompt"]) and len(r["reference"]) > len(r["prompt"]) for r in rows)
