"""One tool call as a sandbox program, and the text the agent sees of its result.

Each call runs in a fresh sandboxed process (:class:`mintrl.sandbox.Sandbox`): nothing of
an earlier call's process survives. So that variables persist across an episode's calls, the
program first re-runs the episode's earlier *successful* cells (those that ran to the end without
an exception, timeout or crash), in order and in one namespace, with everything they print
dropped, and then runs the new cell with its printed text passed through up to a cap. The state is
therefore rebuilt, not kept: an earlier cell that is not deterministic (time, randomness without a
seed) may rebuild a different state, and the re-run cells' time counts against the call's time
limit. Each cell is compiled on its own (a syntax error names ``cell``, line numbers count from
the cell's first line).
"""

from __future__ import annotations

from typing import Sequence

from mintrl.sandbox import Outcome, ProgramResult

# Runs in the sandbox before the cells: a stdout/stderr stand-in that passes the first `cap`
# characters through to the real stream (flushed, so that text printed before a timeout is kept)
# and drops the rest.
_PREAMBLE = """import builtins as _mintrl_b
import sys as _mintrl_sys


class _MintrlOut:
    encoding = "utf-8"

    def __init__(self, stream, cap):
        self.stream, self.cap = stream, cap

    def write(self, text):
        text = str(text)
        if self.cap > 0:
            self.stream.write(text[: self.cap])
            self.stream.flush()
            self.cap -= min(self.cap, len(text))
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False

    def writable(self):
        return True


"""


def program_source(cells: Sequence[str], code: str, max_output_chars: int) -> str:
    """The sandbox program of one call: the earlier successful ``cells`` (output dropped), then
    ``code`` with its first ``max_output_chars + 1`` printed characters kept (one more than shown,
    so that a cut can be told)."""
    lines = [
        _PREAMBLE,
        "_mintrl_sys.stdout = _MintrlOut(_mintrl_sys.__stdout__, 0)",
        "_mintrl_sys.stderr = _MintrlOut(_mintrl_sys.__stderr__, 0)",
    ]
    lines += [f"_mintrl_b.exec(_mintrl_b.compile({cell!r}, 'cell', 'exec'))" for cell in cells]
    lines += [
        f"_mintrl_sys.stdout = _MintrlOut(_mintrl_sys.__stdout__, {max_output_chars + 1})",
        "_mintrl_sys.stderr = _mintrl_sys.__stderr__",
        f"_mintrl_b.exec(_mintrl_b.compile({code!r}, 'cell', 'exec'))",
        "",
    ]
    return "\n".join(lines)


def timeout_text(timeout_s: float) -> str:
    """What the agent reads of a call stopped at the time limit (``timeout_s`` in seconds)."""
    return f"TimeoutError: the code ran longer than {timeout_s:g} s and was stopped."


CRASH_TEXT = "ResourceError: the code hit a sandbox limit (memory, processes, open files or file size) and was stopped."


def result_text(result: ProgramResult, max_output_chars: int, timeout_s: float) -> str:
    """What the agent reads of one call (before :func:`~mintrl.env.python_tool.protocol.output_observation`):
    the printed text (its first ``max_output_chars`` characters, with a note when cut), then for a
    failed call the last line of its stderr (the harness's ``ExceptionType: message``; its first
    ``max_output_chars`` characters), for a timeout :func:`timeout_text`, for a crash that error
    line or :data:`CRASH_TEXT`. Text a call wrote to stderr itself is not shown.

    Raises:
        RuntimeError: the sandbox itself failed (``result.sandbox_error``): an environment error.
    """
    if result.sandbox_error is not None:
        raise RuntimeError(f"code sandbox failed: {result.sandbox_error}")
    out = result.stdout.rstrip("\n")
    if len(out) > max_output_chars:
        out = f"{out[:max_output_chars]}\n... (output cut at {max_output_chars} characters)"
    lines = result.stderr.strip().split("\n")
    error = lines[-1][:max_output_chars]  # the harness's one line (the program's own stderr before it is dropped)
    if result.outcome is Outcome.TIMEOUT:
        error = timeout_text(timeout_s)
    elif result.outcome is Outcome.CRASHED:
        error = error or CRASH_TEXT
    elif result.outcome is Outcome.PASSED:
        error = ""
    return "\n".join(part for part in (out, error) if part)
