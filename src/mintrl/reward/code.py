"""Code answer extraction and the unit-test reward (``reward=code``)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
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


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name ``tree`` binds anywhere (assignments, loop targets, definitions, imports, parameters)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _counted_statements(tree: ast.Module) -> list[ast.stmt]:
    """The statements whose asserts the checks' process counts: the module's own and those of
    ``check`` (not of other functions or classes, whose asserts stay plain)."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "check":
                out.extend(node.body)
        elif not isinstance(node, ast.ClassDef):
            out.append(node)
    return out


def count_depends_on_answer(tests: str, entry_point: str | None = None, context: str = "") -> bool:
    """Whether the number of asserts ``tests`` run can depend on what the candidate answers: a counted
    assert (at module level or in ``check``) inside a ``for`` loop whose iterable, or a ``while`` loop
    whose condition, uses a value derived from the candidate (``for x in candidate(10): assert ...``).

    Decided on the syntax trees (nothing runs), conservatively: the candidate's names are the entry
    point, ``check``'s parameters and every name the tests use without the tests or the ``context``
    binding it (and that is no builtin); a name assigned (or looped over, or bound by ``with`` or
    ``:=``) from an expression that uses a candidate-derived name is candidate-derived in turn.

    Raises:
        SyntaxError: ``tests`` or ``context`` is not valid Python (ValueError: it holds a null byte).
    """
    tree = ast.parse(tests)
    bound = _bound_names(tree) | _bound_names(ast.parse(context or ""))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    tainted = {n for n in used if n not in bound and not hasattr(builtins, n)}
    tainted |= {entry_point} if entry_point else set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "check":
            tainted |= {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}

    def uses(expr: ast.AST | None) -> bool:
        return expr is not None and any(isinstance(n, ast.Name) and n.id in tainted for n in ast.walk(expr))

    def targets(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    flows: list[tuple[ast.AST, list[ast.AST]]] = []  # (source expression, bound targets)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            flows.append((node.value, node.targets))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            flows.append((node.value, [node.target]))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            flows.append((node.iter, [node.target]))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            flows.extend((i.context_expr, [i.optional_vars]) for i in node.items if i.optional_vars is not None)
    grown = True
    while grown:
        grown = False
        for source, bound_targets in flows:
            if uses(source):
                new = set().union(*(targets(t) for t in bound_targets)) - tainted
                if new:
                    tainted |= new
                    grown = True

    def has_assert(statements: list[ast.stmt]) -> bool:
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, ast.Assert):
                    return True
        return False

    for statement in _counted_statements(tree):
        for node in ast.walk(statement):  # a nested function's loops too: conservative
            if isinstance(node, (ast.For, ast.AsyncFor)) and uses(node.iter) and has_assert(node.body + node.orelse):
                return True
            if isinstance(node, ast.While) and uses(node.test) and has_assert(node.body + node.orelse):
                return True
    return False


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

    The asserts that count: an assert that cannot fail (``assert True, "..."``) is not counted
    (:mod:`mintrl.reward.sandbox.checks`). Where the number of asserts that run can depend on the
    answer (:func:`count_depends_on_answer`: ``for x in candidate(10): assert ...``) and the row has
    a ``reference`` solution, the reference runs once per check (its count is kept) and a run whose
    count differs from the reference's fails (reward 0, partial credit too): the candidate does not
    choose how many asserts run. A reference that does not pass its own tests bounds nothing: its
    rows get no reward (None, counted as ``code/sandbox_error``). Without a ``reference`` the run's
    own count stands (PASSED still needs at least one assert to have run).

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
        self._reference_totals: dict[tuple, int | None] = {}  # asserts the reference ran, per check

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float | None]:
        """Rewards of ``N`` decoded responses for their prompt items (``item.entry`` = problem row).

        Raises:
            ValueError: a row without tests (:func:`build_program`).
        """
        programs = [build_program(extract_code(r), item.entry) for r, item in zip(responses, items)]
        bounds = [self._reference_key(p, item.entry) for p, item in zip(programs, items)]
        missing = {k: ref for k, ref in (b for b in bounds if b is not None) if k not in self._reference_totals}
        results = self.sandbox.run(programs + list(missing.values()))
        for key, result in zip(missing, results[len(programs) :]):
            # the reference must pass its own tests for its count to bound anyone's; else the row is unscored
            ok = not result.sandbox_error and result.outcome is Outcome.PASSED
            self._reference_totals[key] = result.total if ok else None
        rewards: list[float | None] = []
        for result, bound in zip(results[: len(programs)], bounds):
            total = self._reference_totals[bound[0]] if bound is not None else result.total
            if result.sandbox_error or total is None:
                self._counts["sandbox_error"] += 1
                rewards.append(None)  # says nothing about the program: no reward (no signal), not a zero
                continue
            if result.total != total and result.outcome is Outcome.PASSED:
                result = dataclasses.replace(result, outcome=Outcome.FAILED)
            self._counts[result.outcome.value] += 1
            if self.fraction:
                rewards.append(result.fraction if result.total == total else 0.0)
            else:
                rewards.append(float(result.outcome is Outcome.PASSED))
        return rewards

    def _reference_key(self, program: Program, entry: dict) -> tuple[tuple, Program] | None:
        """For a check whose assert count can depend on the answer (:func:`count_depends_on_answer`)
        and a row with a ``reference`` solution: the key of the reference's count and the reference's
        program; else None (the run's own count stands, also where the tests or the context are not
        valid Python: the checks' process then fails the run).
        """
        reference = entry.get("reference")
        if not isinstance(reference, str) or not reference.strip():
            return None
        try:
            depends = count_depends_on_answer(program.tests, program.entry_point, program.context)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not depends:
            return None
        key = (program.tests, program.entry_point, program.context, reference)
        return key, build_program(reference, entry)

    def metrics(self) -> dict[str, float]:
        """Outcome counts since the last call (then reset): ``code/<outcome>``."""
        out = {f"code/{o}": float(self._counts[o]) for o in (*(o.value for o in Outcome), "sandbox_error")}
        self._counts.clear()
        return out
