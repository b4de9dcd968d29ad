"""Sandbox harness of a program without tests (stdlib only): run it in one process, say it ran to the end.

Used for programs that carry no verdict (the python_tool environment's calls: their output is what
the agent reads; the episode's reward is scored outside the sandbox). A program with tests never
runs here: :mod:`mintrl.reward.sandbox.relay` runs it as two processes, so that the verdict is
computed where the candidate cannot reach.

Runs as the unprivileged sandbox user (``python -I -c <this file>``), reads one JSON object from stdin:
``{"solution": str, "tests": str, "entry_point": str | null, "nonce": str}`` (``tests`` empty here).

1. ``exec`` the solution in a fresh namespace (``__name__ == "__main__"`` is *not* set).
2. ``exec`` the tests, if any, asserts counted (kept for direct use of this file).
3. Print ``<nonce> <passed> <total>`` as the last stdout line. The nonce is not in the program's
   text, but the program runs in this process and can find it: the line only says that the program
   ran to the end, which the program could also claim by itself; nothing is scored on it.

Exit codes: 0 ran to the end, 1 the program raised, 2 a resource limit was hit (memory, processes,
open files, file size).
"""

import ast
import copy
import errno
import json
import os
import sys

RESOURCE_ERRNOS = {errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.EFBIG, errno.ENOSPC}

_WRAP = ast.parse(
    "try:\n    pass\nexcept BaseException as _mintrl_e:\n    _mintrl_fail(_mintrl_e)\nelse:\n    _mintrl_pass()"
).body[0]


def is_resource_error(exc):
    """Whether an exception means a sandbox limit was hit (crash, not a wrong answer)."""
    if isinstance(exc, (MemoryError, RecursionError)):
        return True
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


class _CountAsserts(ast.NodeTransformer):
    """Wrap each ``assert`` in try/except/else that records its result."""

    def visit_Assert(self, node):
        wrapped = copy.deepcopy(_WRAP)
        wrapped.body = [node]
        return ast.copy_location(wrapped, node)

    def visit_FunctionDef(self, node):
        # only the test driver's asserts are tests; helper functions keep plain asserts
        return self.generic_visit(node) if node.name == "check" else node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef


def main():
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    nonce, counts = job.pop("nonce"), [0, 0]

    def record_pass():
        counts[0] += 1
        counts[1] += 1

    def record_fail(exc):
        if not isinstance(exc, Exception) or is_resource_error(exc):
            raise exc
        counts[1] += 1

    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(job["solution"], "solution.py", "exec"), namespace)
        tests = ast.fix_missing_locations(_CountAsserts().visit(ast.parse(job["tests"], "tests.py")))
        namespace.update(_mintrl_pass=record_pass, _mintrl_fail=record_fail)
        exec(compile(tests, "tests.py", "exec"), namespace)
        if job.get("entry_point"):
            namespace["check"](namespace[job["entry_point"]])
    except BaseException as exc:  # noqa: BLE001 - the outcome is the exit code
        code = 2 if is_resource_error(exc) else 1
        try:
            sys.stderr.write(f"{type(exc).__name__}: {str(exc)[:500]}\n")
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code)
    sys.stdout.flush()
    os.write(1, f"\n{nonce} {counts[0]} {counts[1]}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
