"""Main effects of the knobs of a factorial sweep: which knob of the off-policy intensity sweep (chunk size,
judge reviews, correction length; MInTRL section 5.2) moves the final held-out pass@1, and in which
direction, with an interval over seeds.

A 2 x 2 x 2 grid of settings run at the same seeds answers more than its eight rows one by one: for a knob
with a low and a high level, every two settings that differ only in that knob form a matched pair, and the
pair's difference at one seed cancels that seed's luck in the prompts and the sampling. Per seed the
effect is the mean difference over the matched pairs (high minus low); its interval is Student t over the
seeds (:func:`mintrl.analysis.stats.mean_interval`), the same as every other interval of the report.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

from mintrl.analysis.runs import Job, config_value, is_seed_override, parse_override
from mintrl.analysis.stats import mean_interval, seed_key

Setting = tuple[str | None, ...]  # one value per knob (str, as in an override), None when unknown
NOT_KNOBS = ("experiment", "hydra.sweep.dir", "callbacks.hf_export")  # overrides that name no setting knob


def swept_knobs(jobs: Sequence[Job]) -> list[str]:
    """The override keys of ``jobs`` that take at least two values across them (the sweep's knobs), in
    first-seen order; ``seed`` and :data:`NOT_KNOBS` are not knobs. A job without the override has its
    composed config's value (:func:`knob_value`)."""
    keys: list[str] = []
    for job in jobs:
        for o in job.overrides:
            key = parse_override(o)[0].lstrip("+~")
            if not is_seed_override(o) and key not in NOT_KNOBS and key not in keys:
                keys.append(key)
    return [k for k in keys if len({knob_value(j, k) for j in jobs} - {None}) >= 2]


def knob_value(job: Job, knob: str) -> str | None:
    """The job's value of ``knob`` (e.g. ``rollout.chunk_size``): its override, else its composed
    config's value (``.hydra/config.yaml``) as a string; None when neither has it."""
    for o in job.overrides:
        key, value = parse_override(o)
        if key.lstrip("+~") == knob:
            return value
    value = config_value(job.config, knob)
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _level(value: str) -> tuple:
    """Sort key of a knob level: numeric when it parses as a number, else by its text."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def main_effects(
    jobs: Sequence[Job],
    value: Callable[[Job], float | None],
    seed_of: Callable[[Job], str],
    knobs: Sequence[str] | None = None,
) -> list[dict]:
    """Main effect of each knob: ``value`` at the knob's highest level minus at its lowest, over the
    settings that differ only in that knob, paired by seed.

    For knob ``k`` with levels ``low`` (smallest, numeric order) and ``high`` (largest): the matched pairs
    are the settings ``(p, q)`` equal on every other knob with ``p[k] = low`` and ``q[k] = high`` (settings
    at a middle level, e.g. 2 and 3 reviews between 1 and 4, are in no pair). Per seed ``s`` run by both
    settings of every pair, ``e_s = mean over pairs of value(q, s) - value(p, s)``; the effect is
    :func:`~mintrl.analysis.stats.mean_interval` over those seeds. A seed missing from some pair (a sweep
    stopped part-way) is left out of that knob's effect rather than averaged over fewer pairs, so every
    ``e_s`` is over the same pairs.

    Args:
        jobs: the sweep's runs; a job whose ``value`` is None (no held-out curve) is skipped.
        value: the measured number per job (e.g. :func:`mintrl.analysis.measures.final_pass`, pass@1 0-1).
        seed_of: the job's seed (e.g. :func:`mintrl.analysis.runs.seed_of`).
        knobs: the knobs; default :func:`swept_knobs`. A job with an unknown value of some knob
            (:func:`knob_value` None) is in no pair.

    Returns:
        Per knob with at least two levels: ``{"knob", "low", "high", "pairs"`` (number of matched pairs),
        ``"effect"`` (``mean_interval`` dict plus ``seeds`` and ``diffs`` = the per-seed ``e_s``; None when
        no pair or no seed common to every pair)``}``, in the order of ``knobs``.

    Raises:
        ValueError: two jobs run the same setting with the same seed (names both): the pairing would be
            ambiguous.
    """
    knobs = list(swept_knobs(jobs) if knobs is None else knobs)
    values: dict[Setting, dict[str, float]] = defaultdict(dict)
    who: dict[tuple[Setting, str], Job] = {}
    for job in jobs:
        v = value(job)
        setting = tuple(knob_value(job, k) for k in knobs)
        if v is None or None in setting:
            continue
        seed = seed_of(job)
        if (setting, seed) in who:
            raise ValueError(f"jobs {who[setting, seed].path} and {job.path} run the same setting with seed={seed}")
        who[setting, seed] = job
        values[setting][seed] = float(v)
    effects = []
    for i, knob in enumerate(knobs):
        levels = sorted({s[i] for s in values}, key=_level)
        if len(levels) < 2:
            continue
        low, high = levels[0], levels[-1]
        pairs = [
            (p, p[:i] + (high,) + p[i + 1 :]) for p in values if p[i] == low and p[:i] + (high,) + p[i + 1 :] in values
        ]
        seeds = set.intersection(*(set(values[p]) & set(values[q]) for p, q in pairs)) if pairs else set()
        order = sorted(seeds, key=seed_key)
        diffs = [sum(values[q][s] - values[p][s] for p, q in pairs) / len(pairs) for s in order]
        effect = {**mean_interval(diffs), "seeds": order, "diffs": diffs} if diffs else None
        effects.append({"knob": knob, "low": low, "high": high, "pairs": len(pairs), "effect": effect})
    return effects
