"""RAIL's claims at equal budget on the agent rows (:mod:`mintrl.analysis.agent_rows`), each a
:class:`mintrl.analysis.claims.Claim` with a measured verdict (``holds`` / ``does not hold`` / ``undecided``), its
interval, and for an undecided one the seeds (or decisions) that would decide it:

R1  RAIL's held-out success is at least uniform GRPO-8's at equal or fewer episodes generated (RAIL Figure 1),
    paired by seed on the claims' level (:func:`claim_success`);
R2  RAIL is at least entropy branching at equal budget, the same way (:func:`claim_success`);
R3  the controller's predicted gain tracks the realised gain (RAIL eq. 2): Spearman rank correlation over RAIL's
    decisions with a prediction, pooled over seeds (:func:`claim_prediction_tracks`);
R4  live decisions realise more gain than the shadow phase's decisions, random actions or random anchors (RAIL
    section 3.2), decisions as the unit (:func:`claim_live_beats`);

all four on one level's rows: :func:`measure_claims`.
"""

from __future__ import annotations

import math
from typing import Sequence

from mintrl.analysis.agent_rows import (
    ENTROPY8,
    GRPO8,
    RAIL8,
    RANDOM8,
    AgentRow,
    find_agent_row,
    generated_per_task,
    heldout_success,
    read_decisions,
)
from mintrl.analysis.agent_stats import (
    calibration_bins,
    decisions_to_clear_zero,
    spearman_interval,
    welch_difference,
    welch_scale,
)
from mintrl.analysis.claims import AGENT_SWEEP, NOT_MEASURED, Claim, fresh_plan, how_to_decide, new_seeds
from mintrl.analysis.rows import per_seed, seeds_run
from mintrl.analysis.runs import seed_of
from mintrl.analysis.stats import FAILS, HOLDS, UNDECIDED, paired_difference, verdict
from mintrl.analysis.tables import fmt_diff

EPISODE_TOLERANCE = 0.01  # episodes per task RAIL may exceed the other row by and still count as equal budget
AGENT_SCALE = (
    "This is a finding at this scale (the embedded 135M model with the settings of "
    "configs/sweep/reproduce_agents.yaml: a few steps at 8 episodes per task); RAIL's scale "
    "(experiment=paper/agent_rail preset=paper_sql: Qwen3-1.7B, hundreds of steps, 16 episodes per task) would "
    "test it properly."
)


def agent_next_step(verdict_: str, stat: dict | None, what: str, ran: Sequence[str] = ()) -> str:
    """What to do after a verdict over seeds: nothing when it holds, the seeds that would decide it when
    undecided (:func:`mintrl.analysis.claims.how_to_decide`), :data:`AGENT_SCALE` when it does not hold."""
    if verdict_ == HOLDS:
        return ""
    return how_to_decide(stat, what, ran, AGENT_SWEEP) if verdict_ == UNDECIDED else AGENT_SCALE


def mean_episodes(row: AgentRow) -> float | None:
    """Episodes generated per task (:func:`mintrl.analysis.agent_rows.generated_per_task`), mean over the row's
    seeds that logged it; None when none did."""
    values = list(per_seed(row.jobs, generated_per_task).values())
    return sum(values) / len(values) if values else None


