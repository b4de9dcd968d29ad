"""The analysis figures (matplotlib, Agg backend where a function picks one): MInTRL Figure 6 per job, held-out
curves over seeds with interval bands, the reproduction's training curves and intensity points, and the
training curves of single runs."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mintrl.analysis.measures import ENTROPY_TAG, GAP_TAG
from mintrl.analysis.rows import Row
from mintrl.analysis.stats import mean_interval
from mintrl.analysis.tables import point_label, row_label
from mintrl.analysis.tensorboard import Scalars

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


def plot_intensity(rows: Sequence[dict], path: str | Path | None = None, title: str = "Off-policy intensity"):
    """MInTRL Figure 6: delta pass@1 vs the no-intervention run (y, percentage points) against the
    off-policy token fraction averaged over training (x, percent of rollout tokens), one labelled
    point per job having both numbers. Draws with the Agg backend (headless).

    Args:
        rows: :func:`mintrl.analysis.summary.summarize` rows.
        path: where to write the PNG (parent folders are created); None: not written.
        title: the axes title.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [r for r in rows if r["offpolicy_frac"] is not None and r["delta_pass_at_1"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.axhline(0.0, color="0.6", lw=1, ls="--")
    for r in points:
        x, y = 100 * r["offpolicy_frac"], 100 * r["delta_pass_at_1"]
        ax.scatter([x], [y], color="tab:gray" if r["no_intervention"] else "tab:blue", zorder=3)
        ax.annotate(point_label(r), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.margins(x=0.2, y=0.15)  # room for the labels
    if not points:
        ax.text(
            0.5,
            0.5,
            "no job with both an off-policy fraction\nand a no-intervention baseline",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_xlabel("off-policy token fraction, mean over training (%)")
    ax.set_ylabel("delta pass@1 vs no-intervention (pp)")
    ax.set_title(title)
    return _finish(fig, path)


def plot_curves(rows: Sequence[dict], path: str | Path | None = None, title: str = "Held-out pass@1"):
    """Held-out curves of :func:`mintrl.analysis.summary.summarize_seeds` rows: per row the mean pass@1 over seeds (y,
    percent) against the validation step (x, optimizer steps), with the 95% interval over seeds per
    step as a band, drawn clipped to 0-100% (steps with one seed: no band; the tables keep the
    unclipped interval). Draws with the Agg backend (headless).

    Args:
        rows: :func:`mintrl.analysis.summary.summarize_seeds` rows (rows without a curve are skipped).
        path: where to write the PNG (parent folders are created); None: not written.
        title: the axes title.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    drawn = [r for r in rows if r["curve"]]
    for i, r in enumerate(drawn):
        color = f"C{i % 10}"
        steps = [p["step"] for p in r["curve"]]
        ax.plot(
            steps,
            [100 * p["mean"] for p in r["curve"]],
            marker="o",
            ms=3,
            color=color,
            label=f"{row_label(r)} (n={r['n']})",
        )
        band = [p for p in r["curve"] if p["half_width"] is not None]
        if band:
            ax.fill_between(
                [p["step"] for p in band],
                [max(0.0, 100 * p["low"]) for p in band],
                [min(100.0, 100 * p["high"]) for p in band],
                color=color,
                alpha=0.2,
                lw=0,
            )
    if drawn:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no job with a held-out curve", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("held-out pass@1 (%), mean over seeds")
    ax.set_title(f"{title}\nbands: 95% interval over seeds (Student t)", fontsize=10)
    return _finish(fig, path)


def plot_training(rows: Sequence[Row], path: str | Path | None = None):
    """Two panels, one line per row (mean over seeds, 95% interval band where 2+ seeds logged the step):
    ``reward/gap`` (semi-on-policy minus control reward, reward units) and ``train/policy_entropy`` (nats per
    policy token) against the optimizer step. Agg backend.

    Args:
        rows: the reproduction rows (:func:`mintrl.analysis.rows.rows_of`).
        path: where to write the PNG (parent folders are created); None: not written.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, tag, ylabel in zip(axes, (GAP_TAG, ENTROPY_TAG), ("semi minus control reward", "nats per policy token")):
        for i, row in enumerate(rows):
            by_step: dict[int, list[float]] = {}
            for job in row.jobs:
                for step, v in dict((job.scalars or {}).get(tag, [])).items():
                    by_step.setdefault(step, []).append(v)
            if not by_step:
                continue
            stats = [(s, mean_interval(v)) for s, v in sorted(by_step.items())]
            ax.plot(
                [s for s, _ in stats],
                [m["mean"] for _, m in stats],
                color=f"C{i % 10}",
                label=row.name,
                marker="o",
                ms=2,
            )
            band = [(s, m) for s, m in stats if m["half_width"] is not None]
            if band:
                ax.fill_between(
                    [s for s, _ in band],
                    [m["low"] for _, m in band],
                    [m["high"] for _, m in band],
                    color=f"C{i % 10}",
                    alpha=0.2,
                    lw=0,
                )
        ax.set_title(tag)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle("mean over seeds; bands: 95% interval over seeds (Student t)", fontsize=9)
    return _finish(fig, path)


def plot_intensity_points(points: Sequence[dict], path: str | Path | None = None):
    """Claim (iv): delta pass@1 vs no-intervention (y, percentage points, 95% interval as error bar) against the
    off-policy token fraction (x, percent), one labelled point per setting having both. Agg backend.

    Args:
        points: :func:`mintrl.analysis.claims.intensity_points`.
        path: where to write the PNG (parent folders are created); None: not written.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.8))
    ax.axhline(0.0, color="0.6", lw=1, ls="--")
    for p in points:
        if p["offpolicy_frac"] is None or p["delta"] is None:
            continue
        x, d = 100 * p["offpolicy_frac"], p["delta"]
        err = 100 * d["half_width"] if d["half_width"] is not None else 0.0
        ax.errorbar([x], [100 * d["mean"]], yerr=[err], fmt="o", capsize=3)
        ax.annotate(p["name"], (x, 100 * d["mean"]), textcoords="offset points", xytext=(4, 4), fontsize=6)
    ax.set_xlabel("off-policy token fraction, mean over training and seeds (%)")
    ax.set_ylabel("delta final pass@1 vs no-intervention (pp)")
    ax.set_title("Off-policy intensity (error bars: 95% interval over paired seeds)", fontsize=10)
    return _finish(fig, path)


def plot_scalars(runs: dict[str, Scalars], tags: Sequence[str] = DEFAULT_CURVES, columns: int = 4):
    """Training curves of one or several runs: one panel per tag, one line per run (x: optimizer step, y: the
    tag's value), ``columns`` panels a row; tags absent from every run are skipped.

    Args:
        runs: ``{run name: scalars}`` (:func:`mintrl.analysis.tensorboard.load_scalars` of each run).
        tags: the tags to draw, in panel order (default :data:`DEFAULT_CURVES`).
        columns: panels per row.

    Returns:
        The matplotlib Figure (drawn with the backend in use; call ``matplotlib.use("Agg")`` first when headless).
    """
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


def _finish(fig, path: str | Path | None):
    """Lay out ``fig`` and, when ``path`` is given, save it there (PNG at 120 dpi, parent folders
    made); returns ``fig``."""
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig
