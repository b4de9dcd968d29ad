"""The paper's claims and their verdicts, measured on the reproduction's rows (:mod:`mintrl.analysis.rows`):

(i) MInTRL-Const beats GRPO at equal budget: final held-out pass@1, Const minus GRPO, per seed, interval over
    seeds (:func:`claim_beats_grpo`);
(ii) the semi-on-policy minus control reward gap (``reward/gap``) narrows over training: per run the mean gap
    over the first third of the logged training steps minus its mean over the last third
    (:func:`mintrl.analysis.measures.gap_narrowing`, reward units), interval over the MInTRL-Const seeds
    (:func:`claim_gap_narrows`);
(iii) entropy collapses more slowly than under GRPO: the last logged ``train/policy_entropy`` (nats per policy
    token), Const minus GRPO, per seed, interval over seeds (:func:`claim_entropy`);
(iv) (full reproduction) an inverted U in the off-policy token fraction: per intensity setting the mean
    off-policy fraction and delta pass@1 against the no-intervention row of the same seed
    (:func:`intensity_points`; MInTRL-Const's core setting and the no-intervention row, at fraction 0, are
    points too); ordered by fraction, it holds when the best setting lies strictly inside the range and its
    per-seed delta minus each end's has an interval above 0, and does not hold when the best is an end whose
    difference to the best interior setting has an interval above 0 (:func:`inverted_u`).

Every interval is Student t over seeds (:func:`mintrl.analysis.stats.mean_interval`). A verdict
(:func:`mintrl.analysis.stats.verdict`) is ``holds`` when the interval lies above zero, ``does not hold`` when
it lies below zero, ``undecided`` when it contains zero or there is one seed only; an undecided claim comes
with the seeds that would decide it if the mean and standard deviation stayed as observed
(:func:`how_to_decide`), named among the seeds not run yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mintrl.analysis.measures import ENTROPY_TAG, final_pass, job_gap_narrowing, last_entropy, mean_offpolicy_frac
from mintrl.analysis.rows import Row, per_seed, seeds_run
from mintrl.analysis.stats import (
    FAILS,
    HOLDS,
    MAX_SEEDS,
    UNDECIDED,
    mean_interval,
    paired_difference,
    seed_key,
    seeds_needed,
    verdict,
)
from mintrl.analysis.tables import fmt_diff

NOT_MEASURED = "not measured"


@dataclass
class Claim:
    """One of the paper's claims with its measurement.

    Attributes:
        key: ``i``, ``ii``, ``iii`` or ``iv``.
        text: the claim.
        verdict: :data:`~mintrl.analysis.stats.HOLDS`, :data:`~mintrl.analysis.stats.FAILS`,
            :data:`~mintrl.analysis.stats.UNDECIDED` or :data:`NOT_MEASURED`.
        measure: what was measured, with its interval.
        next_step: what would test it properly (empty when it is decided).
    """

    key: str
    text: str
    verdict: str
    measure: str
    next_step: str = ""


CORE_SWEEP = "configs/sweep/confirm_core.yaml"  # the example a plan for a core claim names
AGENT_SWEEP = "configs/sweep/confirm_agents_db.yaml"  # the example a plan for an agent claim (R1-R4) names


def how_to_decide(stat: dict | None, what: str, ran: Sequence[str] = (), sweep: str = CORE_SWEEP) -> str:
    """What would decide an undecided difference: with one seed, more seeds; otherwise the seeds needed at the observed
    mean and sd (:func:`mintrl.analysis.stats.seeds_needed`), as a new plan of that many seeds (:func:`fresh_plan`)
    named among the seeds not in ``ran`` (every seed the rows involved already ran,
    :func:`mintrl.analysis.rows.seeds_run`) so the suggestion never repeats a run; ``sweep``: the confirmation sweep
    file the plan names as its example."""
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
    return (
        f"At the observed mean {stat['mean']:+.3f} and sd {stat['sd']:.3f} over seeds, about {n} seeds would give "
        f"an interval that excludes 0 (now {stat['n']}): {fresh_plan(new_seeds(ran, n), sweep)}."
    )


def fresh_plan(seeds: Sequence[int], sweep: str = CORE_SWEEP) -> str:
    """The advice that decides a claim with seeds fixed before any of its runs: ``seeds`` (none of them run yet) in
    a sweep file of their own, as ``sweep`` (a confirmation sweep of the same kind of rows: :data:`CORE_SWEEP`,
    :data:`AGENT_SWEEP`), never seeds added to the runs already read until an interval clears 0, e.g.
    ``fresh_plan([9, 10, 11])`` names ``seed=9,10,11``."""
    return (
        f"decide it with a new plan of {len(seeds)} seeds fixed before its runs (seed={seed_sweep(seeds)}, in a sweep "
        f"file of its own as {sweep}), not by adding seeds to these runs"
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
    """Seeds as :func:`mintrl.analysis.runs.seed_of` spells them, with ``default`` (a job without ``seed=``) as the
    config's ``seed: 0``, e.g. ``config_seeds(["default", "3"]) == {"0", "3"}``."""
    return {"0" if s == "default" else s for s in seeds}


def new_seeds(run: Sequence[str], k: int) -> list[int]:
    """The ``k`` smallest non-negative integer seeds not among ``run`` (seeds as :func:`mintrl.analysis.runs.seed_of`
    spells them; ``default``, a job without ``seed=``, is the config's ``seed: 0``): what to add to a sweep that
    already ran ``run``, e.g. ``new_seeds(["3", "4"], 3) == [0, 1, 2]``. Empty when ``k <= 0``."""
    taken, out, seed = config_seeds(run), [], 0
    while len(out) < k:
        if str(seed) not in taken:
            out.append(seed)
        seed += 1
    return out


