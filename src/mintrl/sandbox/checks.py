"""Sandbox checks process: run a problem's tests against a candidate that lives in another process
(stdlib only).

Runs as the unprivileged sandbox user (``python -I -c <codec.py + this file>``) in a sandbox of its own
(its own PID namespace: the candidate's process cannot see, signal or read it). Its standard output
is the protocol channel to the runner; prints of the tests go to standard error.

1. Read ``{"tests": str, "context": str, "entry_point": str | null, "names": [str]}`` (one line).
2. ``exec`` the trusted ``context`` (a HumanEval problem's prompt: imports and helper functions) and
   then the tests in one namespace, every ``assert`` (at module level, in ``check``, and in loops or
   branches under them) rewritten to count itself as passed or failed instead of stopping the run;
   then ``check(<entry_point>)`` when an entry point is given (HumanEval format). An assert whose
   expression is a constant truthy literal (``assert True, "..."``) cannot fail: it is counted as
   passed and as ``trivial`` (left out of partial credit). The candidate's
   functions are proxies (the entry point, and each name the solution defines that is not a
   builtin and that the context does not define; the tests' own definitions replace them): a call
   sends its arguments to the runner, which asks the candidate's process, and returns the plain
   value that comes back (:mod:`mintrl.sandbox.codec`) or raises the candidate's exception
   (a builtin ``Exception`` type by name, except those that steer the tests' control flow or mean
   a limit of this process, else :class:`CandidateError`).
3. Answer ``{"done": [passed, total], "trivial": n}`` (``n``: the asserts that cannot fail, counted as
   passed in both; the partial credit leaves them out).

The verdict is computed here, from plain values, in a process the candidate's code never runs in.
What the candidate decides is only the values (and exceptions) its functions answer: a name it
defines never replaces a builtin the tests or the context call (``abs``, ``len``, ``sum``), and the
exception it raises is never ``StopIteration`` (which would end the tests' ``map`` or ``for`` loops
early, so that their asserts never run).
Exit codes: 0 ran to the end, 1 the tests raised outside an assert, 2 a resource limit was hit.
"""

import ast
import builtins
import copy
import errno
import json
import os
import sys

if "encode_value" not in globals():  # imported as a module; in the sandbox codec.py's text comes first
    from mintrl.sandbox.codec import decode_value, dumps_line, encode_value

RESOURCE_ERRNOS = {errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.EFBIG, errno.ENOSPC}

