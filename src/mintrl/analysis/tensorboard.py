"""Reading TensorBoard scalars of one or several runs and drawing the training curves."""

from __future__ import annotations

from pathlib import Path

DEFAULT_CURVES = (
    "reward/control",
    "reward/semi",
    "reward/gap",
    "val/reward",
    "rollout/offpolicy_frac",
    "train/policy_entropy",
    "rollout/response_len",
    "train/loss",
)


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


def load_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
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


def plot_curves(runs: dict[str, dict[str, list[tuple[int, float]]]], tags=DEFAULT_CURVES, columns: int = 4):
    """One panel per tag, one line per run (x: optimizer step). Returns the matplotlib Figure;
    tags absent from every run are skipped."""
    import matplotlib.pyplot as plt

    tags = [t for t in tags if any(t in s for s in runs.values())]
    rows = max(1, -(-len(tags) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False)
    for ax, tag in zip(axes.flat, tags):
        for name, scalars in runs.items():
            if tag in scalars:
                steps, values = zip(*scalars[tag])
                ax.plot(steps, values, marker="o", ms=3, label=name)
        ax.set_title(tag)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(tags) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
