"""The report behind ``make reproduce`` and ``mintrl-reproduce``: the paper's comparison on the hard task, with
intervals over seeds and a measured verdict for each of the paper's claims.

Input: a Hydra multirun of ``configs/sweep/reproduce_core.yaml`` (or ``reproduce_full.yaml``), i.e. rows
``experiment=<row>`` crossed with ``seed=0,1,2``, and for the full reproduction a second multirun of
``reproduce_intensity.yaml`` (MInTRL-Const with chunk size x reviews x correction length). Jobs are read
and grouped by seed with :mod:`mintrl.eval.summary` (:func:`~mintrl.eval.summary.read_job`,
:func:`~mintrl.eval.summary.summarize_seeds`); a row is named after its ``experiment=`` override
(:data:`ROW_NAMES`).

Output (:func:`write_report`): a markdown file (default ``docs/reproduction.md``) with the table (per row
the mean and 95% interval over seeds of the final held-out pass@1 and of the area under the held-out
curve, pass@1 units 0-1), the paired MInTRL-Const minus GRPO difference, the commit, the machine, the wall
time, the budget each row ran with (steps, rollouts per prompt, read from the jobs' configs), figures (PNG
next to the markdown) and the claims with their verdicts:

(i) MInTRL-Const beats GRPO at equal budget: final held-out pass@1, Const minus GRPO, per seed, interval
    over seeds (:func:`paired_difference`);
(ii) the semi-on-policy minus control reward gap (``reward/gap``) narrows over training: per run the mean
    gap over the first third of the logged training steps minus its mean over the last third
    (:func:`gap_narrowing`, reward units), interval over the MInTRL-Const seeds;
(iii) entropy collapses more slowly than under GRPO: the last logged ``train/policy_entropy`` (nats per
    policy token), Const minus GRPO, per seed, interval over seeds;
(iv) (full reproduction) an inverted U in the off-policy token fraction: per intensity setting the mean
    off-policy fraction and delta pass@1 against the no-intervention row of the same seed (MInTRL-Const's
    core setting and the no-intervention row, at fraction 0, are points too); ordered by fraction, it holds
    when the best setting lies strictly inside the range and its per-seed delta minus each end's has an
    interval above 0, and does not hold when the best is an end whose difference to the best interior
    setting has an interval above 0 (:func:`inverted_u`). Which knob moves pass@1 (chunk size, reviews,
    correction length): the sweep's main effects, high minus low level over the settings equal on the
    other knobs, paired by seed (:func:`mintrl.eval.knob_effects.main_effects`).

Every interval is Student t over seeds (:func:`mintrl.eval.summary.mean_interval`). A verdict
(:func:`verdict`) is ``holds`` when the interval lies above zero, ``does not hold`` when it lies below
zero, ``undecided`` when it contains zero or there is one seed only; an undecided claim comes with the
seeds that would decide it if the mean and standard deviation stayed as observed (:func:`seeds_needed`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from mintrl.core.manifest import git_commit, machine, read_commit, read_started
from mintrl.eval.knob_effects import main_effects
from mintrl.eval.summary import (
    INTERVAL_NOTE,
    Job,
    Scalars,
    _get,
    area_under_curve,
    find_jobs,
    fmt_interval,
    group_by_seed,
    is_no_intervention,
    is_seed_override,
    mean_interval,
    mean_offpolicy_frac,
    normalize_override,
    parse_override,
    pass_at_1_curve,
    plot_curves,
    read_job,
    seed_key,
    summarize_seeds,
    t_quantile_975,
)
from mintrl.eval.tensorboard import event_times

# experiment config -> the row's name in the paper's terms
ROW_NAMES = {
    "math/mintrl_const_cpu": "MInTRL-Const",
    "math/grpo_cpu": "GRPO",
    "no_intervention": "no-intervention",
    "math/mintrl_proxy_cpu": "MInTRL-Proxy",
    "math/mentor_cpu": "MENTOR-style",
    "math/intervention_grpo_cpu": "intervention-GRPO",
}
CONST, GRPO, NO_INTERVENTION = "MInTRL-Const", "GRPO", "no-intervention"
GAP_TAG = "reward/gap"
ENTROPY_TAG = "train/policy_entropy"
STEP_SECONDS_TAG = "perf/step_seconds"
HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
MAX_SEEDS = 1000  # seeds_needed gives up above this
NOT_RECORDED = "not recorded"


@dataclass
class Row:
    """One setting of a multirun: jobs equal apart from ``seed=...``.

    Attributes:
        name: the paper's name of the row (:data:`ROW_NAMES`), else the swept overrides.
        jobs: the row's jobs, one per seed.
        stats: the row of :func:`mintrl.eval.summary.summarize_seeds` (final pass@1, area, curve, ...).
    """

    name: str
    jobs: list[Job]
    stats: dict


# --- per-job numbers ------------------------------------------------------------------------------


def seed_of(job: Job) -> str:
    """The job's ``seed=`` override value, ``"default"`` without one."""
    return next((parse_override(o)[1] for o in job.overrides if is_seed_override(o)), "default")


def experiment_of(job: Job) -> str | None:
    """The job's ``experiment=`` override value, None without one."""
    return next((v for k, v in map(parse_override, job.overrides) if k == "experiment"), None)


def tag_values(scalars: Scalars | None, tag: str) -> list[float]:
    """The values of ``tag`` in step order (a step logged twice keeps its last value); empty when absent."""
    return [v for _, v in sorted(dict((scalars or {}).get(tag, [])).items())]


def final_pass(job: Job) -> float | None:
    """Final held-out pass@1 (0-1) of a job: the last point of its held-out curve; None without one."""
    curve = pass_at_1_curve(job.scalars)
    return curve[-1][1] if curve else None


