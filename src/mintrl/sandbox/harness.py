"""Sandbox harness of a program without tests (stdlib only): run it in one process, say it ran to the end.

Used for programs that carry no verdict (the python_tool environment's calls: their output is what
the agent reads; the episode's reward is scored outside the sandbox). A program with tests never
runs here and this file counts no test: :mod:`mintrl.sandbox.relay` runs such a program as two
processes, so that the verdict is computed where the candidate cannot reach.

Threat model: the program runs in this very process, so it can read, change or forge anything this
file does (its frames, the nonce, the end line, the exit code). Nothing here is therefore a verdict:
the end line only says "ran to the end", which the program could also claim by itself, and
:class:`~mintrl.sandbox.Sandbox` gives a program without tests no pass count (``0/0``). What
contains the program is the launcher around this process (namespaces, limits, the wall-clock kill).

Runs as the unprivileged sandbox user (``python -I -c <this file>``), reads one JSON object from stdin:
``{"solution": str, "nonce": str, ...}`` (other keys ignored).

1. ``exec`` the solution in a fresh namespace (``__name__ == "__main__"`` is *not* set).
2. Print ``<nonce>`` as the last stdout line.

Exit codes: 0 ran to the end, 1 the program raised, 2 a resource limit was hit (memory, processes,
open files, file size).
"""

import errno
import json
import os
import sys

RESOURCE_ERRNOS = {errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.EFBIG, errno.ENOSPC}


def is_resource_error(exc):
    """Whether an exception means a sandbox limit was hit (crash, not a wrong answer)."""
    if isinstance(exc, (MemoryError, RecursionError)):
        return True
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


def main():
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    nonce = job.pop("nonce")
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(job["solution"], "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the outcome is the exit code
        code = 2 if is_resource_error(exc) else 1
        try:
            sys.stderr.write(f"{type(exc).__name__}: {str(exc)[:500]}\n")
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code)
    sys.stdout.flush()
    os.write(1, f"\n{nonce}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
