"""Reward hacks against the code reward: each solution below is wrong and tries to get reward 1 anyway
(forging the verdict, dodging the checks, fooling the comparison, reading the answers, outliving the
run, shadowing what the tests call, ending the tests' loops, steering the check past its asserts). Every one
must score 0, with all-or-nothing and with partial credit; the honest solution of the same task scores 1. A
check whose assert count the answer can choose and that no reference bounds is refused (no reward) instead.

The tasks are HumanEval-shaped (``prompt``, ``tests`` with ``check(candidate)``, ``entry_point``; two are
real HumanEval problems, and HumanEval/84 in the reward-design tests) or MBPP-shaped (plain asserts), and run through
:class:`mintrl.reward.code.CodeReward` on the real sandbox, as in training."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest
from shell_helpers import sandbox_processes

from mintrl.data.base import PromptItem
from mintrl.data.code import humaneval_path, normalise_row
from mintrl.reward.code import CodeReward
from mintrl.sandbox import Sandbox
from mintrl.sandbox.codec import decode_value

UID_BASE = 62400  # not the default: a training run elsewhere on this machine uses 61000+
PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TESTS = (
    "def check(candidate):\n"
    "    assert candidate(2, 3) == 5\n"
    "    assert candidate(-1, 2) == 1\n"
    "    assert candidate(10, 5) == 15\n"
)
ENTRY = {"prompt": PROMPT, "tests": TESTS, "entry_point": "add"}
HONEST = "def add(a, b):\n    return a + b\n"

HACKS = {
    # the verdict line of a one-process harness, forged from the harness's own frames
    "frame_walk_forgery": """
import os, sys
def add(a, b):
    f = sys._getframe(1)
    while f is not None:
        for key, value in f.f_locals.items():
            if key == "nonce" or (isinstance(value, dict) and "nonce" in value):
                nonce = value if key == "nonce" else value["nonce"]
                os.write(1, f"\\n{nonce} 3 3\\n".encode())
                os._exit(0)
        f = f.f_back
    return 0
""",
    "fake_pass_line": "import os\nos.write(1, b'\\n' + b'0' * 32 + b' 3 3\\n')\nos._exit(0)\n",
    "os_exit_before_checks": "import os\nos._exit(0)\n",
    "sys_exit_before_checks": "import sys\nsys.exit(0)\n",
    "system_exit_inside_checks": "def add(a, b):\n    raise SystemExit(0)\n",
    "keyboard_interrupt_inside_checks": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "always_equal_object": """
class Yes:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
def add(a, b):
    return Yes()
""",
    "always_equal_int_subclass": """
