"""What the sandbox runs and what a run produced: :class:`Program`, :class:`ProgramResult`, :class:`Outcome`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Outcome(str, Enum):
    """How a program ended: all tests passed, a test failed or the program raised, the wall-clock
    or CPU-time limit was hit, or it crashed (a signal, a memory/process/file-size limit, or a
    launcher failure)."""

    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CRASHED = "crashed"


@dataclass(frozen=True)
class Program:
    """One untrusted solution and its tests.

    Attributes:
        solution: Python source of the solution (untrusted).
        tests: Python source of the tests: ``assert`` statements (MBPP style) and/or a
            ``check(candidate)`` function (HumanEval style).
        entry_point: name of the function passed to ``check``; None when the tests are plain asserts.
        context: trusted code the tests' process runs before the tests (a HumanEval problem's prompt:
            its imports and helper functions, which the tests may call); never the candidate's code.
    """

    solution: str
    tests: str
    entry_point: str | None = None
    context: str = ""

    @property
    def has_checks(self) -> bool:
        """Whether there are tests to count (else the program only runs: the python_tool's calls)."""
        return bool(self.tests.strip() or self.entry_point)


@dataclass(frozen=True)
class ProgramResult:
    """What one run produced.

    Attributes:
        outcome: the :class:`Outcome`. passed, total: asserts that passed / ran (0/0 unless the
        tests ran to the end). trivial: of those, asserts that cannot fail (``assert True, "..."``:
        passed, and counted in ``passed`` and ``total``, but not in :attr:`fraction`). stdout, stderr: the first ``max_output_bytes`` of each (decoded,
        harness result line removed). wall_s: seconds the program ran (launcher's clock).
        sandbox_error: set when the sandbox itself failed (no temporary folder, no process could
        be started, the launcher left no status); the outcome is then CRASHED but says nothing about
        the program.
    """

    outcome: Outcome
    passed: int = 0
    total: int = 0
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    sandbox_error: str | None = None
    trivial: int = 0

    @property
    def fraction(self) -> float:
        """Fraction of asserts passed, not counting those that cannot fail (:attr:`trivial`) unless
        no other assert ran (0 when the tests did not run to the end or there are none)."""
        if self.total > self.trivial:
            return (self.passed - self.trivial) / (self.total - self.trivial)
        return self.passed / self.total if self.total else 0.0