def job_area(job: Job) -> float | None:
    """Area under the job's held-out curve over its step span (mean pass@1 over training, 0-1)."""
    return area_under_curve(pass_at_1_curve(job.scalars))


def last_entropy(job: Job) -> float | None:
    """The last logged ``train/policy_entropy`` (nats per policy token); None when not logged."""
    values = tag_values(job.scalars, ENTROPY_TAG)
    return values[-1] if values else None


def gap_narrowing(values: Sequence[float]) -> float | None:
    """How much the semi-on-policy minus control reward gap narrowed over one run: the mean of the first
    third of the per-step gaps minus the mean of the last third (thirds of ``len // 3`` steps, at least
    one step each), in reward units (positive: the gap narrowed).

    Args:
        values: ``reward/gap`` per training step, in step order.

    Returns:
        The narrowing; None with fewer than 2 steps (one step has no trend).
    """
    if len(values) < 2:
        return None
    k = max(1, len(values) // 3)
    return sum(values[:k]) / k - sum(values[-k:]) / k


def job_gap_narrowing(job: Job) -> float | None:
    """:func:`gap_narrowing` of the job's ``reward/gap``."""
    return gap_narrowing(tag_values(job.scalars, GAP_TAG))


def per_seed(jobs: Sequence[Job], value) -> dict[str, float]:
    """``{seed: value(job)}`` over ``jobs`` (:func:`seed_of`), leaving out jobs whose value is None."""
    out = {}
    for job in jobs:
        v = value(job)
        if v is not None:
            out[seed_of(job)] = float(v)
    return out


# --- intervals and verdicts -----------------------------------------------------------------------


def paired_difference(a: dict[str, float], b: dict[str, float]) -> dict | None:
    """The difference ``a - b`` paired by seed: per common seed ``a[s] - b[s]``, then the mean and 95%
    interval over those seeds (:func:`mintrl.eval.summary.mean_interval`, Student t with n-1 degrees of
    freedom on the per-seed differences), in the values' units.

    Returns:
        The :func:`~mintrl.eval.summary.mean_interval` dict plus ``seeds`` (the common seeds, sorted) and
        ``diffs`` (the per-seed differences in that order); None when no seed is common to both.
    """
    seeds = sorted(set(a) & set(b), key=seed_key)
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    return {**mean_interval(diffs), "seeds": seeds, "diffs": diffs}


def verdict(stat: dict | None) -> str:
    """``holds`` when the 95% interval of a difference lies above 0, ``does not hold`` when it lies
    below 0, ``undecided`` when it contains 0, when there is one seed (no interval) or no data."""
    if stat is None or stat.get("half_width") is None:
        return UNDECIDED
    if stat["low"] > 0:
        return HOLDS
    if stat["high"] < 0:
        return FAILS
    return UNDECIDED


def seeds_needed(stat: dict | None, max_n: int = MAX_SEEDS) -> int | None:
    """Seeds a difference needs for its 95% interval to exclude 0 if its mean and standard deviation
    stayed as observed: the smallest n >= 2 with ``t(0.975, n-1) * sd / sqrt(n) < |mean|``.

    Returns:
        That n; None when it cannot be estimated (no data, one seed: no sd, a mean of 0) or exceeds
        ``max_n``.
    """
    if stat is None or stat.get("sd") is None or stat["mean"] == 0:
        return None
    for n in range(2, max_n + 1):
        if t_quantile_975(n - 1) * stat["sd"] / math.sqrt(n) < abs(stat["mean"]):
            return n
    return None


def fmt_diff(stat: dict | None, digits: int = 3) -> str:
    """``+0.100 [+0.020, +0.180] (n=3)``; ``+0.100 (n=1, no interval)``; ``n/a`` for None."""
    if stat is None:
        return "n/a"
    f = f"{{:+.{digits}f}}"
    if stat["half_width"] is None:
        return f"{f.format(stat['mean'])} (n=1, no interval)"
    return f"{f.format(stat['mean'])} [{f.format(stat['low'])}, {f.format(stat['high'])}] (n={stat['n']})"


def how_to_decide(stat: dict | None, what: str, ran: Sequence[str] = ()) -> str:
    """What would decide an undecided difference: with one seed, more seeds; otherwise the seeds needed
    at the observed mean and sd (:func:`seeds_needed`), named among the seeds not in ``ran`` (every seed
    the rows involved already ran, :func:`seeds_run`) so the suggestion never repeats a run."""
    if stat is None:
        return f"Not measured: the multirun lacks {what}."
    if stat["sd"] is None:
        return "One seed gives no interval: run at least 3 seeds (seed=0,1,2)."
    n = seeds_needed(stat)
    if n is None:
        return (
            f"At the observed mean {stat['mean']:+.3f} and sd {stat['sd']:.3f} over seeds no number of seeds up "
            f"to {MAX_SEEDS} would decide it: the effect is nil at this scale; more steps or a larger held-out "
            "split (data.prompts.val_size, data.val_samples_per_prompt) would test it properly."
        )
    more = new_seeds(ran, n - stat["n"])
    return (
        f"At the observed mean {stat['mean']:+.3f} and sd {stat['sd']:.3f} over seeds, about {n} seeds would give "
        f"an interval that excludes 0 (now {stat['n']}): add seed={seed_sweep(more)}."
    )


def seed_sweep(seeds: Sequence[int]) -> str:
    """Hydra's sweep value for these seeds: ``range(a,b)`` for more than 3 consecutive ones (b exclusive),
    else the comma list, e.g. ``seed_sweep([9, 10, 11, 12]) == "range(9,13)"``, ``seed_sweep([0, 2]) == "0,2"``.

    Raises:
        ValueError: no seeds.
    """
    if not seeds:
        raise ValueError("seed_sweep needs at least one seed")
    consecutive = len(seeds) > 3 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
    return f"range({seeds[0]},{seeds[-1] + 1})" if consecutive else ",".join(map(str, seeds))


def config_seeds(seeds: Sequence[str]) -> set[str]:
    """Seeds as :func:`seed_of` spells them, with ``default`` (a job without ``seed=``) as the config's
    ``seed: 0``, e.g. ``config_seeds(["default", "3"]) == {"0", "3"}``."""
    return {"0" if s == "default" else s for s in seeds}


def new_seeds(run: Sequence[str], k: int) -> list[int]:
    """The ``k`` smallest non-negative integer seeds not among ``run`` (seeds as :func:`seed_of` spells
    them; ``default``, a job without ``seed=``, is the config's ``seed: 0``): what to add to a sweep that
    already ran ``run``, e.g. ``new_seeds(["3", "4"], 3) == [0, 1, 2]``. Empty when ``k <= 0``."""
    taken, out, seed = config_seeds(run), [], 0
    while len(out) < k:
        if str(seed) not in taken:
            out.append(seed)
        seed += 1
    return out


AT_SCALE = (
    "This is a finding at this scale (the embedded 135M model, the rule judge, the steps and seeds of the "
    "sweep config); the paper's scale (experiment=math/<row>: Qwen3-1.7B, an LLM judge, 500 steps) would test "
    "it properly."
)


def seeds_run(*rows: Row | None) -> list[str]:
    """Every seed (:func:`seed_of`) any job of these rows ran, whether or not it logged what a claim reads."""
    return sorted({seed_of(j) for row in rows if row is not None for j in row.jobs}, key=seed_key)


def next_step(verdict_: str, stat: dict | None, what: str, ran: Sequence[str] = ()) -> str:
    """What to do after a verdict: nothing when it holds, :func:`how_to_decide` when undecided,
    :data:`AT_SCALE` when it does not hold."""
    if verdict_ == HOLDS:
        return ""
    return how_to_decide(stat, what, ran) if verdict_ == UNDECIDED else AT_SCALE


# --- rows -----------------------------------------------------------------------------------------


def row_name(jobs: Sequence[Job], varying: Sequence[str]) -> str:
    """The paper's name of a row from its ``experiment=`` (:data:`ROW_NAMES`), with its other swept
    overrides (``varying``, :func:`swept`) appended; else the swept overrides; ``(no-intervention)``
    marks an unnamed baseline."""
    exp = experiment_of(jobs[0])
    others = [o for o in varying if parse_override(o)[0] != "experiment"]
    if exp in ROW_NAMES:
        return " ".join([ROW_NAMES[exp], *others])
    label = " ".join(varying) or "all jobs"
    return f"{label} (no-intervention)" if is_no_intervention(jobs[0].overrides, jobs[0].config) else label


def swept(jobs: Sequence[Job], job: Job) -> list[str]:
    """``job``'s overrides that not every one of ``jobs`` shares, without ``seed=``: what its row varies
    (none when all jobs share them, e.g. a multirun of one job)."""
    common = set.intersection(*({normalize_override(o) for o in j.overrides} for j in jobs))
    return [o for o in job.overrides if normalize_override(o) not in common and not is_seed_override(o)]


def rows_of(jobs: Sequence[Job]) -> list[Row]:
    """The rows (settings over seeds) of a multirun's jobs, in order of first appearance, named by
    :func:`row_name` from the overrides that differ between the jobs."""
    return [
        Row(name=row_name(group, swept(jobs, group[0])), jobs=list(group), stats=stats)
        for group, stats in zip(group_by_seed(jobs), summarize_seeds(jobs))
    ]


def paper_order(row: Row) -> int:
    """Sort key: the rows of :data:`ROW_NAMES` in that order (MInTRL-Const, GRPO, no-intervention, ...),
    then any other row (a stable sort keeps their order of appearance)."""
    names = list(ROW_NAMES.values())
    return names.index(row.name) if row.name in names else len(names)


def find_row(rows: Sequence[Row], name: str) -> Row | None:
    """The row of that name (:func:`row_name`), None when absent."""
    return next((r for r in rows if r.name == name), None)


def budget(job: Job) -> dict:
    """The budget a job ran with, from its composed ``.hydra/config.yaml``: ``max_steps`` (optimizer
    steps), ``prompts_per_step``, ``rollouts_per_prompt`` (n_control + n_semi), ``max_response_tokens``
    (tokens) and ``task`` (the data's ``task_kwargs``); None where missing or not a literal."""

    def num(path):
        v = _get(job.config, path)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    nc, ns = num("rollout.n_control"), num("rollout.n_semi")
    return {
        "max_steps": num("trainer.max_steps"),
        "prompts_per_step": num("data.prompts_per_step"),
        "rollouts_per_prompt": None if nc is None or ns is None else nc + ns,
        "max_response_tokens": num("rollout.max_response_tokens"),
        "task": _get(job.config, "data.prompts.task_kwargs"),
    }


def row_budget(row: Row) -> dict:
    """:func:`budget` shared by every job of a row (a key whose jobs disagree is None)."""
    budgets = [budget(j) for j in row.jobs]
    return {k: budgets[0][k] if all(b[k] == budgets[0][k] for b in budgets) else None for k in budgets[0]}


def equal_budget(rows: Sequence[Row]) -> bool:
    """Whether every row ran the same steps, prompts per step, rollouts per prompt and response limit
    (all known)."""
    keys = ("max_steps", "prompts_per_step", "rollouts_per_prompt", "max_response_tokens")
    budgets = [row_budget(r) for r in rows]
    return all(all(b[k] is not None and b[k] == budgets[0][k] for b in budgets) for k in keys)


# --- claims ---------------------------------------------------------------------------------------


@dataclass
class Claim:
    """One of the paper's claims with its measurement.

    Attributes:
        key: ``i``, ``ii``, ``iii`` or ``iv``.
        text: the claim.
        verdict: :data:`HOLDS`, :data:`FAILS`, :data:`UNDECIDED` or ``not measured``.
        measure: what was measured, with its interval.
        next_step: what would test it properly (empty when it is decided).
    """

    key: str
    text: str
    verdict: str
    measure: str
    next_step: str = ""


def claim_beats_grpo(const: Row | None, grpo: Row | None) -> tuple[Claim, dict | None]:
    """Claim (i): final held-out pass@1, MInTRL-Const minus GRPO, paired by seed. Returns the claim and
    the :func:`paired_difference` (None when a row is missing)."""
    text = "MInTRL-Const beats GRPO at equal budget (final held-out pass@1)."
    if const is None or grpo is None:
        return Claim("i", text, "not measured", "the multirun lacks the MInTRL-Const or the GRPO row"), None
    diff = paired_difference(per_seed(const.jobs, final_pass), per_seed(grpo.jobs, final_pass))
    v = verdict(diff)
    measure = f"final held-out pass@1, MInTRL-Const minus GRPO, paired by seed: {fmt_diff(diff)} (pass@1 units)"
    return Claim("i", text, v, measure, next_step(v, diff, "paired seeds", seeds_run(const, grpo))), diff


def claim_gap_narrows(const: Row | None) -> tuple[Claim, dict | None]:
    """Claim (ii): the MInTRL-Const runs' ``reward/gap`` narrowing (:func:`gap_narrowing`), interval over
    seeds. Returns the claim and the :func:`~mintrl.eval.summary.mean_interval` (None without data)."""
    text = "The semi-on-policy minus control reward gap narrows over training."
    values = list(per_seed(const.jobs, job_gap_narrowing).values()) if const is not None else []
    if not values:
        why = "the multirun lacks the MInTRL-Const row" if const is None else "fewer than 2 logged steps of reward/gap"
        return Claim("ii", text, "not measured", why), None
    stat = mean_interval(values)
    v = verdict(stat)
    measure = (
        "MInTRL-Const, mean reward/gap over the first third of the training steps minus over the last third "
        f"(positive: narrowed): {fmt_diff(stat)} (reward units)"
    )
    return Claim("ii", text, v, measure, next_step(v, stat, "reward/gap", seeds_run(const))), stat


def claim_entropy(const: Row | None, grpo: Row | None) -> tuple[Claim, dict | None]:
    """Claim (iii): last-step ``train/policy_entropy``, MInTRL-Const minus GRPO, paired by seed."""
    text = "Policy entropy collapses more slowly than under GRPO (last-step entropy higher)."
    if const is None or grpo is None:
        return Claim("iii", text, "not measured", "the multirun lacks the MInTRL-Const or the GRPO row"), None
    diff = paired_difference(per_seed(const.jobs, last_entropy), per_seed(grpo.jobs, last_entropy))
    if diff is None:
        return Claim("iii", text, "not measured", f"no {ENTROPY_TAG} logged in paired seeds"), None
    v = verdict(diff)
    measure = f"last-step {ENTROPY_TAG}, MInTRL-Const minus GRPO, paired by seed: {fmt_diff(diff)} (nats per token)"
    return Claim("iii", text, v, measure, next_step(v, diff, "paired seeds", seeds_run(const, grpo))), diff


def intensity_points(settings: Sequence[Row], baseline: Row | None) -> list[dict]:
    """Per intensity setting: ``name``, ``n`` (seeds), ``offpolicy_frac`` (mean over seeds of each run's
    mean ``rollout/offpolicy_frac``, 0-1), ``delta`` (final pass@1 minus the no-intervention run of the
    same seed, :func:`paired_difference`, pass@1 units; None without a common seed) and ``per_seed``
    (``{seed: delta}``). The no-intervention row itself is the point at fraction 0, delta 0."""
    base = per_seed(baseline.jobs, final_pass) if baseline is not None else {}
    points = []
    if baseline is not None and base:
        zero = {s: 0.0 for s in base}
        points.append(
            {
                "name": baseline.name,
                "n": len(base),
                "offpolicy_frac": 0.0,
                "delta": paired_difference(zero, zero),
                "per_seed": zero,
            }
        )
    for row in settings:
        fracs = [f for j in row.jobs if (f := mean_offpolicy_frac(j.scalars)) is not None]
        finals = per_seed(row.jobs, final_pass)
        diff = paired_difference(finals, base)
        points.append(
            {
                "name": row.name,
                "n": len(finals),
                "offpolicy_frac": sum(fracs) / len(fracs) if fracs else None,
                "delta": diff,
                "per_seed": dict(zip(diff["seeds"], diff["diffs"])) if diff else {},
            }
        )
    return points


def inverted_u(points: Sequence[dict]) -> tuple[str, str]:
    """Claim (iv)'s verdict from :func:`intensity_points` (those with a fraction and a delta), ordered by
    off-policy fraction: the best setting (highest mean delta) must lie strictly inside the range.

    With at least 2 paired seeds: ``holds`` when the best is interior and its per-seed delta minus each
    end's has a 95% interval above 0; ``does not hold`` when the best is an end and its difference to the
    best interior setting has an interval above 0; otherwise ``undecided``. With one seed: ``undecided``
    (the point estimate is said). Fewer than 3 points: ``not measured``.

    Returns:
        ``(verdict, explanation)``.
    """
    pts = sorted(
        (p for p in points if p["offpolicy_frac"] is not None and p["delta"] is not None),
        key=lambda p: p["offpolicy_frac"],
    )
    if len(pts) < 3:
        return "not measured", "fewer than 3 settings with an off-policy fraction and a paired delta pass@1"
    best = max(range(len(pts)), key=lambda i: pts[i]["delta"]["mean"])
    interior = 0 < best < len(pts) - 1
    where = (
        f"the best setting, {pts[best]['name']} (off-policy {100 * pts[best]['offpolicy_frac']:.2f}%, delta "
        f"{pts[best]['delta']['mean']:+.3f}), lies {'strictly inside' if interior else 'at an end of'} the range "
        f"{100 * pts[0]['offpolicy_frac']:.2f}-{100 * pts[-1]['offpolicy_frac']:.2f}%"
    )

    def versus(i: int, j: int) -> dict | None:
        return paired_difference(pts[i]["per_seed"], pts[j]["per_seed"])

    if interior:
        diffs = [versus(best, 0), versus(best, len(pts) - 1)]
        said = f"; best minus lowest fraction {fmt_diff(diffs[0])}, best minus highest {fmt_diff(diffs[1])}"
        if all(verdict(d) == HOLDS for d in diffs):
            return HOLDS, where + said
        return UNDECIDED, where + said + " (an interval contains 0 or there is one seed)"
    inner = max(range(1, len(pts) - 1), key=lambda i: pts[i]["delta"]["mean"])
    d = versus(best, inner)
    said = f"; best end minus best interior setting ({pts[inner]['name']}) {fmt_diff(d)}"
    if verdict(d) == HOLDS:
        return FAILS, where + said
    return UNDECIDED, where + said + " (the interval contains 0 or there is one seed)"


# --- provenance -----------------------------------------------------------------------------------


def job_span(job_dir: Path) -> tuple[float, float] | None:
    """When a job ran (seconds since the epoch): from its ``provenance.json`` start (else its first
    logged scalar) to its last logged scalar (:func:`mintrl.eval.tensorboard.event_times`); without event
    files, the first and last modification time of its files. None for an empty folder."""
    logged = event_times(job_dir)
    if logged is not None:
        started = read_started(job_dir)
        return (min(started, logged[0]) if started is not None else logged[0]), logged[1]
    mtimes = [p.stat().st_mtime for p in Path(job_dir).rglob("*") if p.is_file()]
    return (min(mtimes), max(mtimes)) if mtimes else None


def wall_time(job_dirs: Sequence[Path], jobs: Sequence[Job]) -> dict:
    """The wall time of the jobs, two ways (seconds):

    * ``step_seconds``: the sum over jobs of the logged ``perf/step_seconds`` (training steps, including
      validations between steps; not start-up, model loading or the validation before step 1);
    * ``elapsed``: per multirun folder (the jobs' parent folder) the last job's end minus the first job's
      start (:func:`job_span`: recorded times, which survive a copy or a git checkout), summed over the
      folders, so seeds added by a later multirun do not count the hours between the two (start-up and
      validations included; None without any job span).
    """
    step_seconds = sum(sum(tag_values(j.scalars, STEP_SECONDS_TAG)) for j in jobs)
    by_folder: dict[Path, list[tuple[float, float]]] = {}
    for d in job_dirs:
        span = job_span(Path(d))
        if span is not None:
            by_folder.setdefault(Path(d).parent, []).append(span)
    spans = [max(e for _, e in s) - min(b for b, _ in s) for s in by_folder.values()]
    return {"step_seconds": step_seconds, "elapsed": sum(spans) if spans else None}


def job_commits(jobs: Sequence[Job]) -> dict[str, list[str]]:
    """``{commit: [job names]}`` from each job's ``provenance.json``
    (:func:`mintrl.core.manifest.read_commit`), in order of first appearance; jobs without the file
    are listed under ``not recorded``.

    Raises:
        ValueError: a job's provenance file is not valid JSON.
    """
    out: dict[str, list[str]] = {}
    for job in jobs:
        out.setdefault(read_commit(job.path) or NOT_RECORDED, []).append(job.name)
    return out


def fmt_commits(commits: dict[str, list[str]], head: str) -> str:
    """The report's commit line: the commit(s) the jobs recorded with their job counts, or ``head`` (the
    report's checkout) when no job recorded one."""
    recorded = {c: names for c, names in commits.items() if c != NOT_RECORDED}
    if not recorded:
        return f"`{head}` (the checkout writing the report: the jobs recorded no provenance.json)"

    def jobs(names: list[str]) -> str:
        return f"{len(names)} job" + ("" if len(names) == 1 else "s")

    parts = [f"`{c}` ({jobs(names)})" for c, names in recorded.items()]
    if NOT_RECORDED in commits:
        parts.append(f"not recorded ({jobs(commits[NOT_RECORDED])})")
    return "; ".join(parts) + " (each job's provenance.json)"


def fmt_seconds(seconds: float | None) -> str:
    """``1 h 02 min`` / ``3.5 min`` / ``42 s``; ``n/a`` for None."""
    if seconds is None:
        return "n/a"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


# --- figures --------------------------------------------------------------------------------------


def plot_training(rows: Sequence[Row], path: str | Path | None = None):
    """Two panels per row (mean over seeds, 95% interval band where 2+ seeds logged the step):
    ``reward/gap`` (semi-on-policy minus control reward, reward units) and ``train/policy_entropy``
    (nats per policy token) against the optimizer step. Agg backend; returns the Figure, writes
    ``path`` when given."""
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
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def plot_intensity_points(points: Sequence[dict], path: str | Path | None = None):
    """Claim (iv): delta pass@1 vs no-intervention (points, percentage points, 95% interval as error bar)
    against the off-policy token fraction (percent), one labelled point per setting."""
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
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


# --- the report -----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def rows_table(rows: Sequence[Row]) -> str:
    """The rows as a markdown table: seeds, final pass@1 and area under the held-out curve (mean [95%
    interval] over seeds, pass@1 units), one run's binomial SE, last-step entropy (nats) and the budget."""
    lines = [
        "| row | seeds (n) | final held-out pass@1 | area under held-out curve | one run's SE (N) "
        "| last-step entropy (nats) | steps | rollouts per prompt |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        s = row.stats
        ran = [seed_of(j) for j in row.jobs if j.name not in s["missing"]]
        seeds = (",".join(ran) or "none") + f" ({s['n']})"
        if s["missing"]:
            seeds += "; no event files: job " + ", ".join(s["missing"])
        se = f"{s['run_se']:.3f} (N={s['heldout_n']})" if s["run_se"] is not None else "n/a"
        ent = list(per_seed(row.jobs, last_entropy).values())
        b = row_budget(row)
        cells = [
            row.name,
            seeds,
            fmt_interval(s["final_pass_at_1"]),
            fmt_interval(s["area_under_curve"]),
            se,
            fmt_interval(mean_interval(ent)) if ent else "n/a",
            b["max_steps"] if b["max_steps"] is not None else "?",
            b["rollouts_per_prompt"] if b["rollouts_per_prompt"] is not None else "?",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def paired_table(const: Row, grpo: Row, diff: dict) -> str:
    """Per seed: MInTRL-Const's and GRPO's final pass@1 and their difference, then the mean [interval]."""
    a, b = per_seed(const.jobs, final_pass), per_seed(grpo.jobs, final_pass)
    lines = ["| seed | MInTRL-Const | GRPO | difference |", "| --- | --- | --- | --- |"]
    for s, d in zip(diff["seeds"], diff["diffs"]):
        lines.append(f"| {s} | {a[s]:.3f} | {b[s]:.3f} | {d:+.3f} |")
    lines.append(f"| mean [95% interval] | | | {fmt_diff(diff)} |")
    return "\n".join(lines)


def read_multiruns(multirun_dirs: Sequence[str | Path]) -> tuple[list[Path], list[Job]]:
    """The job folders and jobs of one or more multiruns (e.g. seeds 0-2, then seeds 3-6 run later with the
    same overrides). With several folders a job is named by its folder's path, so names stay unique.

    Raises:
        FileNotFoundError: a folder is missing or holds no Hydra job (:func:`mintrl.eval.summary.find_jobs`).
        ValueError: two jobs of the same row (overrides equal apart from the seed) have the same seed
            (names both): their pairing by seed would be ambiguous.
    """
    dirs, jobs = [], []
    for folder in multirun_dirs:
        paths = find_jobs(folder)
        dirs += paths
        for job in map(read_job, paths):
            jobs.append(job if len(multirun_dirs) == 1 else replace(job, name=str(job.path)))
    for group in group_by_seed(jobs):
        seen: dict[str, Job] = {}
        for job in group:
            other = seen.setdefault(seed_of(job), job)
            if other is not job:
                raise ValueError(
                    f"jobs {other.path} and {job.path} run the same setting with seed={seed_of(job)}: "
                    "give each multirun other seeds"
                )
    return dirs, jobs


def intensity_next_step(intensity_rows: Sequence[Row], baseline: Row | None) -> str:
    """What would decide claim (iv): first the seeds some settings of the sweep ran and others did not (a
    sweep stopped part-way, or extra settings run at fewer seeds: those settings have no paired delta at
    that seed yet; settings lacking the same seeds are named together, by the ones that have them when
    those are fewer), then 2 more seeds of the whole sweep (:func:`new_seeds` beyond every seed it ran)
    and, for the seeds the no-intervention row has not run, that row too (each setting's delta pairs
    with the no-intervention job of its seed).

    Args:
        intensity_rows: the sweep's settings (:func:`rows_of` over its jobs).
        baseline: the no-intervention row, None when the methods multirun lacks it.
    """
    ran = [set(seeds_run(row)) for row in intensity_rows]
    every = set().union(*ran)
    gaps = [(row.name, sorted(every - seeds, key=seed_key)) for row, seeds in zip(intensity_rows, ran) if every - seeds]
    more = new_seeds(sorted(every), 2)
    have = config_seeds(seeds_run(baseline))
    unfinished = sorted({int(s) for _, seeds in gaps for s in seeds if s.isdigit()})
    lacking = [m for m in unfinished + more if str(m) not in have]
    base = (
        f", with the no-intervention row of seed={seed_sweep(lacking)} (experiment=no_intervention)" if lacking else ""
    )
    by_seeds: dict[tuple[str, ...], list[str]] = {}
    for name, seeds in gaps:
        by_seeds.setdefault(tuple(seeds), []).append(name)
    parts = []
    for seeds, names in by_seeds.items():
        others = [row.name for row in intensity_rows if row.name not in names]
        who = f"all but {'; '.join(others)}" if len(names) > len(others) else "; ".join(names)
        parts.append(f"seed={','.join(seeds)} for {len(names)} of {len(intensity_rows)} settings ({who})")
    finish = f"Finish {'; '.join(parts)}. " if parts else ""
    return (
        f"{finish}More seeds per setting (add INTENSITY_ARGS=seed={seed_sweep(more)}{base}) and settings on both "
        "sides of the best fraction."
    )


def _folders(dirs: str | Path | Sequence[str | Path]) -> list[str | Path]:
    """One folder or several, as a list."""
    return [dirs] if isinstance(dirs, (str, Path)) else list(dirs)


def build_report(
    multirun_dir: str | Path | Sequence[str | Path],
    intensity_dir: str | Path | Sequence[str | Path] | None = None,
    repo_dir: str | Path = ".",
) -> dict:
    """Read the multirun(s) and compute everything the report says (no files written).

    Args:
        multirun_dir: the methods multirun (``+sweep=reproduce_core`` or ``reproduce_full``), or a list of
            such folders whose jobs are pooled (:func:`read_multiruns`: seeds added by a later multirun).
        intensity_dir: the ``+sweep=reproduce_intensity`` multirun, or a list of such folders whose jobs are
            pooled (seeds added later), or None (claim (iv) not measured).
        repo_dir: where ``git rev-parse HEAD`` runs (named when the jobs recorded no commit).

    Returns:
        ``{"rows", "intensity_rows", "claims", "const_minus_grpo", "points", "effects", "commit", "machine",
        "wall", "equal_budget", "multirun_dir", "intensity_dir"}``; ``effects`` is the intensity sweep's
        :func:`~mintrl.eval.knob_effects.main_effects` on final pass@1 (empty without a sweep), ``commit`` the
        markdown of :func:`fmt_commits`, ``multirun_dir`` the folders joined by ``, ``.

    Raises:
        FileNotFoundError: a folder is missing or holds no Hydra job (:func:`mintrl.eval.summary.find_jobs`).
        ValueError: a seed is run twice for one row (:func:`read_multiruns`), or a job's provenance.json is
            not valid JSON.
    """
    folders = _folders(multirun_dir)
    dirs, jobs = read_multiruns(folders)
    rows = sorted(rows_of(jobs), key=paper_order)  # folders added later (a baseline's seed) keep the table's order
    const, grpo = find_row(rows, CONST), find_row(rows, GRPO)
    c1, diff = claim_beats_grpo(const, grpo)
    c2, _ = claim_gap_narrows(const)
    c3, _ = claim_entropy(const, grpo)
    intensity_rows: list[Row] = []
    points: list[dict] = []
    effects: list[dict] = []
    text4 = "The off-policy intensity sweep shows an inverted U in the off-policy token fraction (paper: 2-4% best)."
    all_jobs = list(jobs)
    ifolders = [] if intensity_dir is None else _folders(intensity_dir)
    if ifolders:
        ipaths, ijobs = read_multiruns(ifolders)
        dirs += ipaths
        all_jobs += ijobs
        intensity_rows = rows_of(ijobs)
        settings = intensity_rows + ([const] if const is not None else [])
        baseline = find_row(rows, NO_INTERVENTION)
        points = intensity_points(settings, baseline)
        v4, why4 = inverted_u(points)
        effects = main_effects(ijobs, final_pass, seed_of)
        c4 = Claim("iv", text4, v4, why4, "" if v4 in (HOLDS, FAILS) else intensity_next_step(intensity_rows, baseline))
    else:
        c4 = Claim("iv", text4, "not measured", "no intensity sweep (make reproduce-full runs it)")
    return {
        "rows": rows,
        "intensity_rows": intensity_rows,
        "claims": [c1, c2, c3, c4],
        "const_minus_grpo": diff,
        "points": points,
        "effects": effects,
        "commit": fmt_commits(job_commits(all_jobs), git_commit(repo_dir)),
        "machine": machine(),
        "wall": wall_time(dirs, all_jobs),
        "equal_budget": equal_budget(rows + intensity_rows),
        "multirun_dir": ", ".join(str(f) for f in folders),
        "intensity_dir": ", ".join(str(f) for f in ifolders) or None,
    }


EFFECT_READING = {HOLDS: "the high level is better", FAILS: "the low level is better", UNDECIDED: "undecided"}


def effects_table(effects: Sequence[dict]) -> list[str]:
    """Markdown lines of the intensity sweep's main effects (:func:`mintrl.eval.knob_effects.main_effects`
    on final pass@1): per knob the levels, the matched pairs, the effect with its interval, per seed, and
    the reading of the interval (:func:`verdict`)."""
    out = [
        "### Which knob moves pass@1 (main effects)",
        "",
        "Per knob: final held-out pass@1 at its highest level minus at its lowest, over the settings equal on "
        "the other knobs (matched pairs), averaged over the pairs per seed; the interval is over seeds.",
        "",
        "| knob | low -> high | matched pairs | effect on final pass@1 | per seed | reading |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in effects:
        stat = e["effect"]
        seeds = ", ".join(f"{s}: {d:+.3f}" for s, d in zip(stat["seeds"], stat["diffs"])) if stat else "n/a"
        reading = EFFECT_READING[verdict(stat)] if stat else "not measured"
        out.append(
            f"| {e['knob']} | {e['low']} -> {e['high']} | {e['pairs']} | {fmt_diff(stat)} | {seeds} | {reading} |"
        )
    return out + [""]


def render_markdown(report: dict, figures: dict[str, str]) -> str:
    """The report of :func:`build_report` as markdown; ``figures`` maps a caption to a PNG path relative
    to the markdown file."""
    rows, m, w = report["rows"], report["machine"], report["wall"]
    first = rows[0].jobs[0] if rows and rows[0].jobs else None
    b = budget(first) if first is not None else {}
    out = [
        "# Reproduction: MInTRL vs GRPO on the hard embedded task",
        "",
        f"Written by `mintrl-reproduce` on {time.strftime('%Y-%m-%d %H:%M %Z')}; numbers below are measured, not copied.",
        "",
        f"- **multirun(s)**: `{report['multirun_dir']}`"
        + (f", intensity sweep `{report['intensity_dir']}`" if report["intensity_dir"] else ""),
        f"- **commit**: {report['commit']}",
        f"- **machine** (the one writing this report): {m['platform']}, {m['processor']}, {m['cpu_count']} logical CPUs, "
        f"Python {m['python']}, torch {m['torch']}",
        f"- **wall time**: {fmt_seconds(w['elapsed'])} from the first job's start to the last job's last logged scalar "
        "(per multirun folder, summed); "
        f"{fmt_seconds(w['step_seconds'])} summed over the jobs' logged `{STEP_SECONDS_TAG}` (training steps only)",
        f"- **task**: `{b.get('task')}`; {b.get('max_steps')} optimizer steps of {b.get('prompts_per_step')} prompts x "
        f"{b.get('rollouts_per_prompt')} rollouts (MInTRL rows: n_control + n_semi), responses up to "
        f"{b.get('max_response_tokens')} tokens",
        "- **equal budget** (steps, prompts per step, rollouts per prompt, response limit in every job's config): "
        + ("yes" if report["equal_budget"] else "**no**: compare the steps and rollouts columns"),
        "",
        "## Rows",
        "",
        rows_table(rows),
        "",
        INTERVAL_NOTE,
        "",
    ]
    const, grpo, diff = find_row(rows, CONST), find_row(rows, GRPO), report["const_minus_grpo"]
    out += ["## MInTRL-Const minus GRPO (final held-out pass@1, paired by seed)", ""]
    if diff is not None:
        out += [
            paired_table(const, grpo, diff),
            "",
            "Interval: per-seed differences d_s, mean ± t(0.975, n-1) · sd(d) / sqrt(n) (Student t over the n paired seeds).",
            "",
        ]
    else:
        out += ["Not measured: the multirun lacks a MInTRL-Const and a GRPO job of a common seed.", ""]
    out += ["## The paper's claims", "", "| claim | verdict | measured |", "| --- | --- | --- |"]
    for c in report["claims"]:
        out.append(f"| ({c.key}) {_cell(c.text)} | **{c.verdict}** | {_cell(c.measure)} |")
    out += [""]
    for c in report["claims"]:
        if c.next_step:
            out.append(f"- ({c.key}) {c.verdict}: {c.next_step}")
    out += [
        "",
        "Verdicts: **holds** when the 95% interval of the difference lies above 0, **does not hold** when it lies below 0, "
        "**undecided** when it contains 0 or one seed gives no interval.",
        "",
    ]
    if report["points"]:
        out += [
            "## Off-policy intensity (claim iv)",
            "",
            "| setting | seeds | off-policy token fraction (%) | delta final pass@1 vs no-intervention, paired by seed "
            "| per seed |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in sorted(report["points"], key=lambda p: (p["offpolicy_frac"] is None, p["offpolicy_frac"] or 0)):
            frac = "n/a" if p["offpolicy_frac"] is None else f"{100 * p['offpolicy_frac']:.2f}"
            seeds = ", ".join(f"{k}: {v:+.3f}" for k, v in p["per_seed"].items()) or "n/a"
            out.append(f"| {_cell(p['name'])} | {p['n']} | {frac} | {fmt_diff(p['delta'])} | {seeds} |")
        out += [""]
    if report.get("effects"):
        out += effects_table(report["effects"])
    if figures:
        out += ["## Figures", ""]
        for caption, rel in figures.items():
            out += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    return "\n".join(out).rstrip() + "\n"


def figure_paths(out: str | Path, intensity: bool) -> dict[str, Path]:
    """The report's figures, caption -> PNG path next to ``out``: ``<stem>_curves.png`` (held-out curves
    with bands), ``<stem>_training.png`` (reward gap and entropy) and, with an intensity sweep
    (``intensity``), ``<stem>_intensity.png``."""
    out = Path(out)
    figures = {
        "Held-out pass@1 per row, mean over seeds with the 95% interval band": out.with_name(f"{out.stem}_curves.png"),
        "reward/gap and train/policy_entropy per row, mean over seeds with the 95% interval band": out.with_name(
            f"{out.stem}_training.png"
        ),
    }
    if intensity:
        figures["Off-policy intensity: delta final pass@1 vs off-policy token fraction"] = out.with_name(
            f"{out.stem}_intensity.png"
        )
    return figures


def write_report(
    multirun_dir: str | Path | Sequence[str | Path],
    out: str | Path = "docs/reproduction.md",
    intensity_dir: str | Path | Sequence[str | Path] | None = None,
    repo_dir: str | Path = ".",
) -> dict:
    """Write the reproduction report: the markdown at ``out`` and its figures next to it
    (``<stem>_curves.png``: held-out curves with bands; ``<stem>_training.png``: reward gap and entropy;
    ``<stem>_intensity.png`` with an intensity sweep).

    Returns:
        :func:`build_report`'s dict plus ``out`` (Path) and ``figures`` (caption -> PNG path).

    Raises:
        FileNotFoundError: a multirun folder is missing or holds no job.
        ValueError: see :func:`build_report`.
    """
    import matplotlib.pyplot as plt

    report = build_report(multirun_dir, intensity_dir, repo_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figures = figure_paths(out, bool(report["points"]))
    paths = list(figures.values())
    # summary.plot_curves labels a row by its "varying" overrides: give it the row's name instead
    named = [{**r.stats, "varying": [r.name.replace("=", ":")], "no_intervention": False} for r in report["rows"]]
    plt.close(plot_curves(named, paths[0], title="Held-out pass@1 (hard task)"))
    plt.close(plot_training(report["rows"], paths[1]))
    if report["points"]:
        plt.close(plot_intensity_points(report["points"], paths[2]))
    out.write_text(render_markdown(report, {c: p.name for c, p in figures.items()}))
    return {**report, "out": out, "figures": figures}