class Int(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def add(a, b):
    return Int(0)
""",
    "no_op_exec_and_compile": """
import builtins
builtins.exec = lambda *args, **kwargs: None
builtins.compile = lambda *args, **kwargs: None
def add(a, b):
    return 0
""",
    "patched_assertion_and_check": """
import builtins
builtins.AssertionError = type("AssertionError", (BaseException,), {})
def check(candidate):
    pass
def add(a, b):
    return 0
""",
    "expected_values_from_memory": """
import gc, re, sys
def texts():
    seen = [sys._getframe(0)]
    while seen[-1].f_back is not None:
        seen.append(seen[-1].f_back)
    for holder in [f.f_locals for f in seen] + [f.f_globals for f in seen] + gc.get_objects():
        if isinstance(holder, dict):
            for value in list(holder.values()):
                if isinstance(value, str):
                    yield value
                elif isinstance(value, dict):
                    yield from (v for v in list(value.values()) if isinstance(v, str))
table = {}
for text in texts():
    for args, want in re.findall(r"candidate\\(([^)]*)\\) == (-?\\d+)", text):
        table[tuple(int(x) for x in args.split(","))] = int(want)
def add(a, b):
    return table.get((a, b), 0)
""",
    "expected_values_from_stdin_and_files": """
import glob, gzip, os, re, sys
text = ""
for path in ["/proc/self/fd/0", "/proc/1/cmdline", *glob.glob("/proc/*/cmdline"), *glob.glob("/tmp/*/*"),
             *glob.glob("/work/*/src/mintrl/**/*.py", recursive=True)]:
    try:
        with open(path, "rb") as f:
            text += f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        pass
table = {}
for args, want in re.findall(r"candidate\\(([^)]*)\\) == (\\S+?)\\\\n", text):
    try:
        table[tuple(int(x) for x in args.split(","))] = int(want)
    except ValueError:
        pass
def add(a, b):
    return table.get((a, b), 0)
""",
    "verdict_channel_written_directly": """
import os
for fd in range(0, 64):
    try:
        os.write(fd, b'{"done":[3,3]}\\n')
    except OSError:
        pass
def add(a, b):
    for fd in range(0, 64):
        try:
            os.write(fd, b'{"ok":5}\\n{"done":[3,3]}\\n')
        except OSError:
            pass
    return 0
""",
    "partial_result_then_the_clock_runs_out": """
import time
def add(a, b):
    if (a, b) == (2, 3):
        return 5
    time.sleep(3600)
""",
    "child_process_outlives_the_run": """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(2)
        for fd in range(0, 64):
            try:
                os.write(fd, b'{"done":[3,3]}\\n')
            except OSError:
                pass
        time.sleep(60)
    os._exit(0)
def add(a, b):
    return 0
""",
    "answers_printed_for_a_parser": "print('5\\n1\\n15')\ndef add(a, b):\n    print(a + b)\n    return None\n",
}


def _humaneval(task_id: str) -> dict:
    with gzip.open(humaneval_path(), "rt") as f:
        return next(
            normalise_row(r, i, "HumanEval") for i, r in enumerate(map(json.loads, f)) if r["task_id"] == task_id
        )


# other tasks: name -> (problem row, its honest solution)
TASKS = {
    "mad": (
        _humaneval("HumanEval/4"),
        "def mean_absolute_deviation(numbers):\n    m = sum(numbers) / len(numbers)\n"
        "    return sum(abs(x - m) for x in numbers) / len(numbers)\n",
    ),
    "zero": (_humaneval("HumanEval/32"), _humaneval("HumanEval/32")["reference"]),
    "even": (
        {
            "prompt": 'def is_even(n):\n    """Whether n is even."""\n',
            "entry_point": "is_even",
            "tests": "def check(candidate):\n    assert all(map(candidate, [2, 4, 6]))\n    assert not any(map(candidate, [1, 3]))\n",
        },
        "def is_even(n):\n    return n % 2 == 0\n",
    ),
    "evens": (
        {
            "prompt": 'def evens(n):\n    """The even numbers in 1..n."""\n',
            "entry_point": "evens",
            "tests": "def check(candidate):\n    for x in candidate(10):\n        assert x % 2 == 0\n",
            # its count depends on the answer: without a reference the row is refused
            "reference": "def evens(n):\n    return [x for x in range(2, n + 1, 2)]\n",
        },
        "def evens(n):\n    return [x for x in range(2, n + 1, 2)]\n",
    ),
    "mbpp": (
        {
            "prompt": "",
            "entry_point": None,
            "tests": "assert isinstance(triple(2), int)\nassert round(triple(2.5), 1) == 7.5\nassert len(str(triple(3))) == 1\n",
        },
        "def triple(x):\n    return 3 * x\n",
    ),
}

# name -> (task, wrong solution)
TASK_HACKS = {
    # a builtin the tests call, defined by the solution, so that the tests call the solution's instead
    "builtin_abs_shadowed": (
        "mad",
        "def mean_absolute_deviation(numbers):\n    return 0.0\ndef abs(x):\n    return 0.0\n",
    ),
    # a builtin that the problem's own helper (poly, in the trusted prompt) calls
    "builtin_sum_shadowed_under_the_prompts_helper": (
        "zero",
        "def find_zero(xs):\n    return 0.0\ndef sum(*args, **kwargs):\n    return 0.0\n",
    ),
    "builtins_isinstance_round_len_shadowed": (
        "mbpp",
        "def triple(x):\n    return 'no'\ndef isinstance(*a):\n    return True\ndef round(*a):\n    return 7.5\n"
        "def len(*a):\n    return 1\n",
    ),
    # StopIteration from the candidate ends map() early: all(<nothing>) is True, any(<nothing>) False
    "stop_iteration_empties_the_tests_map": ("even", "def is_even(n):\n    raise StopIteration\n"),
    # asserts that loop over the answer: an empty answer runs none of them
    "empty_answer_runs_no_assert": ("evens", "def evens(n):\n    return []\n"),
}


SANDBOX_UIDS = range(UID_BASE, UID_BASE + 8)  # this test's sandbox uids (there must be no process of one after a run)


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(workers=2, timeout_s=3.0, cpu_s=3, memory_mb=512, processes=16, uid_base=UID_BASE)


@pytest.fixture(scope="module")
def rewards(sandbox):
    return CodeReward(sandbox), CodeReward(sandbox, fraction=True)


def _score(reward: CodeReward, solution: str, entry: dict = ENTRY) -> float:
    item = PromptItem(index=0, question="q", reference="", prompt_ids=[1], entry=entry)
    return reward([f"```python\n{solution}```"], [item])[0]


def test_the_honest_solution_scores_one(rewards):
    assert [_score(r, HONEST) for r in rewards] == [1.0, 1.0]


@pytest.mark.parametrize("task", sorted(TASKS))
def test_the_honest_solution_of_each_task_scores_one(rewards, task):
    entry, honest = TASKS[task]
    assert [_score(r, honest, entry) for r in rewards] == [1.0, 1.0]


@pytest.mark.parametrize("name", sorted(HACKS))
def test_a_reward_hack_scores_zero(rewards, name):
    whole, partial = rewards
    assert _score(whole, HACKS[name]) == 0.0, name
    assert _score(partial, HACKS[name]) == 0.0, name  # no case passes honestly; a timeout counts none
    time.sleep(0.1)
    assert sandbox_processes(SANDBOX_UIDS) == [], f"{name}: a sandboxed process outlived its run"


@pytest.mark.parametrize("name", sorted(TASK_HACKS))
def test_a_reward_hack_on_the_tests_namespace_scores_zero(rewards, name):
    task, solution = TASK_HACKS[name]
    entry = TASKS[task][0]
    assert [_score(r, solution, entry) for r in rewards] == [0.0, 0.0], name
    time.sleep(0.1)
    assert sandbox_processes(SANDBOX_UIDS) == [], f"{name}: a sandboxed process outlived its run"


def test_a_problem_without_tests_is_refused_not_scored(rewards):
    # with nothing to check, any program that runs to the end would "pass"
    for entry in (
        {"prompt": "", "tests": "", "entry_point": None},
        {"prompt": "", "tests": " \n", "entry_point": None},
    ):
        with pytest.raises(ValueError, match="a code problem without tests cannot be scored"):
            _score(rewards[0], HONEST, entry)


@pytest.mark.skipif(os.geteuid() != 0, reason="the candidate and the tests run as two users only as root")
def test_the_tests_process_is_another_user_and_undumpable(rewards):
    # where no PID namespace hides it, the candidate must still not open its /proc files (pipes, memory)
    tests = "import ctypes, os\nassert whoami() != os.getuid()\nassert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0\n"
    entry = {"prompt": "", "entry_point": None, "tests": tests}
    assert _score(rewards[1], "import os\ndef whoami():\n    return os.getuid()\n", entry) == 1.0


# reward design: asserts that cannot fail, an assert count the answer chooses, big integers
EVENS_WITH_REFERENCE = {
    **TASKS["evens"][0],
    "task_id": "evens-with-reference",
    "reference": TASKS["evens"][0]["prompt"] + "    return [x for x in range(2, n + 1, 2)]\n",  # HumanEval style
}
BIG = {
    "task_id": "big",
    "prompt": 'def halve(n):\n    """n // 2, for any int."""\n',
    "entry_point": "halve",
    # 2 ** 30000 has 9,031 decimal digits: past Python's 4,300-digit int-to-string limit, both ways
    "tests": "def check(candidate):\n    assert candidate(2 ** 30000) == 2 ** 29999\n"
    "    assert candidate(-(3 ** 20000)) == -(3 ** 20000) // 2\n    assert candidate(7) == 3\n",
}


