"""Shared helpers of the benchmark scripts: medians of alternating repetitions, peak memory of a
fresh subprocess, and the table every script prints (ours / reference ratios, then absolutes)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable


def alternate(named: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Run each callable ``repeats`` times, interleaved (a, b, a, b, ...), so that drifts of a noisy
    machine hit every variant alike. Returns the wall times (seconds) per name."""
    times: dict[str, list[float]] = {name: [] for name in named}
    for _ in range(repeats):
        for name, fn in named.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def median(values) -> float:
    return statistics.median(values)


def peak_rss_mib(code: str, *args: str) -> float:
    """Peak resident memory (MiB) of a fresh ``python -c code args`` above its own baseline: the
    script prints ``{"baseline": KiB}`` before the measured part and ``{"peak": KiB}`` after it
    (from ``/proc/self/status``).

    The child runs with glibc's mmap threshold fixed at 64 KiB (``MALLOC_MMAP_THRESHOLD_``): every
    tensor buffer is then its own mapping, returned to the system when freed, so the resident set
    follows the live tensors. With the default dynamic threshold, buffers up to 32 MiB come from the
    heap and stay resident after they are freed, which adds hundreds of MiB of allocator retention
    that depends on the order of allocations rather than on the computation measured."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)},
    )
    marks = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            marks.update(json.loads(line))
    return (marks["peak"] - marks["baseline"]) / 1024


def table(title: str, rows: list[tuple[str, float, str]], notes: list[str] = ()) -> None:
    """Print ``title`` and rows of ``(what, ratio, absolute figures)``."""
    width = max([len("measure"), *(len(r[0]) for r in rows)])
    print(f"\n## {title}")
    print(f"{'measure':<{width}} {'ratio':>7}  absolute")
    for what, ratio, absolute in rows:
        print(f"{what:<{width}} {ratio:>7.2f}  {absolute}")
    for note in notes:
        print(f"  {note}")
