"""The confirmation of the headline claims at seeds fixed in advance (``mintrl-reproduce-confirm``, ``make
confirm-report``): what the section of ``docs/reproduction.md`` between the markers of
:data:`mintrl.analysis.report_blocks.CONFIRM` says, computed here and written by
:mod:`mintrl.analysis.confirm_report`.

A confirmation sweep file (``configs/sweep/confirm_core.yaml``, ``confirm_agents_db.yaml``) fixes its rows and
seeds before any of its jobs runs, in ``hydra.sweeper.params`` (:func:`read_plan`): ``seed`` gives the seeds, every
other key with several values a row axis, a key with one value a setting every job has. ``make confirm-core`` /
``make confirm-agents-db`` run one job per folder (``results/<sweep>/<row>_s<seed>_<commit>/0/``); a job is
finished when its folder holds ``summary.json`` (:func:`is_finished`).

From the plan and the jobs of the folders it is given this module computes (:func:`plan_status`,
:func:`confirm_core`, :func:`confirm_agents`): the planned (row, seed) pairs that finished and those missing; the
jobs outside the plan (a seed or row the sweep file does not name, another sweep, an override the plan does not
set), listed and left out, so no seed is ever added or dropped; the commits the finished jobs recorded; and, only
when every planned job finished at one commit and logged the claim's measure, the verdicts: MInTRL-Const minus
GRPO paired by seed (:func:`mintrl.analysis.claims.claim_beats_grpo`) and RAIL's R1-R4
(:func:`mintrl.analysis.agent_claims.measure_claims`). Until then the verdict reads ``pending: k of N jobs
finished`` (:func:`why_no_verdict`) and the numbers so far are interim.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from mintrl.analysis.agent_claims import measure_claims
from mintrl.analysis.agent_rows import agent_rows, heldout_success, level_of, summarize_agent_row
from mintrl.analysis.claims import Claim, claim_beats_grpo
from mintrl.analysis.measures import final_pass
from mintrl.analysis.rows import CONST, GRPO, find_row, paper_order, rows_of
from mintrl.analysis.runs import (
    NOT_RECORDED,
    Job,
    folder_list,
    job_commits,
    normalize_override,
    parse_override,
    read_multiruns,
    seed_of,
)
from mintrl.build.config import CONFIG_DIR

CORE_SWEEP, AGENTS_SWEEP = "confirm_core", "confirm_agents_db"
SUMMARY_FILE = "summary.json"  # written at the end of a run: its presence marks a finished job
SWEEP_KEY = "sweep"  # the job's +sweep=<name> override: the sweep file it ran
# overrides that change what a job keeps on disk, not what it trains or measures: a job may carry them and still be
# a planned job (the committed runs set callbacks.hf_export=null: no exported policy)
OUTPUT_ONLY_KEYS = ("callbacks.hf_export",)


@dataclass(frozen=True)
class Plan:
    """The jobs a confirmation sweep file fixes before any runs.

    Attributes:
        name: the sweep's name (the file's stem, ``confirm_core``), as the jobs' ``+sweep=`` names it.
        path: the sweep file.
        keys: the keys whose values make the rows (``("method",)``), in the file's order.
        rows: each row's overrides, space-joined (``method=mintrl_const``), in sweep order.
        seeds: the seeds, in the file's order (strings, as :func:`mintrl.analysis.runs.seed_of` spells them).
        fixed: the overrides every job has besides its row and seed (``data=agentbench_db``).
    """

    name: str
    path: Path
    keys: tuple[str, ...]
    rows: tuple[str, ...]
    seeds: tuple[str, ...]
    fixed: tuple[str, ...] = ()

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Every planned job as ``(row, seed)``: rows outer, seeds inner."""
        return [(row, seed) for row in self.rows for seed in self.seeds]


def sweep_file(name: str, config_dir: str | Path = CONFIG_DIR) -> Path:
    """The sweep file ``<config_dir>/sweep/<name>.yaml`` (``+sweep=<name>``)."""
    return Path(config_dir) / "sweep" / f"{name}.yaml"


def sweep_params(path: str | Path) -> dict[str, str]:
    """``hydra.sweeper.params`` of a sweep file as Hydra composes them: those of the sweep files its ``defaults``
    names (plain names: files of the same folder, read the same way), in their order, then its own where
    ``_self_`` stands (last when absent); a later value of a key replaces an earlier one. Values as strings
    (``"100,101"``; ``0`` -> ``"0"``); ``override /group: option`` entries choose configs, not params, and are
    skipped.

    Raises:
        FileNotFoundError: the file or a sweep file its defaults name does not exist.
        ValueError: a defaults entry names a file by a path (``/sweep/x``, ``../x``): not read here.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {path} does not exist")
    config = yaml.safe_load(path.read_text()) or {}
    own = ((config.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    own = {str(k): str(v) for k, v in own.items()}
    defaults = list(config.get("defaults") or [])
    if "_self_" not in defaults:
        defaults.append("_self_")
    params: dict[str, str] = {}
    for entry in defaults:
        if entry == "_self_":
            params.update(own)
        elif isinstance(entry, str):
            if "/" in entry or entry.startswith("."):
                raise ValueError(f"{path}: defaults entry {entry!r} is not a plain name of a sweep file beside it")
            params.update(sweep_params(path.with_name(f"{entry}.yaml")))
    return params


def sweep_values(key: str, value: str) -> list[str]:
    """The values Hydra's sweeper gives ``key=value``: a comma list or ``range(a,b)`` swept, a single value as
    itself (Hydra's override parser), e.g. ``sweep_values("seed", "range(3,6)") == ["3", "4", "5"]``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    override = OverridesParser.create().parse_overrides([f"{key}={value}"])[0]
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [str(override.get_value_element_as_str())]


def read_plan(path: str | Path) -> Plan:
    """The plan of a confirmation sweep file (:func:`sweep_params`): its seeds, its rows (the product of the other
    keys with several values, the first key outer) and the overrides every job has (keys with one value).

    Raises:
        FileNotFoundError: see :func:`sweep_params`.
        ValueError: the file sets no seed, or no key besides the seed has several values (no rows to compare).
    """
    path = Path(path)
    params = {k: sweep_values(k, v) for k, v in sweep_params(path).items()}
    if "seed" not in params:
        raise ValueError(f"{path}: hydra.sweeper.params sets no seed")
    seeds = params.pop("seed")
    axes = {k: v for k, v in params.items() if len(v) > 1}
    if not axes:
        raise ValueError(f"{path}: no key besides the seed has several values (no rows to compare)")
    rows = tuple(" ".join(f"{k}={v}" for k, v in zip(axes, combo)) for combo in itertools.product(*axes.values()))
    fixed = tuple(f"{k}={v[0]}" for k, v in params.items() if len(v) == 1)
    return Plan(path.stem, path, tuple(axes), rows, tuple(seeds), fixed)


# --- the finished jobs against the plan -----------------------------------------------------------


def is_finished(job: Job) -> bool:
    """Whether the job's folder holds :data:`SUMMARY_FILE` (written when its run ended); a folder without it is
    still running, or stopped (``make confirm-*`` reruns it)."""
    return (Path(job.path) / SUMMARY_FILE).is_file()


def planned_pair(job: Job, plan: Plan) -> tuple[tuple[str, str] | None, str]:
    """Which planned job ``job`` is: ``((row, seed), "")``; ``(None, why)`` when it is not one of the plan's jobs:
    it ran another sweep (its ``+sweep=``), a seed or a row the plan does not name, or overrides beyond the plan's
    (or lacks one of its fixed ones), booleans compared in lower case; overrides of :data:`OUTPUT_ONLY_KEYS` are
    not compared."""
    parsed = (parse_override(normalize_override(o)) for o in job.overrides)
    overrides = {k: v for k, v in parsed if k not in OUTPUT_ONLY_KEYS}
    if overrides.get(SWEEP_KEY) != plan.name:
        return None, f"ran +sweep={overrides.get(SWEEP_KEY) or '(none)'}, not +sweep={plan.name}"
    seed = seed_of(job)
    if seed not in plan.seeds:
        return None, f"seed {seed} is not in the plan"
    row = " ".join(f"{k}={overrides.get(k, '')}" for k in plan.keys)
    if row not in plan.rows:
        return None, f"row {row} is not in the plan"
    expected = {*plan.fixed, *row.split(" "), f"seed={seed}", f"{SWEEP_KEY}={plan.name}"}
    ran = {f"{k}={v}" for k, v in overrides.items()}
    if ran != expected:
        extra, lacking = sorted(ran - expected), sorted(expected - ran)
        said = [f"overrides beyond the plan: {' '.join(extra)}"] if extra else []
        said += [f"lacks the plan's {' '.join(lacking)}"] if lacking else []
        return None, "; ".join(said)
    return (row, seed), ""


def as_planned(job: Job) -> Job:
    """``job`` without its overrides of :data:`OUTPUT_ONLY_KEYS`, so that rows grouped by their overrides
    (:func:`mintrl.analysis.rows.rows_of`) hold every planned job of a row whatever it kept on disk."""
    kept = [o for o in job.overrides if parse_override(o)[0] not in OUTPUT_ONLY_KEYS]
    return replace(job, overrides=kept)


@dataclass
class Status:
    """The plan against the jobs read.

    Attributes:
        plan: the plan.
        finished: ``{(row, seed): job}`` of the planned jobs that finished (:func:`as_planned`), in plan order.
        outside: finished jobs that are not planned jobs, each with why (:func:`planned_pair`): left out.
        running: jobs without :data:`SUMMARY_FILE` (not counted).
    """

    plan: Plan
    finished: dict[tuple[str, str], Job] = field(default_factory=dict)
    outside: list[tuple[Job, str]] = field(default_factory=list)
    running: list[Job] = field(default_factory=list)

    @property
    def missing(self) -> list[tuple[str, str]]:
        """The planned ``(row, seed)`` pairs without a finished job, in plan order."""
        return [p for p in self.plan.pairs if p not in self.finished]

    @property
    def jobs(self) -> list[Job]:
        """The finished planned jobs, in plan order."""
        return list(self.finished.values())


def plan_status(plan: Plan, jobs: Sequence[Job]) -> Status:
    """Sort ``jobs`` into the plan's finished jobs, those outside it and the unfinished ones (:class:`Status`).

    Raises:
        ValueError: two finished jobs are the same planned job (names both folders).
    """
    status = Status(plan)
    found: dict[tuple[str, str], Job] = {}
    for job in jobs:
        if not is_finished(job):
            status.running.append(job)
            continue
        pair, why = planned_pair(job, plan)
        if pair is None:
            status.outside.append((job, why))
        elif pair in found:
            raise ValueError(f"jobs {found[pair].path} and {job.path} are both {pair[0]} seed={pair[1]}")
        else:
            found[pair] = as_planned(job)
    status.finished = {p: found[p] for p in plan.pairs if p in found}
    return status


def unmeasured(status: Status, measure: Callable[[Job], float | None]) -> list[str]:
    """The finished planned jobs whose ``measure`` is None, as ``<row> seed=<seed>``."""
    return [f"{row} seed={seed}" for (row, seed), job in status.finished.items() if measure(job) is None]


def why_no_verdict(
    status: Status, commits: dict[str, list[str]], missing_measure: Sequence[str], what: str
) -> str | None:
    """Why the claims get no verdict yet, None when they do: every planned job finished, all at one recorded
    commit (:func:`mintrl.analysis.runs.job_commits` of the finished jobs), each logging ``what`` (``missing_measure``:
    the jobs that did not, :func:`unmeasured`)."""
    done, planned = len(status.finished), len(status.plan.pairs)
    if done < planned:
        return f"pending: {done} of {planned} jobs finished"
    if NOT_RECORDED in commits:
        return f"no verdict: {len(commits[NOT_RECORDED])} of the jobs recorded no commit (manifest.json); the claim needs one"
    if len(commits) > 1:
        return f"no verdict: the jobs ran at {len(commits)} commits ({', '.join(c[:7] for c in commits)}); the claim needs one"
    if missing_measure:
        return f"no verdict: {len(missing_measure)} job(s) logged no {what}: {', '.join(missing_measure)}"
    return None


# --- the claims -----------------------------------------------------------------------------------


@dataclass
class Confirmation:
    """One confirmation sweep's plan, jobs and claims.

    Attributes:
        sweep: :data:`CORE_SWEEP` or :data:`AGENTS_SWEEP`.
        status: the plan against the jobs (:func:`plan_status`).
        commits: ``{commit: [job names]}`` of the finished planned jobs (:func:`mintrl.analysis.runs.job_commits`).
        blocked: why there is no verdict yet (:func:`why_no_verdict`); None when the verdicts stand.
        claims: the claims measured on the finished planned jobs (interim while ``blocked``).
        details: what the tables read: core ``{"rows", "diff"}`` (:class:`mintrl.analysis.rows.Row` list, the
            paired difference or None); agents ``{"level", "rows", "summaries", "measures"}``.
        folders: the folders read, as given.
    """

    sweep: str
    status: Status
    commits: dict[str, list[str]]
    blocked: str | None
    claims: list[Claim]
    details: dict
    folders: list[str] = field(default_factory=list)


def confirm_core(plan: Plan, jobs: Sequence[Job]) -> Confirmation:
    """Claim (i) at the plan's seeds: final held-out pass@1, MInTRL-Const minus GRPO, paired by seed, 95% Student
    t interval (:func:`mintrl.analysis.claims.claim_beats_grpo`) over the finished planned jobs (rows named from
    their configs, :func:`mintrl.analysis.rows.rows_of`)."""
    status = plan_status(plan, jobs)
    rows = sorted(rows_of(status.jobs), key=paper_order)
    claim, diff = claim_beats_grpo(find_row(rows, CONST), find_row(rows, GRPO))
    commits = job_commits(status.jobs)
    blocked = why_no_verdict(status, commits, unmeasured(status, final_pass), "held-out pass@1")
    return Confirmation(CORE_SWEEP, status, commits, blocked, [claim], {"rows": rows, "diff": diff})


def confirm_agents(plan: Plan, jobs: Sequence[Job]) -> Confirmation:
    """RAIL's claims R1-R4 at the plan's seeds (:func:`mintrl.analysis.agent_claims.measure_claims`) on the level
    of the finished planned jobs (the most common, :func:`mintrl.analysis.agent_rows.level_of`)."""
    status = plan_status(plan, jobs)
    rows = agent_rows(status.jobs)
    levels = Counter(level_of(j) for j in status.jobs)
    level = levels.most_common(1)[0][0] if levels else ""
    claims, measures = measure_claims(rows, level)
    commits = job_commits(status.jobs)
    blocked = why_no_verdict(status, commits, unmeasured(status, heldout_success), "held-out success (val/pass@1)")
    details = {"level": level, "rows": rows, "summaries": [summarize_agent_row(r) for r in rows], "measures": measures}
    return Confirmation(AGENTS_SWEEP, status, commits, blocked, claims, details)


CONFIRMERS = {CORE_SWEEP: confirm_core, AGENTS_SWEEP: confirm_agents}


def build_confirmation(
    core_dirs: str | Path | Sequence[str | Path] | None = None,
    agents_dirs: str | Path | Sequence[str | Path] | None = None,
    core_sweep: str | Path | None = None,
    agents_sweep: str | Path | None = None,
) -> list[Confirmation]:
    """Read both plans (default: :func:`sweep_file` of :data:`CORE_SWEEP` and :data:`AGENTS_SWEEP` in
    :data:`mintrl.build.config.CONFIG_DIR`) and the jobs of the folders (multirun folders, e.g.
    ``results/confirm_core/<row>_s<seed>_<commit>/``; none: nothing finished yet) and confirm each.

    Raises:
        FileNotFoundError: a sweep file or a folder is missing, or a folder holds no Hydra job.
        ValueError: a plan without seeds or rows (:func:`read_plan`), a row run twice at one seed
            (:func:`mintrl.analysis.runs.read_multiruns`, :func:`plan_status`), a manifest that is not JSON.
    """
    out = []
    for sweep, dirs, path in ((CORE_SWEEP, core_dirs, core_sweep), (AGENTS_SWEEP, agents_dirs, agents_sweep)):
        folders = folder_list(dirs)
        _, jobs = read_multiruns(folders)
        confirmation = CONFIRMERS[sweep](read_plan(path if path is not None else sweep_file(sweep)), jobs)
        confirmation.folders = [str(f) for f in folders]
        out.append(confirmation)
    return out