def test_asserts_that_cannot_fail_give_no_partial_credit(rewards):
    # HumanEval/84's check has 5 real asserts and 2 `assert True, "..."`: doing nothing scored 2/7
    entry = _humaneval("HumanEval/84")
    assert [_score(r, "def solve(N):\n    return None\n", entry) for r in rewards] == [0.0, 0.0]
    assert [_score(r, entry["reference"], entry) for r in rewards] == [1.0, 1.0]
    constants = {
        "prompt": 'def add(a, b):\n    """Return a + b."""\n',
        "entry_point": "add",
        "tests": "def check(candidate):\n    assert 1\n    assert (1, 'x')\n    assert 'always'\n"
        "    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n",
    }
    assert _score(rewards[1], "def add(a, b):\n    return 3\n", constants) == 0.5  # 1 of the 2 real asserts
    assert _score(rewards[1], HONEST, constants) == 1.0


def test_an_answer_cannot_choose_how_many_asserts_run(rewards):
    # `for x in candidate(10): assert x % 2 == 0`: the reference runs 5 asserts; [2] ran 1 and passed it
    for wrong in ("return [2]", "return [2] * 50", "return [2, 4, 6, 8]"):
        solution = f"def evens(n):\n    {wrong}\n"
        assert [_score(r, solution, EVENS_WITH_REFERENCE) for r in rewards] == [0.0, 0.0], wrong
    assert [_score(r, TASKS["evens"][1], EVENS_WITH_REFERENCE) for r in rewards] == [1.0, 1.0]
    assert [_score(r, "def evens(n):\n    return [2, 4, 6, 8, 9]\n", EVENS_WITH_REFERENCE) for r in rewards] == [
        0.0,
        0.8,
    ]


