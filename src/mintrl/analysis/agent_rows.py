"""The rows of ``make reproduce-agents`` (RAIL Figure 1 at CPU scale): per job of
``configs/sweep/reproduce_agents.yaml`` / ``reproduce_agents_shell.yaml`` its held-out success, its held-out
episodes, the episodes it generated per task, its branches and top-up, its step time split and its executed
branch decisions (``allocation_decisions.jsonl``); jobs pooled over folders into rows by (level, experiment).

A job's level is its ``data=`` override (``sql_schema``, ``shell_files``), else the ``data`` choice Hydra
recorded in ``.hydra/hydra.yaml``; its row is its ``experiment=`` override (``agent/rail8_cpu``), else the
recorded ``experiment`` choice.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mintrl.allocation.base import Allocation
from mintrl.analysis.agent_stats import wilson_interval
from mintrl.analysis.measures import heldout_size
from mintrl.analysis.rows import per_seed
from mintrl.analysis.runs import STEP_SECONDS_TAG, Job, experiment_of, parse_override, seed_of
from mintrl.analysis.stats import mean_interval, seed_key
from mintrl.analysis.tensorboard import tag_values

GRPO8, ENTROPY8, RAIL8 = "agent/grpo8_cpu", "agent/entropy8_cpu", "agent/rail8_cpu"
RANDOM8 = "agent/random8_cpu"
ROW_LABELS = {  # in the report's order
    GRPO8: "uniform GRPO-8",
    ENTROPY8: "entropy branching",
    RAIL8: "RAIL",
    RANDOM8: "random anchors",
}
SQL_LEVEL, SHELL_LEVEL = "sql_schema", "shell_files"
SUCCESS_TAG = "val/pass@1"
GENERATED_TAG = "allocation/generated_per_prompt"
BRANCHES_TAG, TOP_UP_TAG = "allocation/branches", "allocation/top_up"
SPLIT_TAGS = {
    "gen": "perf/gen_seconds",
    "env": "env/seconds",
    "update": "perf/update_seconds",
    "step": STEP_SECONDS_TAG,
}
DECISIONS_FILE = "allocation_decisions.jsonl"
UNKNOWN = "unknown"
UNDECLARED = "(not declared by the allocation)"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def hydra_choice(job: Job, group: str) -> str | None:
    """The config group option Hydra recorded for the job (``hydra.runtime.choices`` of
    ``.hydra/hydra.yaml``, e.g. ``data`` -> ``sql_schema``); None when the file or the group is absent."""
    import yaml

    path = Path(job.path) / ".hydra" / "hydra.yaml"
    if not path.is_file():
        return None
    choices = ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("runtime", {}).get("choices") or {}
    value = choices.get(group)
    return None if value is None else str(value)


def level_of(job: Job) -> str:
    """The job's task level: its ``data=`` override, else Hydra's recorded ``data`` choice, else ``unknown``."""
    value = next((v for k, v in map(parse_override, job.overrides) if k == "data"), None)
    return value or hydra_choice(job, "data") or UNKNOWN


def row_experiment(job: Job) -> str:
    """The job's row: its ``experiment=`` override (``agent/rail8_cpu``), else Hydra's recorded ``experiment``
    choice, else ``unknown``."""
    return experiment_of(job) or hydra_choice(job, "experiment") or UNKNOWN


def heldout_success(job: Job) -> float | None:
    """Held-out success (0-1): the last logged ``val/pass@1`` (the validation after the last step; RAIL
    Figure 1's y axis); None when not logged (a job that has not finished)."""
    values = tag_values(job.scalars, SUCCESS_TAG)
    return values[-1] if values else None


def heldout_episodes(job: Job) -> int | None:
    """Held-out episodes of one validation (count): ``data.prompts.val_size`` x ``data.val_samples_per_prompt``
    of the job's config (:func:`mintrl.analysis.measures.heldout_size`); None when not literal integers."""
    return heldout_size(job.config)


def generated_per_task(job: Job) -> float | None:
    """Episodes generated per task, mean over the logged steps of ``allocation/generated_per_prompt``
    (episodes per task, RAIL's discarded shadow branches included; RAIL Figure 1's x axis); None when not
    logged."""
    return _mean(tag_values(job.scalars, GENERATED_TAG))


def branches_per_step(job: Job) -> float | None:
    """Executed branches per step (count), mean over steps of ``allocation/branches``; None when not logged
    (uniform GRPO does not branch)."""
    return _mean(tag_values(job.scalars, BRANCHES_TAG))


def top_up_per_step(job: Job) -> float | None:
    """Fresh episodes that spent the rest of the budget per step (count, ``allocation.spend_all``), mean over
    steps of ``allocation/top_up``; None when not logged."""
    return _mean(tag_values(job.scalars, TOP_UP_TAG))


def step_split(job: Job) -> list[dict[str, float]]:
    """Per logged step the seconds of generation (``perf/gen_seconds``, environment time excluded),
    environment (``env/seconds``), update (``perf/update_seconds``) and the whole step
    (``perf/step_seconds``), as ``{"gen", "env", "update", "step"}`` with the keys that step logged, in step
    order."""
    steps: dict[int, dict[str, float]] = {}
    for key, tag in SPLIT_TAGS.items():
        for step, value in dict((job.scalars or {}).get(tag, [])).items():
            steps.setdefault(step, {})[key] = float(value)
    return [steps[s] for s in sorted(steps)]


def median_split(steps: Sequence[dict[str, float]]) -> dict[str, float | None]:
    """Median seconds of generation, environment, update and step over ``steps`` (:func:`step_split` of one or
    several jobs, pooled) and ``env_share``: the median over steps of environment seconds / step seconds
    (0-1, steps logging both, step > 0). A key no step logged is None."""
    out: dict[str, float | None] = {}
    for key in SPLIT_TAGS:
        values = [s[key] for s in steps if key in s]
        out[key] = statistics.median(values) if values else None
    shares = [s["env"] / s["step"] for s in steps if "env" in s and s.get("step", 0) > 0]
    out["env_share"] = statistics.median(shares) if shares else None
    return out


def read_decisions(job: Job) -> list[dict]:
    """The job's executed branches, one dict per line of ``allocation_decisions.jsonl``
    (:class:`mintrl.allocation.decisions.BranchDecision` records: ``step``, ``kind``, ``predicted`` and
    ``realized`` in reward^2, RAIL eq. 2, ...); empty without the file (uniform GRPO).

    Raises:
        ValueError: a line is not a JSON object (names the file and line).
    """
    path = Path(job.path) / DECISIONS_FILE
    if not path.is_file():
        return []
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not valid JSON ({e})") from e
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        out.append(record)
    return out


def declared_kinds(job: Job) -> list[dict]:
    """The decision kinds the job's allocation declares (:attr:`mintrl.allocation.base.Allocation.decision_kinds`),
    as ``[{"name", "meaning"}, ...]`` in declared order: from the ``allocation_kinds.json`` the run's decisions
    callback wrote, else from the class of the job config's ``allocation._target_``; empty when neither is
    there or the class cannot be imported.

    Raises:
        ValueError: ``allocation_kinds.json`` is not valid JSON (names it).
    """
    from mintrl.allocation.decisions import KINDS_FILE

    path = Path(job.path) / KINDS_FILE
    if path.is_file():
        try:
            return list(json.loads(path.read_text()).get("kinds") or [])
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
    target = ((job.config or {}).get("allocation") or {}).get("_target_")
    if not target:
        return []
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception:  # a class of another checkout: the report falls back to the kinds the decisions name
        return []
    if not (isinstance(cls, type) and issubclass(cls, Allocation)):
        return []  # a recorded target that is not an allocation declares no decision kinds
    return [k.as_record() for k in cls.decision_kinds]


def decisions_by_kind(jobs: Sequence[Job]) -> list[dict]:
    """The jobs' executed branches (:func:`read_decisions`, pooled) per decision kind: every kind the jobs'
    allocations declare (:func:`declared_kinds`, in declared order, with none made included), then kinds the
    decisions name that no allocation declared (meaning :data:`UNDECLARED`).

    Returns:
        ``[{"kind", "meaning", "n", "kept", "predicted", "realized"}]``: decisions (count), those whose rollouts
        joined the group (count), mean predicted gain over the decisions with a prediction and mean realised gain
        (reward^2, RAIL eq. 2; None without values).
    """
    meanings: dict[str, str] = {}
    for job in jobs:
        for k in declared_kinds(job):
            meanings.setdefault(str(k["name"]), str(k.get("meaning", "")))
    decisions = [d for job in jobs for d in read_decisions(job)]
    for d in decisions:
        meanings.setdefault(str(d.get("kind")), UNDECLARED)
    out = []
    for kind, meaning in meanings.items():
        mine = [d for d in decisions if str(d.get("kind")) == kind]
        predicted = [float(d["predicted"]) for d in mine if d.get("predicted") is not None]
        out.append(
            {
                "kind": kind,
                "meaning": meaning,
                "n": len(mine),
                "kept": sum(bool(d.get("kept", True)) for d in mine),
                "predicted": _mean(predicted),
                "realized": _mean([float(d["realized"]) for d in mine if d.get("realized") is not None]),
            }
        )
    return out


@dataclass
class AgentRow:
    """One row of one level: the jobs of an experiment on a level, one per seed, pooled over folders.

    Attributes:
        level: the task level (``sql_schema``, ``shell_files``; :func:`level_of`).
        experiment: the row (``agent/rail8_cpu``; :func:`row_experiment`).
        jobs: its jobs, in order of appearance.
    """

    level: str
    experiment: str
    jobs: list[Job]

    @property
    def label(self) -> str:
        """The method's name (:data:`ROW_LABELS`, e.g. ``RAIL``), else the experiment."""
        return ROW_LABELS.get(self.experiment, self.experiment)


def agent_rows(jobs: Sequence[Job]) -> list[AgentRow]:
    """The jobs pooled into rows by (level, experiment): levels in order of first appearance, within a level
    the rows of :data:`ROW_LABELS` in that order (GRPO-8, entropy, RAIL), then others as they appear.

    Raises:
        ValueError: two jobs of one row have the same seed (names both folders).
    """
    rows: dict[tuple[str, str], AgentRow] = {}
    for job in jobs:
        key = (level_of(job), row_experiment(job))
        row = rows.setdefault(key, AgentRow(key[0], key[1], []))
        twin = next((j for j in row.jobs if seed_of(j) == seed_of(job)), None)
        if twin is not None:
            raise ValueError(
                f"jobs {twin.path} and {job.path} are both {key[1]} on {key[0]} with seed={seed_of(job)}: "
                "give each folder other seeds"
            )
        row.jobs.append(job)
    levels = list(dict.fromkeys(level for level, _ in rows))
    order = list(ROW_LABELS)

    def key(row: AgentRow) -> tuple:
        rank = order.index(row.experiment) if row.experiment in order else len(order)
        return levels.index(row.level), rank

    return sorted(rows.values(), key=key)


def find_agent_row(rows: Sequence[AgentRow], level: str, experiment: str) -> AgentRow | None:
    """The row of that level and experiment, None when absent."""
    return next((r for r in rows if (r.level, r.experiment) == (level, experiment)), None)


def summarize_agent_row(row: AgentRow) -> dict:
    """What the report says of one row.

    Returns:
        ``seeds`` (every seed run), ``success`` (``{seed: held-out success}``, 0-1, seeds that logged it),
        ``missing`` (seeds without it), ``heldout`` (held-out episodes per job when all jobs agree, else None),
        ``interval`` (held-out success: over 2+ seeds the Student t 95% interval over seeds,
        :func:`mintrl.analysis.stats.mean_interval`, with ``"method": "t"``; over 1 seed the Wilson interval over
        its held-out episodes, :func:`mintrl.analysis.agent_stats.wilson_interval`, ``"method": "wilson"``; keys
        ``mean``, ``low``, ``high``, low/high None without an interval; None without a value), ``generated``
        (episodes generated per task, mean over seeds; None when not logged), ``branches`` and ``top_up`` (per
        step, mean over seeds; None when not logged), ``split`` (:func:`median_split` of the pooled steps,
        seconds) and ``decisions`` (:func:`decisions_by_kind` of its jobs).
    """
    success = per_seed(row.jobs, heldout_success)
    sizes = {heldout_episodes(j) for j in row.jobs}
    heldout = sizes.pop() if len(sizes) == 1 else None
    values = list(success.values())
    if len(values) >= 2:
        interval = {**mean_interval(values), "method": "t"}
    elif values and heldout is not None:
        interval = {**wilson_interval(values[0], heldout), "method": "wilson"}
    elif values:
        interval = {"mean": values[0], "low": None, "high": None, "method": None}
    else:
        interval = None

    def mean_of(measure) -> float | None:
        return _mean(list(per_seed(row.jobs, measure).values()))

    seeds = sorted({seed_of(j) for j in row.jobs}, key=seed_key)
    return {
        "seeds": seeds,
        "success": {s: success[s] for s in sorted(success, key=seed_key)},
        "missing": [s for s in seeds if s not in success],
        "heldout": heldout,
        "interval": interval,
        "generated": mean_of(generated_per_task),
        "branches": mean_of(branches_per_step),
        "top_up": mean_of(top_up_per_step),
        "split": median_split([s for j in row.jobs for s in step_split(j)]),
        "decisions": decisions_by_kind(row.jobs),
    }
