"""Code answer extraction and the unit-test reward (``reward=code``)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from mintrl.reward.base import Reward
from mintrl.reward.sandbox import Outcome, Program, Sandbox

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_OPEN_FENCE = re.compile(r"```[^\n`]*\n")


def extract_code(response: str) -> str:
    """The program in a response: the last complete fenced code block (any language tag); else
    the text after an unclosed opening fence (a response cut at the length limit); else the whole
    response."""
    blocks = _FENCE.findall(response)
    if blocks:
        return blocks[-1]
    opened = list(_OPEN_FENCE.finditer(response))
    return response[opened[-1].end() :] if opened else response


def build_program(code: str, entry: dict) -> Program:
    """The program for one response and its problem row (``tests``, ``entry_point``, ``prompt``).

    HumanEval: the problem's prompt (imports, helpers, the documented header) comes first; code that
    defines ``entry_point`` itself follows on its own lines and replaces the header's empty
    function, otherwise the code is taken as the function's body (completion style). The prompt is
    also the tests' trusted ``context``: helpers the tests call (``encode_cyclic``) run the problem's
    own code, never the candidate's.

    Raises:
        ValueError: the row has no tests (``tests`` empty or blank): with nothing to check, every
            program that runs to the end would pass, so it is refused rather than scored.
    """
    tests = entry.get("tests")
    if not isinstance(tests, str) or not tests.strip():
        raise ValueError(f"a code problem without tests cannot be scored (task {entry.get('task_id', '?')})")
    prompt = entry.get("prompt") or ""
    name = entry.get("entry_point")
    if name and prompt:
        defines = re.search(rf"(?m)^\s*def\s+{re.escape(name)}\s*\(", code) is not None
        code = prompt + ("\n" if defines else "") + code
    return Program(code, tests, name, context=prompt)


class CodeReward(Reward):
    """Unit-test reward: 1 if every test passes (or the fraction of asserts passed), else 0.

    Programs run in the :class:`~mintrl.reward.sandbox.Sandbox` (never in this process): the
    candidate's code and the tests run in two sandboxes, and the verdict is counted in the tests'
    one from the plain values the candidate's functions return (see
    :mod:`mintrl.reward.sandbox.relay`); nothing the candidate prints, raises or does to its own
    process counts as a pass. Outcome
    counts since the last :meth:`metrics` call are logged per step as ``code/{passed,failed,
    timeout,crashed}``; a program the sandbox itself failed to run (full disk, no free process)
    gets no reward (None: no training signal, counted in ``reward/missing``) and is counted as
    ``code/sandbox_error``.

    Args:
        sandbox: the program runner.
        fraction: reward = fraction of asserts passed (partial credit) instead of all-or-nothing.

    Raises:
        RuntimeError: (first call) the sandbox cannot run programs on this machine.
        ValueError: a problem row without tests (:func:`build_program`; the code sources refuse
            such rows when they load); under the reward guard that row gets no reward (NaN) and the
            error is counted.
    """

    handles_code = True

    def __init__(self, sandbox: Sandbox, fraction: bool = False):
        self.sandbox, self.fraction = sandbox, fraction
        self._counts: Counter[str] = Counter()

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float | None]:
        """Rewards of ``N`` decoded responses for their prompt items (``item.entry`` = problem row)."""
        programs = [build_program(extract_code(r), item.entry) for r, item in zip(responses, items)]
        results = self.sandbox.run(programs)
        self._counts.update("sandbox_error" if r.sandbox_error else r.outcome.value for r in results)
        # a sandbox failure says nothing about the program: no reward (no signal), not a zero
        return [
            None if r.sandbox_error else r.fraction if self.fraction else float(r.outcome is Outcome.PASSED)
            for r in results
        ]

    def metrics(self) -> dict[str, float]:
        """Outcome counts since the last call (then reset): ``code/<outcome>``."""
        out = {f"code/{o}": float(self._counts[o]) for o in (*(o.value for o in Outcome), "sandbox_error")}
        self._counts.clear()
        return out
