"""Reading the TensorBoard scalars a run logged: every tag's ``(step, value)`` points and the wall-clock times
they were logged at (the plots are :mod:`mintrl.analysis.plots`)."""

from __future__ import annotations

from pathlib import Path

Scalars = dict[str, list[tuple[int, float]]]  # {tag: [(step, value), ...]} sorted by step


def _scalar_events(run_dir: str | Path) -> list[tuple[str, object]]:
    """``(tag, event)`` of every scalar in the event files under ``run_dir`` (searched recursively; an
    event has ``step``, ``value`` and ``wall_time`` in seconds since the epoch); empty without files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = []
    for f in sorted(Path(run_dir).rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        acc.Reload()
        out += [(tag, e) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]
    return out


def load_scalars(run_dir: str | Path) -> Scalars:
    """All scalars under ``run_dir`` (searched recursively for event files), as
    ``{tag: [(step, value), ...]}`` sorted by step.

    Raises:
        FileNotFoundError: no TensorBoard event file below ``run_dir``.
    """
    if not any(Path(run_dir).rglob("events.out.tfevents.*")):
        raise FileNotFoundError(f"no TensorBoard event files under {run_dir}")
    scalars: dict[str, list[tuple[int, float]]] = {}
    for tag, e in _scalar_events(run_dir):
        scalars.setdefault(tag, []).append((e.step, e.value))
    return {tag: sorted(points) for tag, points in scalars.items()}


def event_times(run_dir: str | Path) -> tuple[float, float] | None:
    """The wall-clock times (seconds since the epoch) of the first and the last scalar logged under
    ``run_dir`` (event files searched recursively): they travel with the event files, unlike file
    modification times, which a copy or a git checkout resets. None without event files or scalars."""
    times = [e.wall_time for _, e in _scalar_events(run_dir)]
    return (min(times), max(times)) if times else None


def tag_values(scalars: Scalars | None, tag: str) -> list[float]:
    """The values of ``tag`` in step order (a step logged twice, as by a resumed run, keeps its last value);
    empty when ``scalars`` is None or lacks the tag."""
    return [v for _, v in sorted(dict((scalars or {}).get(tag, [])).items())]