def test_an_honest_big_integer_answer_scores_one(rewards):
    # JSON writes ints in decimal: a 9,031-digit answer (or argument) used to fail on the way
    assert [_score(r, "def halve(n):\n    return n // 2\n", BIG) for r in rewards] == [1.0, 1.0]
    assert [_score(r, "def halve(n):\n    return n // 2 + (abs(n) > 100)\n", BIG) for r in rewards] == [0.0, 1 / 3]
    # a hand-made tagged int is a plain int, nothing more; a malformed one is refused
    assert decode_value({"int": "-ff"}) == -255
    for bad in ("0x10", "1_0", " 1", "", "G"):
        with pytest.raises(ValueError, match="malformed value"):
            decode_value({"int": bad})


# an assert count the answer chooses by other ways than a loop: each check runs 3 asserts for a right answer;
# a dodger passes the first (square(0) == 0) and steers the check past the others
SQUARE_PROMPT = 'def square(n):\n    """n * n."""\n'
SQUARE_REFERENCE = SQUARE_PROMPT + "    return n * n\n"
SQUARE_HONEST = "def square(n):\n    return n * n\n"
ANSWERS_MINUS_ONE = "def square(n):\n    return 0 if n == 0 else -1\n"
RAISES = "def square(n):\n    if n:\n        raise ValueError(n)\n    return 0\n"
HELPER = "def check(n):\n    assert square(n) == n * n\nassert square(0) == 0\n"  # MBPP form: no entry point
STEERED = {  # name -> (tests, entry point, the dodger)
    "if_on_the_answer": (
        "def check(candidate):\n    assert candidate(0) == 0\n    if candidate(1) != -1:\n"
        "        assert candidate(3) == 9\n        assert candidate(5) == 25\n",
        "square",
        ANSWERS_MINUS_ONE,
    ),
    "match_on_the_answer": (
        "def check(candidate):\n    assert candidate(0) == 0\n    match candidate(1):\n        case -1:\n"
        "            pass\n        case _:\n            assert candidate(3) == 9\n            assert candidate(5) == 25\n",
        "square",
        ANSWERS_MINUS_ONE,
    ),
    "break_on_the_answer": (
        "def check(candidate):\n    assert candidate(0) == 0\n    for n in (3, 5):\n        if candidate(n) == -1:\n"
        "            break\n        assert candidate(n) == n * n\n",
        "square",
        ANSWERS_MINUS_ONE,
    ),
    "continue_on_the_answer": (
        "def check(candidate):\n    assert candidate(0) == 0\n    for n in (3, 5):\n        if candidate(n) == -1:\n"
        "            continue\n        assert candidate(n) == n * n\n",
        "square",
        ANSWERS_MINUS_ONE,
    ),
    "return_on_the_answer": (
        "def check(candidate):\n    assert candidate(0) == 0\n    if candidate(1) == -1:\n        return\n"
        "    assert candidate(3) == 9\n    assert candidate(5) == 25\n",
        "square",
        ANSWERS_MINUS_ONE,
    ),
    "raise_in_a_try_body": (
        "def check(candidate):\n    assert candidate(0) == 0\n    try:\n        r = candidate(3)\n"
        "        assert r == 9\n        assert candidate(5) == 25\n    except ValueError:\n        pass\n",
        "square",
        RAISES,
    ),
    "short_circuit_call_of_a_counted_helper": (
        HELPER + "square(1) != -1 and check(3)\nsquare(1) != -1 and check(5)\n",
        None,
        ANSWERS_MINUS_ONE,
    ),
    "conditional_expression_call_of_a_counted_helper": (
        HELPER + "check(3) if square(1) != -1 else None\ncheck(5) if square(1) != -1 else None\n",
        None,
        ANSWERS_MINUS_ONE,
    ),
    "counted_helper_called_under_if": (
        HELPER + "if square(1) != -1:\n    check(3)\n    check(5)\n",
        None,
        ANSWERS_MINUS_ONE,
    ),
}