_WRAP = ast.parse(
    "try:\n    pass\nexcept BaseException as _mintrl_e:\n    _mintrl_fail(_mintrl_e)\nelse:\n    _mintrl_pass()"
).body[0]


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin ``Exception`` type, or its process ended."""


def is_resource_error(exc):
    """Whether an exception means a sandbox limit was hit in this process (crash, not a wrong answer)."""
    if isinstance(exc, (MemoryError, RecursionError)):
        return True
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


def cannot_fail(node):
    """Whether an ``assert`` node's expression is a constant truthy literal (``assert True, "..."``,
    ``assert 1``, ``assert (1, 2)``: decided on its syntax tree with ``ast.literal_eval``): such an
    assert passes whatever the candidate answers, so partial credit leaves it out (it would give
    credit to a solution that does nothing)."""
    try:
        return bool(ast.literal_eval(node.test))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


class CountAsserts(ast.NodeTransformer):
    """Wrap each ``assert`` in try/except/else that records its result (an assert that cannot fail,
    :func:`cannot_fail`, becomes a call that records it as passed and trivial)."""

    def visit_Assert(self, node):
        if cannot_fail(node):
            return ast.copy_location(ast.parse("_mintrl_trivial()").body[0], node)
        wrapped = copy.deepcopy(_WRAP)
        wrapped.body = [node]
        return ast.copy_location(wrapped, node)

    def visit_FunctionDef(self, node):
        # only the test driver's asserts are tests; helper functions keep plain asserts
        return self.generic_visit(node) if node.name == "check" else node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef


# builtin exceptions a proxy never raises: a limit of this process, or the end of an iteration
_NOT_RAISED = (MemoryError, RecursionError, StopIteration, StopAsyncIteration)


def candidate_exception(name, message):
    """The exception a proxy raises for the candidate's ``name: message``: the builtin ``Exception``
    subclass of that name (not ``MemoryError`` or ``RecursionError``, which mean a limit of this
    process, nor ``StopIteration`` or ``StopAsyncIteration``, which would end the tests' loops
    quietly), else :class:`CandidateError`."""
    cls = getattr(builtins, str(name), None)
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, _NOT_RAISED):
        return cls(message)
    return CandidateError(f"{name}: {message}")


def proxied(name, namespace, entry):
    """Whether the candidate's top-level ``name`` gets a proxy in the tests' ``namespace`` (after the
    context ran): the entry point always; another name only when it is a plain identifier, not a
    dunder, not a builtin (a proxy there would replace ``abs`` or ``len`` for the tests and the
    context's helpers) and not defined by the context."""
    if name == entry:
        return True
    return (
        type(name) is str
        and name.isidentifier()
        and not name.startswith("__")
        and not hasattr(builtins, name)
        and name not in namespace
    )


def undumpable():
    """Make this process undumpable (``prctl(PR_SET_DUMPABLE, 0)``; best effort: False where it
    failed): a process of the same user can then no longer open its ``/proc`` files (pipes, memory)
    or trace it. It matters only where no PID namespace hides this process from the candidate's."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # 4: PR_SET_DUMPABLE
    except (OSError, AttributeError, ImportError):
        return False


def main():
    undumpable()
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the tests' prints go to stderr, never into the protocol
    inbox = sys.stdin.buffer
    job = json.loads(inbox.readline())
    counts = [0, 0]
    trivial = [0]
    gone = [False]

    def proxy(name):
        def call(*args, **kwargs):
            if gone[0]:
                raise CandidateError("the candidate's process has ended")
            channel.write(dumps_line({"call": name, "args": encode_value(args), "kwargs": encode_value(kwargs)}))
            line = inbox.readline()
            try:
                answer = json.loads(line) if line else {"gone": True}
                if not isinstance(answer, dict):
                    raise ValueError("not an object")
                if "ok" in answer:
                    return decode_value(answer["ok"])
            except (ValueError, TypeError, RecursionError) as exc:  # the candidate wrote garbage on its channel
                raise CandidateError(f"malformed answer: {type(exc).__name__}") from None
            if answer.get("gone"):
                gone[0] = True
                raise CandidateError("the candidate's process has ended")
            raise candidate_exception(answer.get("raise"), str(answer.get("message", ""))[:300])

        call.__name__ = call.__qualname__ = name
        return call

    def record_pass():
        counts[0] += 1
        counts[1] += 1

    def record_trivial():
        record_pass()
        trivial[0] += 1

    def record_fail(exc):
        if not isinstance(exc, Exception) or is_resource_error(exc):
            raise exc
        counts[1] += 1

    namespace = {"__name__": "tests", "__builtins__": __builtins__}
    try:
        exec(compile(job.get("context") or "", "context.py", "exec"), namespace)
        entry = job.get("entry_point")
        for name in job["names"]:
            if proxied(name, namespace, entry):
                namespace[name] = proxy(name)
        tests = ast.fix_missing_locations(CountAsserts().visit(ast.parse(job["tests"], "tests.py")))
        namespace.update(_mintrl_pass=record_pass, _mintrl_fail=record_fail, _mintrl_trivial=record_trivial)
        exec(compile(tests, "tests.py", "exec"), namespace)
        if entry:
            namespace["check"](proxy(entry))
    except BaseException as exc:  # noqa: BLE001 - the outcome is the exit code
        code = 2 if is_resource_error(exc) else 1
        try:
            sys.stderr.write(f"{type(exc).__name__}: {str(exc)[:500]}\n")
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code)
    sys.stderr.flush()
    channel.write(dumps_line({"done": counts, "trivial": trivial[0]}))
    os._exit(0)


if __name__ == "__main__":
    main()
