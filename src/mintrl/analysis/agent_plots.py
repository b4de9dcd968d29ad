"""The agent comparison's figure (RAIL Figure 1 at CPU scale): held-out success against episodes generated per
task, one point per row with its interval, one panel per level (matplotlib, Agg backend, the style of
:mod:`mintrl.analysis.plots`)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mintrl.analysis.agent_rows import ROW_LABELS

MARKERS = ("o", "s", "^", "D", "v", "P")
INTERVALS = {"t": "t over seeds", "wilson": "Wilson, one seed"}  # the legend's name of a point's interval
DODGE = 0.03  # episodes per task between points drawn side by side at the same x


def plot_success_vs_episodes(points: Sequence[dict], path: str | Path | None = None):
    """RAIL Figure 1 per level: held-out success (y, percent) against episodes generated per task (x, episodes per
    task, mean over seeds, discarded shadow branches included), one point per row with its 95% interval as error
    bar (Student t over seeds; Wilson over the held-out episodes for a one-seed level), a panel per level. Rows
    of one level that share an x (equal budget) are drawn :data:`DODGE` apart along x, in row order, so a point
    sits at most ``DODGE`` off its measured x (the report's table gives the measured values). Agg backend.

    Args:
        points: ``{"level", "experiment", "label", "x", "y", "low", "high", "method"}`` per row (x in episodes per
            task, y/low/high in success 0-1, low/high None without an interval; rows without x or y are
            skipped).
        path: where to write the PNG (parent folders are created); None: not written.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [p for p in points if p["x"] is not None and p["y"] is not None]
    levels = list(dict.fromkeys(p["level"] for p in drawn)) or ["no level"]
    fig, axes = plt.subplots(1, len(levels), figsize=(5.2 * len(levels), 4.4), squeeze=False)
    known = list(ROW_LABELS)  # the same colour and marker for a row in every panel
    for ax, level in zip(axes.flat, levels):
        here = [p for p in drawn if p["level"] == level]
        for i, p in enumerate(here):
            same = [q for q in here if abs(q["x"] - p["x"]) < 1e-9]
            x = p["x"] + DODGE * (same.index(p) - (len(same) - 1) / 2)
            y = 100 * p["y"]
            style = known.index(p["experiment"]) if p["experiment"] in known else len(known) + i
            err = None
            if p["low"] is not None:
                err = [[y - max(0.0, 100 * p["low"])], [min(100.0, 100 * p["high"]) - y]]  # drawn within 0-100%
            ax.errorbar(
                [x],
                [y],
                yerr=err,
                fmt=MARKERS[style % len(MARKERS)],
                color=f"C{style % 10}",
                capsize=3,
                label=f"{p['label']} ({INTERVALS.get(p['method'], 'no interval')})",
            )
        ax.set_title(f"level {level}", fontsize=10)
        ax.set_xlabel("episodes generated per task (mean over steps and seeds)")
        ax.set_ylabel("held-out success (%)")
        if here:
            xs = [p["x"] for p in here]
            ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
            ax.margins(y=0.15)
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no row with held-out success", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle("RAIL Figure 1 at CPU scale: success vs episodes per task\nerror bars: 95% interval", fontsize=10)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig
