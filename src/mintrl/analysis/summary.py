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

Seeds and intervals (:func:`summarize_seeds`): jobs whose overrides differ only in ``seed=...`` form
one row. Per row it reports the number of seeds, and the mean and a 95% interval over seeds of

* the final held-out pass@1 (0-1), and
* the area under the held-out curve (:func:`area_under_curve`: trapezoid over the validation steps
  divided by the step span, so it is the mean pass@1 over training, 0-1),

the interval being ``mean ± t(0.975, n-1) * s / sqrt(n)`` with ``s`` the sample standard deviation
over the n seeds and ``t`` Student's t quantile (:func:`t_quantile_975`, a table; n = 1: no
interval). Next to it, one run's binomial standard error ``sqrt(p (1-p) / N)`` of a final pass@1
``p`` measured on ``N`` = validation prompts x samples per prompt held-out rollouts
(:func:`heldout_size`, from the job's ``.hydra/config.yaml``): when it is about as wide as the seed
interval, the held-out split, not the seeds, limits the comparison. ``--curves`` draws the
held-out curves, the mean over seeds with the 95% interval per step as a band (:func:`plot_curves`).

Usage::

    mintrl-summary outputs/sweep_intensity/multiruns/<date> --figure intensity.png --json rows.json
    mintrl-summary <multirun dir of seed=0,1,2 x methods> --curves curves.png --seeds-json seeds.json
    mintrl-summary <multirun dir> --baseline outputs/no_intervention/runs/<date>
"""

from __future__ import annotations

import math
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
        ``delta_pass_at_1`` (final pass@1 minus the baseline's, in pass@1 units),
        ``area_under_curve`` (:func:`area_under_curve` of the held-out curve, mean pass@1 0-1),
        ``heldout_n`` (held-out rollouts per validation, :func:`heldout_size`) and ``binomial_se``
        (one run's standard error of its final pass@1, :func:`binomial_se`, pass@1 units); numbers are
        None where unavailable.
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
        size = heldout_size(job.config)
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
                "area_under_curve": area_under_curve(pass_at_1_curve(job.scalars)),
                "heldout_n": size,
                "binomial_se": None if final is None or size is None else binomial_se(final, size),
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


# --- seeds and intervals --------------------------------------------------------------------------

# Student t quantile t(0.975, df): the two-sided 95% interval's multiplier (4 decimals; checked
# against the regularized incomplete beta function). scipy is not a dependency of mintrl.
T_975 = {
    1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
    10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098,
    18: 2.1009, 19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595,
    26: 2.0555, 27: 2.0518, 28: 2.0484, 29: 2.0452, 30: 2.0423, 40: 2.0211, 60: 2.0003, 120: 1.9799,
}  # fmt: skip
Z_975 = 1.9600  # the normal limit (df -> infinity)

INTERVAL_NOTE = (
    "95% interval over seeds: mean ± t(0.975, n-1) · s / sqrt(n), s the sample standard deviation of the "
    "n seeds' values, t Student's t quantile (table; df > 120: 1.96); n = 1: no interval. One run's SE: "
    "sqrt(p (1-p) / N) of a final pass@1 p on N = validation prompts x samples per prompt held-out rollouts."
)


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` degrees of freedom (the multiplier of a two-sided 95%
    interval), from :data:`T_975`: exact to 4 decimals for df 1-30, 40, 60, 120; between tabulated
    values above 30 the next smaller df (slightly wider: conservative); above 120 the normal 1.96.

    Raises:
        ValueError: ``df`` is not an integer >= 1.
    """
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    if df > 120:
        return Z_975
    return T_975[max(k for k in T_975 if k <= df)]


def mean_interval(values: Sequence[float]) -> dict:
    """Mean and 95% interval over seeds of one quantity (e.g. final pass@1, 0-1).

    The interval is ``mean ± t(0.975, n-1) * s / sqrt(n)`` (:func:`t_quantile_975`), ``s`` the
    sample standard deviation (n-1 in the denominator).

    Returns:
        ``{"n", "mean", "sd", "half_width", "low", "high"}`` in the values' units; ``sd``,
        ``half_width``, ``low`` and ``high`` are None when n = 1 (no interval from one seed).

    Raises:
        ValueError: no values, or a value that is not a finite number.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_interval needs at least one value")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"mean_interval: non-finite value in {values}")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "low": None, "high": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half}


def pass_at_1_curve(scalars: Scalars | None) -> list[tuple[int, float]]:
    """The held-out curve ``[(step, pass@1), ...]`` (steps in optimizer steps, pass@1 0-1) of
    :func:`pass_at_1_tag`, sorted by step; a step logged twice (a resumed run) keeps its last value.
    Empty without a pass@1 tag."""
    tag = pass_at_1_tag(scalars)
    if tag is None:
        return []
    return sorted(dict(scalars[tag]).items())


def area_under_curve(points: Sequence[tuple[int, float]]) -> float | None:
    """Area under a held-out curve normalised by its step span: the trapezoid rule over the
    validation steps divided by ``last step - first step``, i.e. the mean pass@1 (0-1) over
    training (a run that learns early scores higher than one that reaches the same final value late).

    Args:
        points: ``[(step, pass@1), ...]`` sorted by step (:func:`pass_at_1_curve`).

    Returns:
        The normalised area (pass@1 units); the value itself for a single point; None for no points.

    Raises:
        ValueError: the steps are not strictly increasing.
    """
    if not points:
        return None
    if len(points) == 1:
        return float(points[0][1])
    steps = [s for s, _ in points]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"area_under_curve: steps must be strictly increasing, got {steps}")
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(points, points[1:]))
    return area / (steps[-1] - steps[0])


def heldout_size(config: dict | None) -> int | None:
    """Held-out rollouts per validation, N = ``data.prompts.val_size`` (prompts) x
    ``data.val_samples_per_prompt`` (samples per prompt), from a job's composed (unresolved)
    ``.hydra/config.yaml``; None when either is missing or not a literal integer (an interpolation)."""
    prompts, samples = _get(config, "data.prompts.val_size"), _get(config, "data.val_samples_per_prompt")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (prompts, samples)):
        return None
    return prompts * samples


def binomial_se(p: float, n: int) -> float:
    """Binomial standard error ``sqrt(p (1-p) / n)`` of one run's pass@1 ``p`` (0-1) measured on
    ``n`` held-out rollouts, in pass@1 units: the noise of a single run's number from the finite
    held-out split alone (rollouts of one prompt are treated as independent, so it is a lower bound
    when prompts differ in difficulty).

    Raises:
        ValueError: ``p`` outside [0, 1] or ``n`` < 1.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_se: p must be in [0, 1], got {p}")
    if n < 1:
        raise ValueError(f"binomial_se: n must be >= 1 held-out rollouts, got {n}")
    return math.sqrt(p * (1 - p) / n)


def seed_key(seed: str) -> tuple:
    """Sort key of a seed value: integer seeds numerically, then other values (``default``) alphabetically."""
    try:
        return (0, int(seed), "")
    except ValueError:
        return (1, 0, seed)


def is_seed_override(override: str) -> bool:
    """Whether an override sets the seed (``seed=1``, ``+seed=1``, ``++seed=1``)."""
    return parse_override(override)[0] == "seed"


def group_by_seed(jobs: Sequence[Job]) -> list[list[Job]]:
    """Jobs whose overrides are equal apart from ``seed=...`` (compared with
    :func:`normalize_override`, in any order), as groups in order of first appearance."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        key = tuple(sorted(normalize_override(o) for o in job.overrides if not is_seed_override(o)))
        groups.setdefault(key, []).append(job)
    return list(groups.values())


def mean_curve(jobs: Sequence[Job]) -> list[dict]:
    """The held-out curve averaged over seeds: per validation step (optimizer steps) that any job
    logged, ``{"step", "n", "mean", "half_width", "low", "high"}`` (:func:`mean_interval` of the
    jobs' pass@1 at that step, 0-1; no interval where only one job has the step)."""
    by_step: dict[int, list[float]] = {}
    for job in jobs:
        for step, value in pass_at_1_curve(job.scalars):
            by_step.setdefault(step, []).append(value)
    return [{"step": step, **mean_interval(values)} for step, values in sorted(by_step.items())]


def summarize_seeds(jobs: Sequence[Job]) -> list[dict]:
    """One row per setting (jobs equal apart from ``seed=...``, :func:`group_by_seed`).

    Args:
        jobs: the jobs of a multirun (:func:`read_multirun`), e.g. ``objective=a,b seed=0,1,2``.

    Returns:
        dicts with ``jobs`` (names), ``seeds`` (the ``seed=`` values, ``"default"`` for a job without
        one), ``varying`` (the swept overrides without the seed), ``no_intervention``, ``n`` (jobs
        with a held-out curve), ``missing`` (names of jobs without one), ``final_pass_at_1`` and
        ``area_under_curve`` (:func:`mean_interval` dicts over those jobs, pass@1 units 0-1; None when
        n = 0), ``heldout_n`` (N when every job of the row has the same, else None), ``run_se`` (one
        run's binomial SE at the row's mean final pass@1 and N, :func:`binomial_se`) and ``curve``
        (:func:`mean_curve`).
    """
    varying = {id(j): [o for o in v if not is_seed_override(o)] for j, v in zip(jobs, varying_overrides(jobs))}
    rows = []
    for group in group_by_seed(jobs):
        curves = {j.name: pass_at_1_curve(j.scalars) for j in group}
        done = [j for j in group if curves[j.name]]
        finals = [curves[j.name][-1][1] for j in done]
        areas = [area_under_curve(curves[j.name]) for j in done]
        sizes = {heldout_size(j.config) for j in done}
        size = sizes.pop() if len(sizes) == 1 else None
        final = mean_interval(finals) if finals else None
        seeds = [next((parse_override(o)[1] for o in j.overrides if is_seed_override(o)), "default") for j in group]
        rows.append(
            {
                "jobs": [j.name for j in group],
                "seeds": seeds,
                "varying": varying[id(group[0])],
                "no_intervention": is_no_intervention(group[0].overrides, group[0].config),
                "n": len(done),
                "missing": [j.name for j in group if not curves[j.name]],
                "final_pass_at_1": final,
                "area_under_curve": mean_interval(areas) if areas else None,
                "heldout_n": size,
                "run_se": binomial_se(final["mean"], size) if final is not None and size is not None else None,
                "curve": mean_curve(done),
            }
        )
    return rows


def fmt_interval(stat: dict | None) -> str:
    """``0.600 [0.352, 0.848]`` (mean [95% interval]); ``0.600 (n=1, no interval)``; ``n/a`` for None."""
    if stat is None:
        return "n/a"
    if stat["half_width"] is None:
        return f"{stat['mean']:.3f} (n=1, no interval)"
    return f"{stat['mean']:.3f} [{stat['low']:.3f}, {stat['high']:.3f}]"


def row_label(row: dict) -> str:
    """A seed row's label: its swept values without key prefixes, ``(no-intervention)`` marked."""
    parts = []
    for o in row["varying"]:
        key, value = parse_override(o)
        parts.append(f"{key.rsplit('.', 1)[-1]}={value}" if value else key)
    label = " ".join(parts) or "all jobs"
    return f"{label} (no-intervention)" if row["no_intervention"] else label


def seed_table(rows: Sequence[dict]) -> str:
    """The rows of :func:`summarize_seeds` as a markdown table (pass@1 units with 3 decimals) followed
    by :data:`INTERVAL_NOTE`, saying how the intervals are computed."""
    lines = [
        "| setting | seeds (n) | final val pass@1, mean [95% interval] | area under val curve, mean [95% interval] "
        "| one run's SE (N held-out rollouts) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ran = [s for s, j in zip(r["seeds"], r["jobs"]) if j not in r["missing"]]
        seeds = (",".join(str(s) for s in ran) or "none") + f" ({r['n']})"
        if r["missing"]:
            lost = [f"{j} (seed={s})" for s, j in zip(r["seeds"], r["jobs"]) if j in r["missing"]]
            seeds += "; no event files: job " + ", ".join(lost)
        se = f"{r['run_se']:.3f} (N={r['heldout_n']})" if r["run_se"] is not None else "n/a"
        cells = [row_label(r), seeds, fmt_interval(r["final_pass_at_1"]), fmt_interval(r["area_under_curve"]), se]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n\n" + INTERVAL_NOTE


def plot_curves(rows: Sequence[dict], path: str | Path | None = None, title: str = "Held-out pass@1"):
    """Held-out curves of :func:`summarize_seeds` rows: per row the mean pass@1 over seeds (y,
    percent) against the validation step (x, optimizer steps), with the 95% interval over seeds per
    step as a band, drawn clipped to 0-100% (steps with one seed: no band; the tables keep the
    unclipped interval). Draws with the Agg backend (headless).

    Args:
        rows: :func:`summarize_seeds` rows (rows without a curve are skipped).
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
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig
