"""Code answer extraction and the unit-test reward (``reward=code``)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import logging
import re
from collections import Counter
from typing import Sequence

from mintrl.reward.base import Reward
from mintrl.sandbox import Outcome, Program, ProgramResult, Sandbox

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_OPEN_FENCE = re.compile(r"```[^\n`]*\n")
log = logging.getLogger(__name__)


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


def _imported_names(tree: ast.AST) -> set[str]:
    """The names ``tree``'s imports bind (modules and what is imported from them)."""
    return {(n.asname or n.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.alias)}


def _names_in(node: ast.AST | None) -> set[str]:
    """Every ``Name`` under ``node``."""
    return set() if node is None else {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _mentions(node: ast.AST | list | None, names: set[str]) -> bool:
    """Whether a ``Name`` of ``names`` occurs under ``node`` (a node or a list of nodes)."""
    nodes = node if isinstance(node, list) else [node]
    return any(isinstance(n, ast.Name) and n.id in names for root in nodes if root is not None for n in ast.walk(root))


def _pattern_captures(pattern: ast.pattern) -> set[str]:
    """The names a ``match`` pattern binds."""
    out: set[str] = set()
    for node in ast.walk(pattern):
        if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
    return out


def _flows(tree: ast.AST, mutable: set[str]) -> list[tuple[list[ast.AST], set[str]]]:
    """Where values flow to names in ``tree``: ``(sources, names)`` pairs, a name taking on what its sources
    use: assignments (``=``, ``+=``, ``:=``), loop and ``with`` targets, ``match`` captures, an
    ``except ... as`` name (from its ``try`` body), a function or class (from its body: calling it runs
    what it uses), and the receiver and plain-name arguments (of ``mutable``) of a call whose arguments
    use the sources (``results.append(candidate(1))`` changes ``results``)."""
    flows: list[tuple[list[ast.AST], set[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            flows.append(([node.value], set().union(*map(_names_in, node.targets))))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            flows.append(([node.value], _names_in(node.target)))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            flows.append(([node.iter], _names_in(node.target)))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            flows.extend(([i.context_expr], _names_in(i.optional_vars)) for i in node.items)
        elif isinstance(node, ast.Match):
            flows.append(([node.subject], set().union(*(_pattern_captures(c.pattern) for c in node.cases))))
        elif isinstance(node, _TRY):
            flows.extend((list(node.body), {h.name}) for h in node.handlers if h.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            flows.append(([node], {node.name}))
        elif isinstance(node, ast.Call) and (node.args or node.keywords):
            changed = {a.id for a in node.args if isinstance(a, ast.Name)}
            if isinstance(node.func, (ast.Attribute, ast.Subscript)):  # a method call may change its object
                receiver = node.func.value
                while isinstance(receiver, (ast.Attribute, ast.Subscript)):
                    receiver = receiver.value
                changed |= _names_in(receiver) if isinstance(receiver, ast.Name) else set()
            if changed & mutable:
                flows.append(([*node.args, *(k.value for k in node.keywords)], changed & mutable))
    return flows


def _closure(names: set[str], flows: list[tuple[list[ast.AST], set[str]]]) -> set[str]:
    """``names`` and every name a value flows to from them (``flows``, repeated until nothing is added)."""
    names = set(names)
    grown = True
    while grown:
        grown = False
        for sources, targets in flows:
            if not targets <= names and _mentions(sources, names):
                names |= targets
                grown = True
    return names


_TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))
# the counted asserts are those of the module and of functions named ``check`` (sandbox/checks.py)
_COUNTED_FUNCTION = "check"
_CONDITIONAL_EXPRESSIONS = (ast.BoolOp, ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _CountDependence:
    """Walks the counted code of a tests module (its own statements and the bodies of functions named
    ``check``) for the first place where the answer decides whether counted asserts run.

    Args:
        tainted: names whose value can derive from the candidate's answers.
        counters: names whose call runs counted asserts (``check`` and what calls or aliases it).
    """

    def __init__(self, tainted: set[str], counters: set[str]):
        self.tainted, self.counters = tainted, counters

    def counts(self, node: ast.AST | list | None) -> bool:
        """Whether ``node`` (an expression or statement; a list of them) holds an assert or names a counter
        (a call of it, or the function passed on: ``map(check, ...)``)."""
        nodes = node if isinstance(node, list) else [node]
        for root in nodes:
            for n in ast.walk(root) if root is not None else ():
                if isinstance(n, ast.Assert) or (isinstance(n, ast.Name) and n.id in self.counters):
                    return True
        return False

    def expression(self, node: ast.AST, line: str) -> str | None:
        """The dependence in an expression that runs unconditionally: a counter called in a short-circuit,
        conditional expression or comprehension that uses the answer, or passed on as a value (``map(check,
        candidate(3))``, ``all(...)``) in an expression that uses it."""
        called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
        uses_answer = _mentions(node, self.tainted)
        for n in ast.walk(node):
            if isinstance(n, _CONDITIONAL_EXPRESSIONS) and self.counts(n) and _mentions(n, self.tainted):
                return f"a counted call in a conditional expression on the answer {line}"
            if isinstance(n, ast.Name) and n.id in self.counters and id(n) not in called and uses_answer:
                return f"`{n.id}` passed on as a value in an expression that uses the answer {line}"
        return None

    def statements(self, body: list[ast.stmt], under: str | None) -> str | None:
        """The first dependence in ``body`` (``under``: the condition on the answer it runs under, if any)."""
        for statement in body:
            reason = self.statement(statement, under)
            if reason:
                return reason
        return None

    def statement(self, node: ast.stmt, under: str | None) -> str | None:
        """The dependence in one statement (None where there is none)."""
        line = f"(tests line {node.lineno})"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # a body runs where it is called (calls are checked); which ``check`` exists can be chosen here
            if under and node.name in self.counters:
                return f"a definition of `{node.name}` {under}"
            return None
        own = _own_expressions(node)
        if under and (isinstance(node, ast.Assert) or self.counts(own)):
            return f"{'an assert' if isinstance(node, ast.Assert) else 'a counted call'} {under}"
        if under and isinstance(node, (ast.Return, ast.Break, ast.Continue)):
            return f"a `{type(node).__name__.lower()}` {under}"
        reason = next(filter(None, (self.expression(e, line) for e in own)), None)
        if reason:
            return reason
        if isinstance(node, ast.If):
            inner = under or (f"under `if` on the answer {line}" if _mentions(node.test, self.tainted) else None)
            return self.statements(node.body, inner) or self.statements(node.orelse, inner)
        if isinstance(node, ast.While):
            inner = under or (f"under `while` on the answer {line}" if _mentions(node.test, self.tainted) else None)
            return self.statements(node.body, inner) or self.statements(node.orelse, inner)
        if isinstance(node, (ast.For, ast.AsyncFor)):
            inner = under or (f"under `for` over the answer {line}" if _mentions(node.iter, self.tainted) else None)
            return self.statements(node.body, inner) or self.statements(node.orelse, inner)
        if isinstance(node, ast.Match):
            decided = _mentions(
                [node.subject, *(c.guard for c in node.cases), *(c.pattern for c in node.cases)], self.tainted
            )
            inner = under or (f"under `match` on the answer {line}" if decided else None)
            return next(filter(None, (self.statements(c.body, inner) for c in node.cases)), None)
        if isinstance(node, _TRY):
            # an exception the answer causes skips the rest of the body (and picks the handler)
            caught = node.handlers and _mentions(list(node.body), self.tainted)
            inner = under or (f"in a `try` whose body uses the answer {line}" if caught else None)
            for body in (node.body, *(h.body for h in node.handlers), node.orelse):
                reason = self.statements(body, inner)
                if reason:
                    return reason
            return self.statements(node.finalbody, under)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            # a context manager may swallow the exception an answer causes, like a ``try``
            decided = _mentions([*(i.context_expr for i in node.items), *node.body], self.tainted)
            inner = under or (f"in a `with` whose body uses the answer {line}" if decided else None)
            return self.statements(node.body, inner)
        return None


def _own_expressions(node: ast.stmt) -> list[ast.AST]:
    """The parts of a statement that run when it starts (a compound statement's header; a simple statement whole)."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target, node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in node.items]
    if isinstance(node, ast.Match):
        return [node.subject]
    if isinstance(node, (*_TRY, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    return [node]


def _counted_roots(tree: ast.Module) -> list[list[ast.stmt]]:
    """The statement lists whose asserts the checks' process counts: the module's own statements, and the
    body of every function named ``check`` (any nesting: conservative)."""
    roots: list[list[ast.stmt]] = [tree.body]
    roots += [
        n.body
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == _COUNTED_FUNCTION
    ]
    return roots


def count_dependence(tests: str, entry_point: str | None = None, context: str = "") -> str | None:
    """Why the number of asserts ``tests`` run can depend on what the candidate answers, or None where it
    cannot: a counted assert (at module level or in a function named ``check``), or a call that runs
    some, under an ``if``, ``while``, ``match`` or ``for`` whose condition, subject or iterable uses a
    value derived from the candidate; after a ``return``/``break``/``continue`` under such a condition;
    in a ``try`` (with handlers) or ``with`` whose body uses such a value (an exception skips the rest);
    a call of ``check`` in a short-circuit, conditional expression or comprehension that uses one; a
    ``check`` defined under such a condition. The reason names the construct and its line.

    Decided on the syntax trees (nothing runs), conservatively: the candidate's names are the entry
    point, the parameters of every ``check`` and every name the tests use without the tests or the
    ``context`` binding it (and that is no builtin); a value flows to a name by assignment, loop or
    ``with`` target, ``match`` capture, ``except ... as``, a function or class that uses it (its name),
    or a call taking it (the call's receiver and its plain-name arguments: ``out.append(candidate(1))``).
    What escapes this (a helper that mutates a global, ``exec``) is the reason every row with a
    ``reference`` is bounded by the reference's count instead (:class:`CodeReward`).

    Raises:
        SyntaxError: ``tests`` or ``context`` is not valid Python (ValueError: it holds a null byte).
    """
    tree = ast.parse(tests)
    context_tree = ast.parse(context or "")
    bound = _bound_names(tree) | _bound_names(context_tree)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    tainted = {n for n in used if n not in bound and not hasattr(builtins, n)}
    tainted |= {entry_point} if entry_point else set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == _COUNTED_FUNCTION:
            args = node.args
            tainted |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
    mutable = bound - _imported_names(tree) - _imported_names(context_tree)
    flows = _flows(tree, mutable) + _flows(context_tree, mutable)
    tainted = _closure(tainted, flows)
    counters = _closure({_COUNTED_FUNCTION}, flows)
    walker = _CountDependence(tainted, counters)
    roots = _counted_roots(tree)
    if not any(walker.counts(root) for root in roots):
        return None  # no assert at all: the count is 0 whatever the answer (and the run fails)
    return next(filter(None, (walker.statements(root, None) for root in roots)), None)


def count_depends_on_answer(tests: str, entry_point: str | None = None, context: str = "") -> bool:
    """Whether the number of asserts ``tests`` run can depend on what the candidate answers
    (:func:`count_dependence` finds a reason).

    Raises:
        SyntaxError: ``tests`` or ``context`` is not valid Python (ValueError: it holds a null byte).
    """
    return count_dependence(tests, entry_point, context) is not None


class CodeReward(Reward):
    """Unit-test reward: 1 if every test passes (or the fraction of asserts passed), else 0.

    Programs run in the :class:`~mintrl.sandbox.Sandbox` (never in this process): the
    candidate's code and the tests run in two sandboxes, and the verdict is counted in the tests'
    one from the plain values the candidate's functions return (see
    :mod:`mintrl.sandbox.relay`); nothing the candidate prints, raises or does to its own
    process counts as a pass. Outcome
    counts since the last :meth:`metrics` call are logged per step as ``code/{passed,failed,
    timeout,crashed}``; a program the sandbox itself failed to run (full disk, no free process)
    gets no reward (None: no training signal, counted in ``reward/missing``) and is counted as
    ``code/sandbox_error``.

    The asserts that count: an assert that cannot fail (``assert True, "..."``) is not counted
    (:mod:`mintrl.sandbox.checks`). A row with a ``reference`` solution (every HumanEval and
    MBPP row of :class:`~mintrl.data.code.CodePrompts`) is bounded by it: the reference runs once per
    check (its number of asserts run, and of those that cannot fail, is kept) and a run whose counts
    differ from the reference's fails (reward 0, partial credit too). So the candidate does not choose
    how many asserts run, whatever the way (a loop over its answer, an ``if``/``match`` on it, a
    ``break`` or ``return`` it triggers, an exception it raises inside a ``try``); a check where two
    right answers run different numbers of asserts would fail the one the reference does not give (no
    HumanEval check's count depends on the answer). A reference run the sandbox could not finish
    (sandbox error, timeout, crash) gives its rows no reward this time (None, ``code/sandbox_error``)
    and runs again with the next batch. A reference that fails its own tests bounds nothing: its rows
    are treated as rows without one (logged once per check).

    A row without a (passing) reference: where the number of asserts can depend on the answer
    (:func:`count_dependence`, decided on the syntax trees, conservatively) the row is refused: no
    reward (None, counted as ``code/unbounded_check``; the reason is logged once per check with the
    row's task id and entry point), since a shorter answer (``return [2]`` against ``for x in
    candidate(10): assert ...``) would pass. Elsewhere the run's own count stands (PASSED still needs
    at least one assert to have run).

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
        # per check: (asserts run, of them trivial) by a passing reference; None: the reference fails its tests
        self._reference_counts: dict[tuple, tuple[int, int] | None] = {}
        self._unbounded: dict[tuple, str | None] = {}  # per check without a reference: why the count is open

    def __call__(self, responses: Sequence[str], items: Sequence) -> list[float | None]:
        """Rewards of ``N`` decoded responses for their prompt items (``item.entry`` = problem row).

        Raises:
            ValueError: a row without tests (:func:`build_program`).
        """
        entries = [item.entry for item in items]
        programs = [build_program(extract_code(r), entry) for r, entry in zip(responses, entries)]
        keys = [self._reference_key(p, entry) for p, entry in zip(programs, entries)]
        missing: dict[tuple, tuple[Program, dict]] = {}
        for key, entry in zip(keys, entries):
            if key is not None and key not in self._reference_counts and key not in missing:
                missing[key] = (build_program(entry["reference"], entry), entry)
        # a row refused already (no passing reference, a count the answer can change) is not run
        runs = [
            i for i, key in enumerate(keys) if not (self._unbounded_row(key) and self._open(programs[i], entries[i]))
        ]
        results = self.sandbox.run([programs[i] for i in runs] + [reference for reference, _ in missing.values()])
        for (key, (_, entry)), result in zip(missing.items(), results[len(runs) :]):
            self._keep_reference(key, entry, result)
        by_row = dict(zip(runs, results))
        rewards: list[float | None] = []
        for i, (program, entry, key) in enumerate(zip(programs, entries, keys)):
            result = by_row.get(i)
            if result is not None and (result.sandbox_error or (key is not None and key not in self._reference_counts)):
                self._counts["sandbox_error"] += 1
                rewards.append(None)  # says nothing about the program: no reward (no signal), not a zero
            elif self._unbounded_row(key) and self._open(program, entry):
                self._counts["unbounded_check"] += 1
                rewards.append(None)  # the answer could choose how many asserts run: no signal
            else:
                rewards.append(self._score(result, self._reference_counts.get(key) if key is not None else None))
        return rewards

    def _unbounded_row(self, key: tuple | None) -> bool:
        """Whether a row has no bound on its count: no reference, or one that fails its own tests."""
        return key is None or (key in self._reference_counts and self._reference_counts[key] is None)

    def _keep_reference(self, key: tuple, entry: dict, result: ProgramResult) -> None:
        """Keep the counts of a reference run that passed, or that it fails its own tests (then logged);
        a run the sandbox could not finish (error, timeout, crash) is not kept: it runs again next time."""
        if result.sandbox_error or result.outcome in (Outcome.TIMEOUT, Outcome.CRASHED):
            return
        if result.outcome is Outcome.PASSED:
            self._reference_counts[key] = (result.total, result.trivial)
            return
        self._reference_counts[key] = None
        log.warning(
            "code reward: the reference of %s fails its own tests (%d of %d asserts passed): its rows are scored "
            "as rows without a reference",
            _row_name(entry),
            result.passed,
            result.total,
        )

    def _score(self, result: ProgramResult, bound: tuple[int, int] | None) -> float:
        """The reward of one run (counted under its outcome); ``bound``: the reference's (asserts run, of
        them trivial), which the run's must equal (else the run fails), or None (the run's own count stands)."""
        if bound is not None and (result.total, result.trivial) != bound and result.outcome is Outcome.PASSED:
            result = dataclasses.replace(result, outcome=Outcome.FAILED)
        self._counts[result.outcome.value] += 1
        if self.fraction:
            return result.fraction if bound is None or (result.total, result.trivial) == bound else 0.0
        return float(result.outcome is Outcome.PASSED)

    @staticmethod
    def _reference_key(program: Program, entry: dict) -> tuple | None:
        """The key of a row's reference counts (its check and its ``reference`` solution), None for a row
        without a reference."""
        reference = entry.get("reference")
        if not isinstance(reference, str) or not reference.strip():
            return None
        return program.tests, program.entry_point, program.context, reference

    def _open(self, program: Program, entry: dict) -> str | None:
        """Why the number of asserts a row's check runs can depend on the answer (:func:`count_dependence`),
        None where it cannot (also where the tests or the context are not valid Python: the checks'
        process then fails the run). Decided once per check; the first time a reason is found it is
        logged with the row's task id and entry point."""
        key = (program.tests, program.entry_point, program.context)
        if key not in self._unbounded:
            try:
                reason = count_dependence(program.tests, program.entry_point, program.context)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                reason = None
            self._unbounded[key] = reason
            if reason:
                log.warning(
                    "code reward: %s is refused (no reward, code/unbounded_check): the number of asserts its "
                    "check runs can depend on the answer (%s) and no passing reference bounds it",
                    _row_name(entry),
                    reason,
                )
        return self._unbounded[key]

    def metrics(self) -> dict[str, float]:
        """Outcome counts since the last call (then reset): ``code/<outcome>``, ``code/sandbox_error`` and
        ``code/unbounded_check`` (rows refused: the answer could choose how many asserts run)."""
        keys = (*(o.value for o in Outcome), "sandbox_error", "unbounded_check")
        out = {f"code/{o}": float(self._counts[o]) for o in keys}
        self._counts.clear()
        return out


def _row_name(entry: dict) -> str:
    """A row named for the log: its task id and entry point."""
    return f"task {entry.get('task_id', '?')} (entry point {entry.get('entry_point') or 'none'})"