def claim_success(rail: AgentRow | None, other: AgentRow | None, key: str, name: str) -> tuple[Claim, dict]:
    """R1 (``other`` uniform GRPO-8) or R2 (entropy branching): held-out success (0-1, last ``val/pass@1``),
    RAIL minus ``other``, paired by seed, with the Student t 95% interval over seeds
    (:func:`mintrl.analysis.stats.paired_difference`), at equal or fewer episodes generated per task (RAIL
    Figure 1's axes).

    Rule: **does not hold** when RAIL generated more episodes per task than ``other`` (means over seeds of
    ``allocation/generated_per_prompt``, by more than :data:`EPISODE_TOLERANCE`) or when the interval lies
    below 0; **holds** when the interval lies above 0 and both rows logged their episodes; **undecided**
    otherwise (the interval contains or touches 0, one seed, or episodes not logged), with the seeds that
    would decide it.

    Args:
        rail, other: the rows of the claims' level (None when the folders lack them).
        key: ``R1`` or ``R2``.
        name: ``other``'s name in the text (``uniform GRPO-8``).

    Returns:
        The claim and ``{"diff": paired difference or None, "episodes": {"RAIL": ..., name: ...}}`` (episodes per
        task).
    """
    text = f"RAIL's held-out success is at least {name}'s at equal or fewer episodes generated (RAIL Figure 1)."
    if rail is None or other is None:
        return Claim(key, text, NOT_MEASURED, f"the folders lack the RAIL or the {name} row"), {"diff": None}
    diff = paired_difference(per_seed(rail.jobs, heldout_success), per_seed(other.jobs, heldout_success))
    episodes = {"RAIL": mean_episodes(rail), name: mean_episodes(other)}
    unknown = None in episodes.values()
    spent_more = not unknown and episodes["RAIL"] > episodes[name] + EPISODE_TOLERANCE
    v = verdict(diff)
    if spent_more:
        v = FAILS
        step = (
            f"RAIL generated {episodes['RAIL']:.2f} episodes per task against {episodes[name]:.2f}: not equal budget; "
            "rerun with allocation.spend_all and the same allocation.budget_per_step."
        )
    elif v == HOLDS and unknown:
        v = UNDECIDED
        step = (
            "The episodes generated per task were not logged (allocation/generated_per_prompt): equal budget unknown."
        )
    else:
        step = agent_next_step(v, diff, "paired seeds", seeds_run(rail, other))
    per_seed_diff = ", ".join(f"{s}: {d:+.3f}" for s, d in zip(diff["seeds"], diff["diffs"])) if diff else "n/a"
    spent = ", ".join(f"{k} {e:.2f}" if e is not None else f"{k} not logged" for k, e in episodes.items())
    measure = (
        f"held-out success, RAIL minus {name}, paired by seed on {rail.level}: {fmt_diff(diff)} (success 0-1; per "
        f"seed {per_seed_diff}); episodes generated per task: {spent}"
    )
    return Claim(key, text, v, measure, step), {"diff": diff, "episodes": episodes}


def _decisions(row: AgentRow | None, kinds: Sequence[str], with_prediction: bool = False) -> list[dict]:
    """The row's decisions of these kinds with a finite realised gain (and a prediction, when asked), each with
    its job's ``seed``."""
    out = []
    for job in row.jobs if row is not None else []:
        for d in read_decisions(job):
            realized = d.get("realized")
            if d.get("kind") not in kinds or not isinstance(realized, (int, float)) or not math.isfinite(realized):
                continue
            if with_prediction and not isinstance(d.get("predicted"), (int, float)):
                continue
            out.append({**d, "seed": seed_of(job)})
    return out


def _more_seeds(factor: float | None, seeds: Sequence[str], ran: Sequence[str]) -> str:
    """A new plan (:func:`mintrl.analysis.claims.fresh_plan`) of the seeds that make ``factor`` times the decisions of
    ``seeds``, all new ones (not in ``ran``)."""
    if factor is None:
        return "no estimate of the seeds that would decide it (an effect of 0, or no spread)"
    total = max(len(seeds) + 1, math.ceil(factor * len(seeds)))
    return f"about {total} seeds (now {len(seeds)}): {fresh_plan(new_seeds(ran, total), AGENT_SWEEP)}"


def claim_prediction_tracks(rail: AgentRow | None) -> tuple[Claim, dict]:
    """R3: RAIL's predicted gain tracks its realised gain (reward^2, RAIL eq. 2). Over the RAIL row's decisions
    with a prediction (shadow, live and explore), pooled over its seeds: the Spearman rank correlation with its
    95% interval (Fisher z, Bonett-Wright SE; :func:`mintrl.analysis.agent_stats.spearman_interval`) and the
    calibration table (quartile bins of predicted gain, :func:`mintrl.analysis.agent_stats.calibration_bins`).

    Rule: **holds** when the interval's low end is above 0 (higher predictions go with higher realised gains);
    **does not hold** when its high end is below 0 (they go with lower ones); **undecided** otherwise, an
    interval around 0 however narrow included, and with fewer than 4 decisions or constant gains (no
    correlation). An undecided claim names the decisions that would clear 0 at the measured r
    (:func:`mintrl.analysis.agent_stats.decisions_to_clear_zero`) and the seeds giving them at the measured
    decisions per seed.

    Returns:
        The claim and ``{"spearman": dict or None, "bins": [...], "decisions": n, "seeds": [...]}``.
    """
    text = "The controller's predicted gain tracks the gain its branches realised (RAIL eq. 2)."
    if rail is None:
        return Claim("R3", text, NOT_MEASURED, "the folders lack the RAIL row"), {"spearman": None, "bins": []}
    decisions = _decisions(rail, ("shadow", "live", "explore"), with_prediction=True)
    pred, real = [d["predicted"] for d in decisions], [d["realized"] for d in decisions]
    stat, bins = spearman_interval(pred, real), calibration_bins(pred, real)
    seeds = sorted({d["seed"] for d in decisions})
    extra = {"spearman": stat, "bins": bins, "decisions": len(decisions), "seeds": seeds}
    ran = seeds_run(rail)
    if stat is None:
        why = (
            f"{len(decisions)} decisions with a prediction over {len(seeds)} seed(s): fewer than 4, or constant "
            "predicted or realised gains (no rank correlation)"
        )
        step = f"No rank correlation to measure: {fresh_plan(new_seeds(ran, 3), AGENT_SWEEP)}, or more steps."
        return Claim("R3", text, UNDECIDED, why, step), extra
    measure = (
        f"Spearman r of predicted vs realised gain over {stat['n']} decisions ({len(seeds)} seed(s)): {stat['r']:+.3f} "
        f"[{stat['low']:+.3f}, {stat['high']:+.3f}] (95%, Fisher z, Bonett-Wright SE)"
    )
    if stat["low"] > 0:
        return Claim("R3", text, HOLDS, measure), extra
    if stat["high"] < 0:
        return Claim("R3", text, FAILS, measure, AGENT_SCALE), extra
    needed = decisions_to_clear_zero(stat["r"])
    if needed is None:
        step = "At the measured r no number of decisions would clear 0: the prediction does not rank the gains."
    else:
        factor = needed / stat["n"]
        step = (
            f"At the measured r about {needed} decisions would give an interval that excludes 0 (now {stat['n']}, "
            f"{stat['n'] / len(seeds):.1f} per seed): {_more_seeds(factor, seeds, ran)}."
        )
    return Claim("R3", text, UNDECIDED, measure, step), extra


