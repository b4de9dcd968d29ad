"""Finished runs on disk: the jobs of Hydra multirun folders, their overrides and configs, their seeds, which
of them never intervene, and what their run manifests recorded (commit, start time).

A multirun folder (``outputs/<task>/multiruns/<date>/``, e.g. from ``mintrl-train -m +sweep=intensity``) holds
one folder per job (``0/``, ``1/``, ...), each with ``.hydra/overrides.yaml`` (the job's command-line
overrides), ``.hydra/config.yaml`` (the composed config), the TensorBoard event files under ``tensorboard/``
and the run manifest ``manifest.json`` (:mod:`mintrl.core.manifest`; ``provenance.json`` in runs written
before the rename).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from mintrl.analysis.tensorboard import Scalars, event_times, load_scalars, tag_values
from mintrl.judge.base import Judge

NO_INTERVENTION_EXPERIMENTS = ("no_intervention",)
# the judge option that keeps every chunk: its name now, and ``none``, its name in runs recorded before
NO_INTERVENTION_JUDGES = ("always_keep", "none")
# judge classes that moved after runs recorded them in their .hydra/config.yaml: old _target_ -> new
RENAMED_JUDGE_TARGETS = {
    "mintrl.judge.none.KeepJudge": "mintrl.judge.always_keep.AlwaysKeepJudge",
    "mintrl.judge.keep.KeepJudge": "mintrl.judge.always_keep.AlwaysKeepJudge",
}
STEP_SECONDS_TAG = "perf/step_seconds"
NOT_RECORDED = "not recorded"


@dataclass
class Job:
    """One run of a multirun.

    Attributes:
        name: the job's folder name (Hydra's job number for multirun jobs).
        path: the job's output folder.
        overrides: the job's override strings from ``.hydra/overrides.yaml`` (e.g. ``rollout.chunk_size=16``).
        config: the composed ``.hydra/config.yaml`` as a plain dict (unresolved), or None when absent.
        scalars: ``{tag: [(step, value), ...]}`` (:func:`mintrl.analysis.tensorboard.load_scalars`), or None
            when the job has no TensorBoard event files (not started, crashed before logging).
    """

    name: str
    path: Path
    overrides: list[str] = field(default_factory=list)
    config: dict | None = None
    scalars: Scalars | None = None


def _job_order(path: Path) -> tuple:
    """Sort key: numeric job folders by number (0, 1, ..., 10), then other names alphabetically."""
    return (0, int(path.name), "") if path.name.isdigit() else (1, 0, path.name)


def folder_list(dirs: str | Path | Sequence[str | Path] | None) -> list[str | Path]:
    """None, one folder or several, as a list (None: empty)."""
    if dirs is None:
        return []
    return [dirs] if isinstance(dirs, (str, Path)) else list(dirs)


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

    Event files are read from ``<job_dir>/tensorboard/`` when that folder exists, else from anywhere below
    ``job_dir``. Missing ``.hydra`` files give empty overrides / no config; missing event files give
    ``scalars=None``.
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


def read_multiruns(multirun_dirs: Sequence[str | Path]) -> tuple[list[Path], list[Job]]:
    """The job folders and jobs of one or more multiruns (e.g. seeds 0-2, then seeds 3-6 run later with the
    same overrides). With several folders a job is named by its folder's path, so names stay unique.

    Raises:
        FileNotFoundError: a folder is missing or holds no Hydra job (:func:`find_jobs`).
        ValueError: two jobs of the same row (overrides equal apart from the seed) have the same seed (names
            both): their pairing by seed would be ambiguous.
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


# --- overrides and configs ------------------------------------------------------------------------


def parse_override(override: str) -> tuple[str, str]:
    """``"+rollout.n_semi=0"`` -> ``("rollout.n_semi", "0")`` (leading ``+``/``++``/``~`` dropped; a deletion
    without ``=`` gives an empty value)."""
    key, _, value = override.lstrip("+~").partition("=")
    return key.strip(), value.strip()


