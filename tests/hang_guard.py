"""Multi-rank tests that fail instead of hanging, naming the rank and the collective it is stuck in.

A rank that enters a collective its peers never enter (one more gradient all-reduce, one more FSDP
all-gather) waits forever on a GPU and, on gloo, until the process group's timeout (30 minutes by
default). Three pieces turn that into a quick, readable failure:

- :func:`install` wraps every ``torch.distributed`` collective of this process (the functions FSDP2,
  Lightning and our code call through the ``torch.distributed`` module) so that each call first
  appends ``<n> <op> <caller>`` to ``<out>/rank<r>.ops`` (flushed: it survives a kill); :func:`note`
  records a collective Python does not see (DDP's gradient all-reduce inside ``backward``).
  :class:`CollectiveLog` does the same as a Lightning callback on every rank of a real run.
- :func:`init_gloo` starts a gloo process group with a short timeout, so a stuck collective raises
  in its rank within seconds.
- :func:`run_ranks` (a worker script on ``world`` processes) and :func:`run_guarded` (any command,
  e.g. ``mintrl.cli.train`` whose launcher starts the other ranks) wait at most ``timeout_s``; on a
  timeout they kill what they started and raise ``AssertionError`` with :func:`describe`: each
  rank's collective count and the last collective it entered, with the caller (file:line function).
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import lightning.pytorch as L
import torch.distributed as dist

TESTS = Path(__file__).resolve().parent
ENV_DIR = "HANG_GUARD_DIR"  # where a worker started by run_ranks writes its collective log
ENV_TIMEOUT = "HANG_GUARD_TIMEOUT_S"  # the process group's timeout in a worker (seconds)

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
    "reduce",
    "gather",
    "gather_object",
    "scatter",
    "all_to_all",
    "all_to_all_single",
)

_state: dict = {"out": None, "count": 0, "file": None, "lock": threading.Lock()}


def _caller() -> str:
    """``file:line function`` of the innermost frame of this project (src/mintrl or tests, this
    module excluded) on the stack; else the innermost frame outside torch."""
    frame = sys._getframe(2)
    fallback = None
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.endswith("hang_guard.py"):
            where = f"{Path(name).name}:{frame.f_lineno} {frame.f_code.co_name}"
            if "/mintrl/" in name or f"{os.sep}tests{os.sep}" in name:
                return where
            if fallback is None and f"{os.sep}torch{os.sep}" not in name:
                fallback = where
        frame = frame.f_back
    return fallback or "?"


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))


def note(op: str, caller: str | None = None) -> None:
    """Append collective ``op`` to this rank's log (``<out>/rank<r>.ops``); a no-op before :func:`install`."""
    out = _state["out"]
    if out is None:
        return
    with _state["lock"]:
        if _state["file"] is None:
            _state["file"] = open(Path(out) / f"rank{_rank()}.ops", "a", buffering=1)  # noqa: SIM115 (lives with the process)
        _state["count"] += 1
        _state["file"].write(f"{_state['count']} {op} {caller or _caller()}\n")


def _wrap(name: str, fn):
    def guarded(*args, **kwargs):
        thread = threading.current_thread()  # a collective off the main thread is named with its thread
        note(name, _caller() + ("" if thread is threading.main_thread() else f" [thread {thread.name}]"))
        return fn(*args, **kwargs)

    guarded.hang_guard_original = fn
    guarded.__name__ = name
    return guarded