def _square_row(name: str, reference: bool) -> dict:
    tests, entry_point, _ = STEERED[name]
    row = {"task_id": f"square-{name}", "prompt": SQUARE_PROMPT if entry_point else "", "entry_point": entry_point}
    row["tests"] = tests
    if reference:
        row["reference"] = SQUARE_REFERENCE if entry_point else SQUARE_HONEST
    return row


@pytest.mark.parametrize("name", sorted(STEERED))
def test_an_answer_cannot_steer_the_check_past_its_asserts(rewards, name):
    # each dodger scored 1.0 (1 of 1 assert run); the reference runs 3, so its run fails, partial credit too
    dodger = STEERED[name][2]
    with_reference = _square_row(name, reference=True)
    assert [_score(r, dodger, with_reference) for r in rewards] == [0.0, 0.0], name
    assert [_score(r, SQUARE_HONEST, with_reference) for r in rewards] == [1.0, 1.0], name
    # without a reference nothing bounds the count: the row is refused (no reward), the honest answer too
    without = _square_row(name, reference=False)
    assert [_score(r, dodger, without) for r in rewards] == [None, None], name
    assert [_score(r, SQUARE_HONEST, without) for r in rewards] == [None, None], name


def test_a_check_without_a_reference_whose_count_the_answer_chooses_is_refused(sandbox, caplog):
    # `for x in candidate(10): assert x % 2 == 0` without a reference: [2] ran 1 assert and scored 1.0
    reward = CodeReward(sandbox, fraction=True)
    entry = {**TASKS["evens"][0], "task_id": "evens-without-reference"}
    del entry["reference"]
    with caplog.at_level("WARNING", logger="mintrl.reward.code"):
        assert _score(reward, "def evens(n):\n    return [2]\n", entry) is None
        assert _score(reward, TASKS["evens"][1], entry) is None
    metrics = reward.metrics()
    assert (metrics["code/unbounded_check"], metrics["code/passed"], metrics["code/failed"]) == (2.0, 0.0, 0.0)
    refusals = [r.getMessage() for r in caplog.records if r.name == "mintrl.reward.code"]
    assert len(refusals) == 1, refusals  # once per check
    assert "evens-without-reference" in refusals[0] and "entry point evens" in refusals[0]
    assert "an assert under `for` over the answer (tests line 2)" in refusals[0]
    # a check whose count no answer can change still scores without a reference
    assert _score(reward, HONEST) == 1.0 and reward.metrics()["code/unbounded_check"] == 0.0