AT_SCALE = (
    "This is a finding at this scale (the embedded 135M model, the rule judge, the steps and seeds of the "
    "sweep config); the paper's scale (method=<row> preset=paper_math: Qwen3-1.7B, an LLM judge, 500 steps) would test "
    "it properly."
)


def next_step(verdict_: str, stat: dict | None, what: str, ran: Sequence[str] = ()) -> str:
    """What to do after a verdict: nothing when it holds, :func:`how_to_decide` when undecided,
    :data:`AT_SCALE` when it does not hold."""
    if verdict_ == HOLDS:
        return ""
    return how_to_decide(stat, what, ran) if verdict_ == UNDECIDED else AT_SCALE


# --- claims (i)-(iii) ----------------------------------------------------------------------------


def claim_beats_grpo(const: Row | None, grpo: Row | None) -> tuple[Claim, dict | None]:
    """Claim (i): final held-out pass@1, MInTRL-Const minus GRPO, paired by seed. Returns the claim and
    the :func:`mintrl.analysis.stats.paired_difference` (None when a row is missing)."""
    text = "MInTRL-Const beats GRPO at equal budget (final held-out pass@1)."
    if const is None or grpo is None:
        return Claim("i", text, NOT_MEASURED, "the multirun lacks the MInTRL-Const or the GRPO row"), None
    diff = paired_difference(per_seed(const.jobs, final_pass), per_seed(grpo.jobs, final_pass))
    v = verdict(diff)
    measure = f"final held-out pass@1, MInTRL-Const minus GRPO, paired by seed: {fmt_diff(diff)} (pass@1 units)"
    return Claim("i", text, v, measure, next_step(v, diff, "paired seeds", seeds_run(const, grpo))), diff


def claim_gap_narrows(const: Row | None) -> tuple[Claim, dict | None]:
    """Claim (ii): the MInTRL-Const runs' ``reward/gap`` narrowing (:func:`mintrl.analysis.measures.gap_narrowing`),
    interval over seeds. Returns the claim and the :func:`~mintrl.analysis.stats.mean_interval` (None without
    data)."""
    text = "The semi-on-policy minus control reward gap narrows over training."
    values = list(per_seed(const.jobs, job_gap_narrowing).values()) if const is not None else []
    if not values:
        why = "the multirun lacks the MInTRL-Const row" if const is None else "fewer than 2 logged steps of reward/gap"
        return Claim("ii", text, NOT_MEASURED, why), None
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
        return Claim("iii", text, NOT_MEASURED, "the multirun lacks the MInTRL-Const or the GRPO row"), None
    diff = paired_difference(per_seed(const.jobs, last_entropy), per_seed(grpo.jobs, last_entropy))
    if diff is None:
        return Claim("iii", text, NOT_MEASURED, f"no {ENTROPY_TAG} logged in paired seeds"), None
    v = verdict(diff)
    measure = f"last-step {ENTROPY_TAG}, MInTRL-Const minus GRPO, paired by seed: {fmt_diff(diff)} (nats per token)"
    return Claim("iii", text, v, measure, next_step(v, diff, "paired seeds", seeds_run(const, grpo))), diff


# --- claim (iv): the off-policy intensity sweep ---------------------------------------------------


def intensity_points(settings: Sequence[Row], baseline: Row | None) -> list[dict]:
    """Per intensity setting: ``name``, ``n`` (seeds), ``offpolicy_frac`` (mean over seeds of each run's mean
    ``rollout/offpolicy_frac``, 0-1), ``delta`` (final pass@1 minus the no-intervention run of the same seed,
    :func:`mintrl.analysis.stats.paired_difference`, pass@1 units; None without a common seed) and ``per_seed``
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
        return NOT_MEASURED, "fewer than 3 settings with an off-policy fraction and a paired delta pass@1"
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


def intensity_next_step(intensity_rows: Sequence[Row], baseline: Row | None) -> str:
    """What would decide claim (iv): first the seeds some settings of the sweep ran and others did not (a
    sweep stopped part-way, or extra settings run at fewer seeds: those settings have no paired delta at
    that seed yet; settings lacking the same seeds are named together, by the ones that have them when
    those are fewer), then 2 more seeds of the whole sweep (:func:`new_seeds` beyond every seed it ran)
    and, for the seeds the no-intervention row has not run, that row too (each setting's delta pairs
    with the no-intervention job of its seed).

    Args:
        intensity_rows: the sweep's settings (:func:`mintrl.analysis.rows.rows_of` over its jobs).
        baseline: the no-intervention row, None when the methods multirun lacks it.
    """
    ran = [set(seeds_run(row)) for row in intensity_rows]
    every = set().union(*ran)
    gaps = [(row.name, sorted(every - seeds, key=seed_key)) for row, seeds in zip(intensity_rows, ran) if every - seeds]
    more = new_seeds(sorted(every), 2)
    have = config_seeds(seeds_run(baseline))
    unfinished = sorted({int(s) for _, seeds in gaps for s in seeds if s.isdigit()})
    lacking = [m for m in unfinished + more if str(m) not in have]
    base = f", with the no-intervention row of seed={seed_sweep(lacking)} (method=no_intervention)" if lacking else ""
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
        f"{finish}Then a new plan, fixed before its runs, of more seeds per setting (INTENSITY_ARGS=seed="
        f"{seed_sweep(more)}{base}) and settings on both sides of the best fraction, not seeds added until an "
        "interval clears 0."
    )