def normalize_override(override: str) -> str:
    """``override`` with booleans in lower case (the sweeper writes ``rollout.progress=False`` where the command
    line had ``false``), for comparing the overrides of different runs."""
    key, _, value = override.partition("=")
    return f"{key}={value.lower()}" if value in ("True", "False") else override


def config_value(config: dict | None, dotted: str):
    """The value at a dotted key (``"data.prompts.val_size"``) of a job's composed config (a plain dict, as
    :func:`read_job` reads it); None when the config is None or a key on the way is missing or not a mapping."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def is_seed_override(override: str) -> bool:
    """Whether an override sets the seed (``seed=1``, ``+seed=1``, ``++seed=1``)."""
    return parse_override(override)[0] == "seed"


def seed_of(job: Job) -> str:
    """The job's ``seed=`` override value, ``"default"`` without one."""
    return next((parse_override(o)[1] for o in job.overrides if is_seed_override(o)), "default")


def experiment_of(job: Job) -> str | None:
    """The job's ``experiment=`` override value, None without one."""
    return next((v for k, v in map(parse_override, job.overrides) if k == "experiment"), None)


def names_the_method(override: str) -> bool:
    """Whether an override only spells which method a job runs: ``method=<name>``, or ``experiment=`` of a
    one-line alias of a method (:data:`RECORDED_METHOD_EXPERIMENTS`)."""
    key, value = parse_override(override)
    return key == "method" or (key == "experiment" and value in RECORDED_METHOD_EXPERIMENTS)


def setting_key(job: Job) -> tuple:
    """What makes a job's setting, apart from its seed: its method's paper name (:func:`method_of`) and its
    other overrides (compared with :func:`normalize_override`, in any order). Where the method is known, the
    overrides that only spell it (:func:`names_the_method`) are left out, so ``method=grpo``,
    ``experiment=math/grpo_cpu`` (as results/ recorded it) and a sweep's ``method: grpo`` give one key."""
    method = method_of(job)
    overrides = (o for o in job.overrides if not is_seed_override(o) and not (method and names_the_method(o)))
    return method, tuple(sorted(normalize_override(o) for o in overrides))


