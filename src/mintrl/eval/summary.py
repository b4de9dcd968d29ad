"""The multirun summary behind ``mintrl-summary``: one table and the MInTRL Figure 6 plot for a Hydra multirun.

A multirun folder (``outputs/<task>/multiruns/<date>/``, e.g. from ``mintrl-train -m +sweep=intensity``)
holds one folder per job (``0/``, ``1/``, ...), each with ``.hydra/overrides.yaml`` (the job's
command-line overrides), ``.hydra/config.yaml`` and the TensorBoard event files under
``tensorboard/``. For every job this module reads

* the off-policy token fraction, ``rollout/offpolicy_frac`` (fraction of rollout tokens written by
  the judge-intervention policy, 0-1) averaged over the logged training steps;
* the final held-out pass@1, the last logged ``val/pass@1`` (``val/reward`` when the run has no
  ``val/pass@1``), a fraction of correct validation rollouts, 0-1;
* its difference to the no-intervention job of the same multirun (:func:`is_no_intervention`), in
  pass@1 units (0.05 = 5 percentage points),

and prints one markdown table; ``--figure`` draws MInTRL Figure 6 (delta pass@1 against the
off-policy token fraction, one labelled point per job), ``--json`` writes the rows.
A job without event files is listed as missing; the other columns of a job lacking a tag are empty.

Usage::

    mintrl-summary outputs/sweep_intensity/multiruns/<date> --figure intensity.png --json rows.json
    mintrl-summary <multirun dir> --baseline outputs/no_intervention/runs/<date>
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from mintrl.eval.tensorboard import load_scalars

OFFPOLICY_TAG = "rollout/offpolicy_frac"
PASS_AT_1_TAGS = ("val/pass@1", "val/reward")  # preferred first
NO_INTERVENTION_EXPERIMENTS = ("no_intervention",)

Scalars = dict[str, list[tuple[int, float]]]


@dataclass
class Job:
    """One run of a multirun.

    Attributes:
        name: the job's folder name (Hydra's job number for multirun jobs).
        path: the job's output folder.
        overrides: the job's override strings from ``.hydra/overrides.yaml`` (e.g. ``rollout.chunk_size=16``).
        config: the composed ``.hydra/config.yaml`` as a plain dict (unresolved), or None when absent.
        scalars: ``{tag: [(step, value), ...]}`` (:func:`mintrl.eval.tensorboard.load_scalars`), or None when
            the job has no TensorBoard event files (not started, crashed before logging).
    """

    name: str
    path: Path
    overrides: list[str] = field(default_factory=list)
    config: dict | None = None
    scalars: Scalars | None = None


def _job_order(path: Path) -> tuple:
    """Sort key: numeric job folders by number (0, 1, ..., 10), then other names alphabetically."""
    return (0, int(path.name), "") if path.name.isdigit() else (1, 0, path.name)


def find_jobs(multirun_dir: str | Path) -> list[Path]:
    """The job folders of a multirun: its sub-folders holding ``.hydra/overrides.yaml``, in job order.

    Raises:
        FileNotFoundError: ``multirun_dir`` does not exist, is not a folder, or holds no job folder.
    """
    root = Path(multirun_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"multirun directory {root} does not exist or is not a directory")
    jobs = sorted((p for p in root.iterdir() if (p / ".hydra" / "overrides.yaml").is_file()), key=_job_order)
    if not jobs:
        raise FileNotFoundError(
            f"no Hydra jobs in {root}: expected sub-folders with .hydra/overrides.yaml "
            "(a multirun folder such as outputs/<task>/multiruns/<date>/)"
        )
    return jobs


def read_job(job_dir: str | Path) -> Job:
    """Overrides, config and scalars of one run folder (a multirun job or a single run).

    Event files are read from ``<job_dir>/tensorboard/`` when that folder exists, else from
    anywhere below ``job_dir``. Missing ``.hydra`` files give empty overrides / no config; missing
    event files give ``scalars=None``.
    """
    import yaml

    path = Path(job_dir)
    hydra_dir = path / ".hydra"
    overrides: list[str] = []
    if (hydra_dir / "overrides.yaml").is_file():
        overrides = [str(o) for o in (yaml.safe_load((hydra_dir / "overrides.yaml").read_text()) or [])]
    config = None
    if (hydra_dir / "config.yaml").is_file():
        config = yaml.safe_load((hydra_dir / "config.yaml").read_text()) or {}
    tb = path / "tensorboard"
    try:
        scalars = load_scalars(tb if tb.is_dir() else path)
    except FileNotFoundError:
        scalars = None
    return Job(name=path.name, path=path, overrides=overrides, config=config, scalars=scalars)


def read_multirun(multirun_dir: str | Path) -> list[Job]:
    """:func:`read_job` of every job of :func:`find_jobs` (same errors)."""
    return [read_job(p) for p in find_jobs(multirun_dir)]


def parse_override(override: str) -> tuple[str, str]:
    """``"+rollout.n_semi=0"`` -> ``("rollout.n_semi", "0")`` (leading ``+``/``++``/``~`` dropped;
    a deletion without ``=`` gives an empty value)."""
    key, _, value = override.lstrip("+~").partition("=")
    return key.strip(), value.strip()


def normalize_override(override: str) -> str:
    """``override`` with booleans in lower case (the sweeper writes ``rollout.progress=False`` where
    the command line had ``false``), for comparing the overrides of different runs."""
    key, _, value = override.partition("=")
    return f"{key}={value.lower()}" if value in ("True", "False") else override


def _is_zero(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        return float(value) == 0
    except (TypeError, ValueError):
        return False


def _get(config: dict | None, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def is_no_intervention(overrides: Sequence[str], config: dict | None = None) -> bool:
    """Whether a run never intervenes (the pure on-policy baseline of MInTRL Figure 6).

    True when the overrides or the composed config say so: ``judge=none`` (the config's judge
    ``_target_`` is ``...KeepJudge``), ``experiment=no_intervention``, or any of
    ``rollout.n_semi``, ``rollout.max_reviews``, ``rollout.intervention_steps`` equal to 0 (no
    semi-on-policy rollouts, no reviews, or interventions switched off from step 0).
    """
    zero_keys = ("rollout.n_semi", "rollout.max_reviews", "rollout.intervention_steps")
    for o in overrides:
        key, value = parse_override(o)
        if (key, value) == ("judge", "none") or (key == "experiment" and value in NO_INTERVENTION_EXPERIMENTS):
            return True
        if key in zero_keys and _is_zero(value):
            return True
    if config:
        target = _get(config, "judge._target_")
        if isinstance(target, str) and target.rsplit(".", 1)[-1] == "KeepJudge":
            return True
        if any(_is_zero(_get(config, k)) for k in zero_keys):
            return True
    return False


def mean_offpolicy_frac(scalars: Scalars | None) -> float | None:
    """Off-policy token fraction (0-1, tokens written by the judge-intervention policy over all
    rollout tokens) averaged over the logged training steps; None without ``rollout/offpolicy_frac``."""
    points = (scalars or {}).get(OFFPOLICY_TAG)
    if not points:
        return None
    return sum(v for _, v in points) / len(points)


def pass_at_1_tag(scalars: Scalars | None) -> str | None:
    """``val/pass@1`` when logged, else ``val/reward`` (mean reward = pass@1 for 0/1 rewards), else None."""
    return next((t for t in PASS_AT_1_TAGS if (scalars or {}).get(t)), None)


def final_pass_at_1(scalars: Scalars | None) -> float | None:
    """Held-out pass@1 (0-1) at the last logged validation step (:func:`pass_at_1_tag`); None without one."""
    tag = pass_at_1_tag(scalars)
    return scalars[tag][-1][1] if tag else None


def baseline_pass_at_1(overrides: Sequence[str], baselines: Sequence[tuple[Sequence[str], float]]) -> float | None:
    """Final pass@1 of the no-intervention run that a run is compared with.

    Args:
        overrides: the run's overrides.
        baselines: ``(overrides, final pass@1)`` of every no-intervention run with a pass@1.

    Returns:
        The mean final pass@1 of the baselines sharing the most overrides with the run (so in a
        sweep crossed with ``seed=0,1`` each run is compared with the baseline of its own seed;
        with a single baseline, that one); None when there is no baseline.
    """
    if not baselines:
        return None
    mine = {normalize_override(o) for o in overrides}
    shared = [len(mine & {normalize_override(o) for o in b}) for b, _ in baselines]
    best = [p for (_, p), s in zip(baselines, shared) if s == max(shared)]
    return sum(best) / len(best)


def varying_overrides(jobs: Sequence[Job]) -> list[list[str]]:
    """Each job's overrides without those shared by every job (the swept values); all of them for a
    single job."""
    if len(jobs) < 2:
        return [list(j.overrides) for j in jobs]
    common = set.intersection(*({normalize_override(o) for o in j.overrides} for j in jobs))
    return [[o for o in j.overrides if normalize_override(o) not in common] for j in jobs]


def summarize(jobs: Sequence[Job], baseline: Job | None = None) -> list[dict]:
    """One row per job.

    Args:
        jobs: the jobs of a multirun (:func:`read_multirun`).
        baseline: an explicit no-intervention run; when None, the no-intervention jobs of ``jobs``
            (:func:`is_no_intervention`) are the baselines (:func:`baseline_pass_at_1`).

    Returns:
        dicts with ``job`` (name), ``path``, ``overrides`` (all), ``varying`` (those not shared by
        every job), ``missing`` (no event files), ``no_intervention`` (bool), ``offpolicy_frac``
        (0-1, mean over training steps), ``pass_at_1_tag``, ``final_pass_at_1`` (0-1) and
        ``delta_pass_at_1`` (final pass@1 minus the baseline's, in pass@1 units); numbers are None
        where unavailable.
    """
    if baseline is not None:
        b = final_pass_at_1(baseline.scalars)
        baselines = [(baseline.overrides, b)] if b is not None else []
    else:
        baselines = [
            (j.overrides, p)
            for j in jobs
            if is_no_intervention(j.overrides, j.config) and (p := final_pass_at_1(j.scalars)) is not None
        ]
    rows = []
    for job, varying in zip(jobs, varying_overrides(jobs)):
        final = final_pass_at_1(job.scalars)
        base = baseline_pass_at_1(job.overrides, baselines)
        rows.append(
            {
                "job": job.name,
                "path": str(job.path),
                "overrides": list(job.overrides),
                "varying": varying,
                "missing": job.scalars is None,
                "no_intervention": is_no_intervention(job.overrides, job.config),
                "offpolicy_frac": mean_offpolicy_frac(job.scalars),
                "pass_at_1_tag": pass_at_1_tag(job.scalars),
                "final_pass_at_1": final,
                "delta_pass_at_1": None if final is None or base is None else final - base,
            }
        )
    return rows


def fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def markdown_table(rows: Sequence[dict]) -> str:
    """The rows of :func:`summarize` as a markdown table (fractions with 3 decimals, deltas signed;
    ``n/a`` for a missing tag, ``missing`` for a job without event files)."""
    lines = [
        "| job | overrides | off-policy frac | final val pass@1 | delta pass@1 vs no-intervention |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        name = f"{r['job']} (no-intervention)" if r["no_intervention"] else str(r["job"])
        overrides = " ".join(r["varying"]) or "-"
        if r["missing"]:
            cells = ["missing (no event files)"] * 3
        else:
            cells = [fmt(r["offpolicy_frac"]), fmt(r["final_pass_at_1"]), fmt(r["delta_pass_at_1"], signed=True)]
        lines.append("| " + " | ".join([name, overrides.replace("|", "\\|"), *cells]) + " |")
    return "\n".join(lines)


def point_label(row: dict) -> str:
    """Short plot label: the job name and its swept values without the key prefixes
    (``rollout.chunk_size=8`` -> ``chunk_size=8``)."""
    parts = []
    for o in row["varying"]:
        key, value = parse_override(o)
        parts.append(f"{key.rsplit('.', 1)[-1]}={value}" if value else key)
    return f"{row['job']}: " + " ".join(parts) if parts else str(row["job"])


def plot_intensity(rows: Sequence[dict], path: str | Path | None = None, title: str = "Off-policy intensity"):
    """MInTRL Figure 6: delta pass@1 vs the no-intervention run (y, percentage points) against the
    off-policy token fraction averaged over training (x, percent of rollout tokens), one labelled
    point per job having both numbers. Draws with the Agg backend (headless).

    Args:
        rows: :func:`summarize` rows.
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
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig
