"""Sandbox candidate server: run one untrusted solution and answer calls to its functions (stdlib only).

Runs as the unprivileged sandbox user (``python -I -c <codec.py + this file>``), in a sandbox of its
own. Its standard output is the protocol channel to the runner; the solution's own prints go to
standard error (fd 1 is pointed at fd 2 before the solution runs).

1. Read ``{"solution": str}`` (one line), ``exec`` the solution in a fresh namespace (``__name__`` is
   not ``"__main__"``); then answer ``{"ready": [names]}``: the solution's top-level callables.
2. Then, for each request line ``{"call": name, "args": ..., "kwargs": ...}``, call the function and
   answer ``{"ok": <value>}`` or ``{"raise": <exception type name>, "message": str}``; values cross
   as plain data only (:mod:`mintrl.sandbox.codec`). End at end of input.

The tests and their expected values are never sent here: this process cannot read, forge or reach
the verdict, which the tests' own process (``harness.py``) computes from the values it receives.
Exit codes: 1 the solution raised, 2 it hit a resource limit.
"""

import errno
import json
import os
import sys

if "encode_value" not in globals():  # imported as a module; in the sandbox codec.py's text comes first
    from mintrl.sandbox.codec import decode_value, dumps_line, encode_value

_RESOURCE_ERRNOS = {errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.EFBIG, errno.ENOSPC}


def _is_resource_error(exc):
    if isinstance(exc, (MemoryError, RecursionError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or replaced stream is the solution's business
            pass


def serve():
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the solution's prints go to stderr, never into the protocol
    requests = sys.stdin.buffer
    job = json.loads(requests.readline())
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(job["solution"], "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the outcome is the exit code
        try:
            sys.stderr.write(f"{type(exc).__name__}: {str(exc)[:500]}\n")
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(2 if _is_resource_error(exc) else 1)
    _flush()
    names = sorted(k for k, v in list(namespace.items()) if callable(v) and type(k) is str and not k.startswith("__"))
    channel.write(dumps_line({"ready": names}))
    for line in requests:
        request = json.loads(line)
        try:
            function = namespace[request["call"]]
            args, kwargs = decode_value(request["args"]), decode_value(request["kwargs"])
            answer = {"ok": encode_value(function(*args, **kwargs))}
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are wrong answers too
            answer = {"raise": type(exc).__name__, "message": str(exc)[:300]}
        try:
            message = dumps_line(answer)
        except (TypeError, ValueError) as exc:
            message = dumps_line({"raise": "TypeError", "message": str(exc)[:300]})
        _flush()
        channel.write(message)
    os._exit(0)


if __name__ == "__main__":
    serve()