def group_by_seed(jobs: Sequence[Job]) -> list[list[Job]]:
    """Jobs of one setting, equal apart from ``seed=...`` (:func:`setting_key`), as groups in order of first
    appearance."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault(setting_key(job), []).append(job)
    return list(groups.values())


def varying_overrides(jobs: Sequence[Job]) -> list[list[str]]:
    """Each job's overrides without those shared by every job (the swept values); all of them for a single
    job."""
    if len(jobs) < 2:
        return [list(j.overrides) for j in jobs]
    common = set.intersection(*({normalize_override(o) for o in j.overrides} for j in jobs))
    return [[o for o in j.overrides if normalize_override(o) not in common] for j in jobs]


def swept(jobs: Sequence[Job], job: Job) -> list[str]:
    """``job``'s overrides that not every one of ``jobs`` shares, without ``seed=``: what its row varies (none
    when all jobs share them, e.g. a multirun of one job)."""
    common = set.intersection(*({normalize_override(o) for o in j.overrides} for j in jobs))
    return [o for o in job.overrides if normalize_override(o) not in common and not is_seed_override(o)]


# --- the method a job runs ------------------------------------------------------------------------

# the one-line experiment files that only chose a method, under which results/ recorded the reproduction's
# runs (deleted since, except no_intervention): experiment -> the paper's name of the method
RECORDED_METHOD_EXPERIMENTS = {
    "math/mintrl_const_cpu": "MInTRL-Const",
    "math/grpo_cpu": "GRPO",
    "no_intervention": "no-intervention",
    "math/mintrl_proxy_cpu": "MInTRL-Proxy",
    "math/mentor_cpu": "MENTOR-style",
    "math/intervention_grpo_cpu": "intervention-GRPO",
}
# GRPO's objective.off_policy_correction (configs/objective/grpo.yaml; absent before it existed: none) -> the
# row's name: a correction is another row than the paper's GRPO, even at staleness 0 where it trains alike
OFF_POLICY_ROWS = {"none": "GRPO", "tis": "GRPO-TIS", "mis": "GRPO-MIS"}
# the objective's InterventionGRPO knobs (importance, semi_advantage) -> the paper's name
INTERVENTION_GRPO_ROWS = {("rollout", "mentor"): "MENTOR-style", ("behaviour", "group"): "intervention-GRPO"}


def _class_name(config: dict, dotted: str) -> str | None:
    target = config_value(config, f"{dotted}._target_")
    return target.rsplit(".", 1)[-1] if isinstance(target, str) else None


def method_from_config(config: dict | None) -> str | None:
    """The paper's name of the method a composed config (``.hydra/config.yaml``) runs, read from its
    components, whatever the command line spelled:

    * ``AdvantageRegression`` (MInTRL eq. 11): ``no-intervention`` when the run never intervenes
      (:func:`is_no_intervention`), else ``MInTRL-Const`` with a constant ``objective.kappa`` and
      ``MInTRL-Proxy`` with ``kappa: null`` (the policy's own log-probs);
    * ``GRPO`` that never intervenes, with no semi-on-policy rollouts and std-scaled advantages (Dr. GRPO,
      ``scale_std: false``, is another method); ``GRPO-TIS`` / ``GRPO-MIS`` with
      ``objective.off_policy_correction`` ``tis`` / ``mis`` (:data:`OFF_POLICY_ROWS`);
    * ``InterventionGRPO``: ``MENTOR-style`` (``importance: rollout``, ``semi_advantage: mentor``) or
      ``intervention-GRPO`` (``behaviour``, ``group``) on rollouts that intervene.

    A run with a guide other than ``NoGuide``, an allocation other than ``UniformAllocation``, an SFT stage, or
    ``train: false`` runs another method (BREAD, RAIL, SFT+GRPO, the base row, ...).

    Returns:
        the name, or None for another method, a config without those keys, or no config.
    """
    if not config or config.get("train") is False or config.get("sft") is not None:
        return None
    if _class_name(config, "guide") not in ("NoGuide", None) or _class_name(config, "allocation") not in (
        "UniformAllocation",
        None,
    ):
        return None
    objective, knobs = _class_name(config, "objective"), config_value(config, "objective") or {}
    never = is_no_intervention((), config)
    if objective == "AdvantageRegression" and "kappa" in knobs:
        if never:
            return "no-intervention"
        return "MInTRL-Proxy" if knobs["kappa"] is None else "MInTRL-Const"
    if objective == "GRPO" and never and knobs.get("scale_std") is True:
        if not _is_zero(config_value(config, "rollout.n_semi")):
            return None
        return OFF_POLICY_ROWS.get(knobs.get("off_policy_correction") or "none")
    if objective == "InterventionGRPO" and not never:
        return INTERVENTION_GRPO_ROWS.get((knobs.get("importance"), knobs.get("semi_advantage")))
    return None


def method_of(job: Job) -> str | None:
    """The paper's name of the method a job ran: from its composed config (:func:`method_from_config`), else
    from an ``experiment=`` override of :data:`RECORDED_METHOD_EXPERIMENTS`; None when neither names one."""
    return method_from_config(job.config) or RECORDED_METHOD_EXPERIMENTS.get(experiment_of(job) or "")


# --- the no-intervention baseline -----------------------------------------------------------------


def _is_zero(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        return float(value) == 0
    except (TypeError, ValueError):
        return False


@lru_cache(maxsize=None)
def judge_never_revises(target: str) -> bool | None:
    """Whether the judge class at ``target`` (a config's ``judge._target_``) declares that it never revises:
    its ``finds_errors`` attribute (:class:`mintrl.judge.base.Judge`) is False, as for ``judge=always_keep``.

    A target that moved since a run recorded it is looked up at its new place
    (:data:`RENAMED_JUDGE_TARGETS`, e.g. ``mintrl.judge.keep.KeepJudge`` ->
    ``mintrl.judge.always_keep.AlwaysKeepJudge``).

    Returns:
        True or False from the class; None when the target does not import or is not a
        :class:`~mintrl.judge.base.Judge` (a warning names it), so the caller falls back on the run's overrides.
    """
    from hydra.utils import get_class

    try:
        cls = get_class(RENAMED_JUDGE_TARGETS.get(target, target))
    except (ImportError, ValueError, AttributeError) as e:
        warnings.warn(
            f"judge class {target!r} does not import ({e}); whether this run intervenes is read from its "
            "overrides and rollout settings only",
            stacklevel=2,
        )
        return None
    if not (isinstance(cls, type) and issubclass(cls, Judge)):
        warnings.warn(
            f"{target!r} is not a judge class; whether this run intervenes is read from its overrides", stacklevel=2
        )
        return None
    return not cls.finds_errors


def is_no_intervention(overrides: Sequence[str], config: dict | None = None) -> bool:
    """Whether a run never intervenes (the pure on-policy baseline of MInTRL Figure 6).

    True when the overrides or the composed config say so: ``judge=always_keep`` (``judge=none`` in runs
    recorded before its rename, :data:`NO_INTERVENTION_JUDGES`), ``experiment=no_intervention``, any
    of ``rollout.n_semi``, ``rollout.max_reviews``, ``rollout.intervention_steps`` equal to 0 (no
    semi-on-policy rollouts, no reviews, or interventions switched off from step 0), or a config judge whose
    class declares it never revises (:func:`judge_never_revises`).
    """
    zero_keys = ("rollout.n_semi", "rollout.max_reviews", "rollout.intervention_steps")
    for o in overrides:
        key, value = parse_override(o)
        if (key == "judge" and value in NO_INTERVENTION_JUDGES) or (
            key == "experiment" and value in NO_INTERVENTION_EXPERIMENTS
        ):
            return True
        if key in zero_keys and _is_zero(value):
            return True
    if config:
        target = config_value(config, "judge._target_")
        if isinstance(target, str) and judge_never_revises(target):
            return True
        if any(_is_zero(config_value(config, k)) for k in zero_keys):
            return True
    return False


# --- run manifests and times ----------------------------------------------------------------------


def job_commits(jobs: Sequence[Job]) -> dict[str, list[str]]:
    """``{commit: [job names]}`` from each job's run manifest (:func:`mintrl.core.manifest.read_commit`:
    ``manifest.json``, or ``provenance.json`` of older runs), in order of first appearance; jobs without one
    are listed under :data:`NOT_RECORDED`.

    Raises:
        ValueError: a job's manifest is not valid JSON.
    """
    from mintrl.core.manifest import read_commit  # imports lightning: only where a manifest is read

    out: dict[str, list[str]] = {}
    for job in jobs:
        out.setdefault(read_commit(job.path) or NOT_RECORDED, []).append(job.name)
    return out


def job_span(job_dir: Path) -> tuple[float, float] | None:
    """When a job ran (seconds since the epoch): from its manifest's start (else its first logged scalar) to its
    last logged scalar (:func:`mintrl.analysis.tensorboard.event_times`); without event files, the first and
    last modification time of its files. None for an empty folder."""
    from mintrl.core.manifest import read_started  # imports lightning: only where a manifest is read

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
    * ``elapsed``: per multirun folder (the jobs' parent folder) the last job's end minus the first job's start
      (:func:`job_span`: recorded times, which survive a copy or a git checkout), summed over the folders, so
      seeds added by a later multirun do not count the hours between the two (start-up and validations
      included; None without any job span).
    """
    step_seconds = sum(sum(tag_values(j.scalars, STEP_SECONDS_TAG)) for j in jobs)
    by_folder: dict[Path, list[tuple[float, float]]] = {}
    for d in job_dirs:
        span = job_span(Path(d))
        if span is not None:
            by_folder.setdefault(Path(d).parent, []).append(span)
    spans = [max(e for _, e in s) - min(b for b, _ in s) for s in by_folder.values()]
    return {"step_seconds": step_seconds, "elapsed": sum(spans) if spans else None}