def install(out: str | Path) -> None:
    """Record every ``torch.distributed`` collective this process enters into ``out`` (idempotent)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    _state["out"] = str(out)
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is not None and not hasattr(fn, "hang_guard_original"):
            setattr(dist, name, _wrap(name, fn))


def init_gloo(timeout_s: float = 30.0) -> int:
    """``init_process_group("gloo")`` from the launcher's environment with a ``timeout_s`` timeout
    (a collective no peer joins raises after it; ``$HANG_GUARD_TIMEOUT_S`` overrides it), recording
    collectives into ``$HANG_GUARD_DIR`` when set. Returns this rank."""
    if os.environ.get(ENV_DIR):
        install(os.environ[ENV_DIR])
    timeout_s = float(os.environ.get(ENV_TIMEOUT, timeout_s))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank()


def read_ops(out: str | Path) -> dict[int, list[tuple[str, str]]]:
    """``{rank: [(op, caller), ...]}`` in call order, from the logs in ``out``."""
    found = {}
    for path in sorted(Path(out).glob("rank*.ops")):
        rows = []
        for line in path.read_text().splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3:
                rows.append((parts[1], parts[2]))
        found[int(path.stem[4:])] = rows
    return found


def op_counts(out: str | Path) -> dict[int, Counter]:
    """``{rank: Counter(op -> calls)}`` from the logs in ``out``."""
    return {rank: Counter(op for op, _ in rows) for rank, rows in read_ops(out).items()}


def describe(out: str | Path) -> str:
    """One line per rank: how many collectives it entered and the last one, with its caller, and
    the first position at which the ranks' sequences of ops differ."""
    ops = read_ops(out)
    if not ops:
        return "no rank entered a recorded collective"
    lines = []
    for rank, rows in sorted(ops.items()):
        last = f"#{len(rows)} {rows[-1][0]} from {rows[-1][1]}" if rows else "none"
        counts = ", ".join(f"{op} x{n}" for op, n in sorted(Counter(op for op, _ in rows).items()))
        lines.append(f"rank {rank}: last collective entered {last} ({counts})")
    sequences = [[f"{op} from {caller}" for op, caller in rows] for _, rows in sorted(ops.items())]
    for i in range(max(len(s) for s in sequences)):
        at = [s[i] if i < len(s) else "nothing" for s in sequences]
        if len(set(at)) > 1:  # the same op from another line counts: the ranks took different paths
            where = "; ".join(f"rank {r}: {op}" for r, op in zip(sorted(ops), at))
            lines.append(f"first difference at collective #{i + 1}: {where}")
            break
    return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def _kill(process: subprocess.Popen) -> None:
    """Kill ``process`` and the session it leads (started with ``start_new_session``)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def run_ranks(
    script: str | Path,
    *args: str,
    out: str | Path,
    world: int = 2,
    timeout_s: float = 120.0,
    collective_timeout_s: float | None = None,
) -> list[str]:
    """Run ``python script *args`` as ``world`` ranks (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT`` set; the script calls :func:`init_gloo`), collectives logged in ``out``;
    ``collective_timeout_s``: the process group's timeout in the workers (None: the script's).

    Returns:
        each rank's stdout.

    Raises:
        AssertionError: the ranks did not all finish within ``timeout_s`` (a hang: names each
            rank's last collective) or one exited non-zero (its stderr, and the collectives).
    """
    port = str(free_port())
    Path(out).mkdir(parents=True, exist_ok=True)
    logs = [Path(out) / f"rank{r}.stderr" for r in range(world)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            env=_env(
                {
                    "RANK": str(r),
                    "LOCAL_RANK": str(r),
                    "WORLD_SIZE": str(world),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    ENV_DIR: str(out),
                    **({ENV_TIMEOUT: str(collective_timeout_s)} if collective_timeout_s else {}),
                }
            ),
            stdout=subprocess.PIPE,
            stderr=open(logs[r], "w"),  # noqa: SIM115 (closed with the process)
            text=True,
            start_new_session=True,
        )
        for r in range(world)
    ]
    deadline = time.monotonic() + timeout_s
    try:
        outputs = [p.communicate(timeout=max(deadline - time.monotonic(), 0.1))[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            _kill(p)
        raise AssertionError(
            f"{world} ranks of {Path(script).name} did not finish within {timeout_s:.0f} s (a hang):\n{describe(out)}"
        ) from None
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        tails = "\n".join(f"--- rank {r} stderr:\n{logs[r].read_text()[-3000:]}" for r in failed)
        raise AssertionError(f"rank(s) {failed} of {Path(script).name} failed:\n{describe(out)}\n{tails}")
    return outputs


def run_guarded(cmd: list[str], out: str | Path, timeout_s: float, cwd: str | Path | None = None):
    """Run ``cmd`` (e.g. ``mintrl.cli.train`` with a :class:`CollectiveLog` callback writing to
    ``out``; its launcher starts the other ranks in the same session) for at most ``timeout_s``.

    Returns:
        the ``subprocess.CompletedProcess`` (stdout and stderr as text).

    Raises:
        AssertionError: still running after ``timeout_s``: everything it started is killed and the
            message names each rank's last collective (:func:`describe`).
    """
    process = subprocess.Popen(
        cmd, env=_env({}), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise AssertionError(
            f"{' '.join(cmd[:4])} ... did not finish within {timeout_s:.0f} s (a hang):\n{describe(out)}"
        ) from None
    return subprocess.CompletedProcess(cmd, process.returncode, stdout, stderr)


class CollectiveLog(L.Callback):
    """Records every rank's collectives into ``out`` (:func:`install`), from when the callback is
    built (before the trainer starts the process group) on each rank, and each backward as
    ``backward`` (under DDP a gradient all-reduce that runs in C++, unseen by :func:`install`; under
    FSDP its reduce-scatters are logged as well)."""

    def __init__(self, out: str):
        install(out)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if trainer.world_size > 1:
            note("backward")