def claim_live_beats(
    rail: AgentRow | None, entropy: AgentRow | None, random_anchors: AgentRow | None = None
) -> tuple[Claim, dict]:
    """R4 (RAIL section 3.2): live decisions realise more gain (reward^2, RAIL eq. 2) than the shadow phase's
    decisions, than random actions and than random anchors. Decisions are the unit: the mean realised gain of
    the RAIL row's ``live`` decisions minus that of its ``shadow`` ones, of its ``explore`` ones (a uniformly
    random action at the top-entropy anchor) and of the random-anchor row's ``random`` branches (an anchor drawn
    uniformly at random, entropy branching's action), and, as context outside the verdict, minus the entropy
    row's ``entropy`` branches, each with Welch's 95% interval
    (:func:`mintrl.analysis.agent_stats.welch_difference`).

    Rule: **holds** when live minus shadow has an interval above 0 and so has each random comparison with at
    least 2 decisions (with fewer, that comparison was too small to measure, which the measure says); **does not
    hold** when one of them has an interval below 0; **undecided** otherwise (or fewer than 2 live or shadow
    decisions), with the seeds that would decide it at the measured means and spreads
    (:func:`mintrl.analysis.agent_stats.welch_scale`). Shadow decisions come from the first steps and live ones
    from later steps, so live minus shadow also holds the policy's change over training.

    Returns:
        The claim and ``{"shadow", "explore", "random", "entropy"}``: the Welch differences (None when a side has
        fewer than 2 decisions), plus ``counts`` (decisions per kind, ``live`` included).
    """
    text = (
        "Live decisions realise more gain than the shadow phase's decisions, random actions or random anchors "
        "(RAIL sec. 3.2)."
    )
    if rail is None:
        return Claim("R4", text, NOT_MEASURED, "the folders lack the RAIL row"), {}
    by_kind = {k: [d["realized"] for d in _decisions(rail, (k,))] for k in ("live", "shadow", "explore")}
    by_kind["random"] = [d["realized"] for d in _decisions(random_anchors, ("random",))]
    by_kind["entropy"] = [d["realized"] for d in _decisions(entropy, ("entropy",))]
    others = ("shadow", "explore", "random", "entropy")
    diffs = {k: welch_difference(by_kind["live"], by_kind[k]) for k in others}
    extra = {**diffs, "counts": {k: len(v) for k, v in by_kind.items()}}

    def said(k: str) -> str:
        d = diffs[k]
        if d is None:
            return f"live minus {k}: not measured ({len(by_kind['live'])} live, {len(by_kind[k])} {k} decisions)"
        ci = "no spread, no interval" if d["low"] is None else f"[{d['low']:+.4f}, {d['high']:+.4f}]"
        return f"live minus {k}: {d['mean']:+.4f} {ci} ({d['n_a']} live, {d['n_b']} {k})"

    too_few = [k for k in ("explore", "random") if len(by_kind[k]) < 2]
    deciding = ["shadow"] + [k for k in ("explore", "random") if k not in too_few]
    verdicts = [verdict(diffs[k]) for k in deciding]
    v = FAILS if FAILS in verdicts else HOLDS if all(x == HOLDS for x in verdicts) else UNDECIDED
    names = {"explore": "random actions", "random": "random anchors"}
    measure = (
        "mean realised gain (reward^2), Welch 95%: "
        + "; ".join(said(k) for k in ("shadow", "explore", "random"))
        + "".join(f" ({names[k]} too few to measure: {len(by_kind[k])})" for k in too_few)
        + f"; context, not in the verdict: {said('entropy')}."
    )
    if v != UNDECIDED:
        return Claim("R4", text, v, measure, AGENT_SCALE if v == FAILS else ""), extra
    seeds = sorted({seed_of(j) for j in rail.jobs if read_decisions(j)})
    open_ = [k for k in deciding if verdict(diffs[k]) == UNDECIDED]
    if any(diffs[k] is None for k in open_) or not seeds:
        step = f"Fewer than 2 live or shadow decisions: {fresh_plan(new_seeds(seeds_run(rail), 3), AGENT_SWEEP)}, or more steps."
        return Claim("R4", text, v, measure, step), extra
    factors = [welch_scale(diffs[k]) for k in open_]
    factor = None if None in factors else max(factors)
    step = f"At the measured means and spreads, {_more_seeds(factor, seeds, seeds_run(rail))} (Welch, decisions scale)."
    return Claim("R4", text, v, measure, step), extra


def measure_claims(rows: Sequence[AgentRow], level: str) -> tuple[list[Claim], dict]:
    """R1-R4 on the rows of one level (:func:`mintrl.analysis.agent_rows.agent_rows`): RAIL against uniform GRPO-8
    (:func:`claim_success`), against entropy branching (:func:`claim_success`), its predictions
    (:func:`claim_prediction_tracks`) and its live decisions against shadow, random actions and random anchors
    (:func:`claim_live_beats`); a row the level lacks is None (its claims are not measured).

    Returns:
        The four claims in order and what each measured, ``{"R1": ..., "R2": ..., "R3": ..., "R4": ...}``.
    """
    rail, grpo, entropy, random_anchors = (find_agent_row(rows, level, e) for e in (RAIL8, GRPO8, ENTROPY8, RANDOM8))
    c1, m1 = claim_success(rail, grpo, "R1", "uniform GRPO-8")
    c2, m2 = claim_success(rail, entropy, "R2", "entropy branching")
    c3, m3 = claim_prediction_tracks(rail)
    c4, m4 = claim_live_beats(rail, entropy, random_anchors)
    return [c1, c2, c3, c4], {"R1": m1, "R2": m2, "R3": m3, "R4": m4}
