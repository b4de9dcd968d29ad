"""Code domain text: answer extraction, program assembly and code step splitting
(sources, the sandboxed reward and training on code: integration/test_code.py)."""

from __future__ import annotations

import pytest

from mintrl.reward import build_program, extract_code
from mintrl.sandbox import Sandbox
from mintrl.text.steps import split_steps

UID_BASE = 62000


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(workers=2, timeout_s=3.0, cpu_s=3, memory_mb=512, uid_base=UID_BASE)


@pytest.mark.parametrize(
    "response, code",
    [
        ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
        ("```\nx = 1\n```\ntext\n```py\nx = 2\n```", "x = 2\n"),  # the last block, any tag
        ("Sure.\n```python\ndef f():\n    return", "def f():\n    return"),  # cut at the length limit
        ("def f():\n    return 3\n", "def f():\n    return 3\n"),  # no fence: the whole response
        ("", ""),
    ],
)
def test_extract_code(response, code):
    assert extract_code(response) == code


def test_build_program_prepends_the_prompt_for_full_functions_and_bodies():
    entry = {
        "prompt": 'from typing import List\n\ndef f(xs: List[int]) -> int:\n    """Sum."""\n',
        "tests": "T",
        "entry_point": "f",
    }
    full = build_program("def f(xs):\n    return sum(xs)\n", entry)
    assert (
        full.solution == entry["prompt"] + "\ndef f(xs):\n    return sum(xs)\n"
        and full.entry_point == "f"
        and full.tests == "T"
    )
    body = build_program("    return sum(xs)\n", entry)
    assert body.solution == entry["prompt"] + "    return sum(xs)\n"
    mbpp = build_program("def g():\n    pass\n", {"prompt": "", "tests": "assert g() is None", "entry_point": None})
    assert mbpp.solution == "def g():\n    pass\n" and mbpp.entry_point is None


def test_code_steps_split_at_fences_and_blank_lines():
    text = "Plan: loop.\n\n```python\ndef f(x):\n    y = x + 1\n\n    return y\n```\nDone."
    steps = [s.text for s in split_steps(text)]
    assert steps == [
        "Plan: loop.\n\n",
        "```python\n",
        "def f(x):\n    y = x + 1\n\n",
        "    return y\n",
        "```\n",
        "Done.",
    ]