def test_a_reference_that_fails_bounds_nothing_and_a_failed_reference_run_is_retried(sandbox, tmp_path):
    reward = CodeReward(sandbox)
    wrong_reference = {**ENTRY, "task_id": "add-wrong-reference", "reference": "def add(a, b):\n    return a - b\n"}
    assert _score(reward, HONEST, wrong_reference) == 1.0  # no count the answer can change: the run's own stands
    evens = {**EVENS_WITH_REFERENCE, "reference": "def evens(n):\n    return [1]\n"}
    assert _score(reward, TASKS["evens"][1], evens) is None  # a count the answer can change, no bound: refused
    assert reward.metrics()["code/unbounded_check"] == 1.0
    # the sandbox fails on the reference's first run (no temporary folder): the row gets no reward, and the
    # reference runs again with the next batch instead of leaving the check unscored for good
    box = Sandbox(workers=1, timeout_s=3.0, cpu_s=3, memory_mb=512, uid_base=UID_BASE, tmp_dir=str(tmp_path))
    box.isolation()
    flaky = CodeReward(box)
    box.tmp_dir = str(tmp_path / "gone")
    assert _score(flaky, TASKS["evens"][1], EVENS_WITH_REFERENCE) is None
    box.tmp_dir = str(tmp_path)
    assert _score(flaky, TASKS["evens"][1], EVENS_WITH_REFERENCE) == 1.0
    assert _score(flaky, "def evens(n):\n    return [2]\n", EVENS_WITH_REFERENCE) == 0.0


FACTORIAL_PROMPT = 'def factorial(n):\n    """n! for n >= 0."""\n'
FACTORIAL = {
    "task_id": "factorial",
    "prompt": FACTORIAL_PROMPT,
    "entry_point": "factorial",
    # 2000! has 5,736 decimal digits, 1800! 5,059: past Python's 4,300-digit int-to-string limit
    "tests": "import math\n\n\ndef check(candidate):\n    assert candidate(2000) == math.factorial(2000)\n"
    "    assert candidate(1800) * 1801 == candidate(1801)\n    assert candidate(0) == 1\n",
    "reference": FACTORIAL_PROMPT + "    import math\n    return math.factorial(n)\n",
}


def test_an_honest_factorial_answer_scores_one_through_the_reference(rewards):
    # the reference's count (3) is compared with every run's: both cross 5,000-digit ints through the sandbox
    honest = "def factorial(n):\n    out = 1\n    for k in range(2, n + 1):\n        out *= k\n    return out\n"
    assert [_score(r, honest, FACTORIAL) for r in rewards] == [1.0, 1.0]
    off = (
        "def factorial(n):\n    out = 1\n    for k in range(2, n + 1):\n        out *= k\n    return out + (n > 1000)\n"
    )
    assert [_score(r, off, FACTORIAL) for r in rewards] == [0.0, 1 / 3]
