"""Reading, filtering and printing the rollout records a run wrote (``mintrl-rollouts``; format:
:mod:`mintrl.rollout.records`), and what the judge and the intervention did per step (``--stats``)."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

from mintrl.rollout.markdown import INTERVENTION_MARKS, MARKS, marked, number, review_line
from mintrl.rollout.records import SPLITS, SUFFIX

HIGHLIGHT_ON, HIGHLIGHT_OFF = "\x1b[1;33;44m", "\x1b[0m"  # intervention tokens: bold yellow on blue


def records_root(run: str | Path) -> Path:
    """The records folder of ``run``: ``<run>/rollouts`` when it exists, else ``run`` itself
    (a records folder given directly)."""
    run = Path(run)
    return run / "rollouts" if (run / "rollouts").is_dir() else run


def record_files(run: str | Path, split: str = "train", step: int | None = None) -> list[tuple[int, Path]]:
    """The record files of one split of ``run``, as ``(step, path)`` sorted by step; only ``step``'s
    when given.

    Raises:
        ValueError: ``split`` is not ``train`` or ``val``.
        FileNotFoundError: no record file there (the message names the folder looked in, and the
            steps that do exist when ``step`` is missing).
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    folder = records_root(run) / split
    files = []
    for path in folder.glob(f"step_*{SUFFIX}"):
        match = re.fullmatch(rf"step_(\d+){re.escape(SUFFIX)}", path.name)
        if match:
            files.append((int(match.group(1)), path))
    files.sort()
    if not files:
        raise FileNotFoundError(
            f"no {split} rollout records in {folder} (expected step_<N>{SUFFIX} files, written by a training run "
            "with callbacks.records.enabled=true)"
        )
    if step is None:
        return files
    chosen = [(s, p) for s, p in files if s == step]
    if not chosen:
        raise FileNotFoundError(
            f"no {split} rollout records of step {step} in {folder}; steps there: {', '.join(str(s) for s, _ in files)}"
        )
    return chosen


def read_records(path: str | Path) -> list[dict]:
    """The records of one file (one dict per JSON line, in file order)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def intervention_tokens(record: dict) -> int:
    """Response tokens the intervention wrote (tokens)."""
    return int(record["tokens"]["intervention"])


def filter_records(records: list[dict], intervened: bool = False, reward: float | None = None) -> list[dict]:
    """The records with intervention tokens (``intervened``) and whose reward equals ``reward``
    (within 1e-9; records without a reward never match a value), in order."""
    out = []
    for r in records:
        if intervened and intervention_tokens(r) == 0:
            continue
        if reward is not None and (r["reward"] is None or not math.isclose(r["reward"], reward, abs_tol=1e-9)):
            continue
        out.append(r)
    return out


def _intervention_marks(color: bool) -> tuple[str, str]:
    return (HIGHLIGHT_ON, HIGHLIGHT_OFF) if color else INTERVENTION_MARKS


def highlight(segments: list[dict], color: bool) -> str:
    """The response text with its runs marked as :func:`mintrl.rollout.markdown.marked` marks them
    (intervention ``[[...]]``, guide ``{{...}}``, environment ``<<env: ...>>``), the intervention's
    runs in ANSI colour instead when ``color``."""
    return marked(segments, {**MARKS, "intervention": _intervention_marks(color)})


def _review_line(review: dict, color: bool) -> str:
    """One verdict (:func:`mintrl.rollout.markdown.review_line`), indented: the judge's correction
    as a Python literal, what the intervention wrote marked as in :func:`highlight`."""
    on, off = _intervention_marks(color)
    return "  " + review_line(review, repr, lambda text: on + text + off)


def format_record(record: dict, color: bool = False) -> str:
    """A record as text: a header (split, step, row, group, prompt, control or semi-on-policy,
    reward, advantage, tokens by provenance, branch), the question, the response with intervention
    tokens highlighted (:func:`highlight`) and one line per judge verdict."""
    kind = "control" if record["control"] else "semi-on-policy"
    tokens = record["tokens"]
    head = (
        f"== {record['split']} step {record['step']}  row {record['row']}  group {record['group']}  "
        f"prompt {record['prompt_index']}  {kind}  reward {number(record['reward'])}  "
        f"advantage {number(record['advantage'])}  tokens {tokens['policy']} policy + {tokens['intervention']} intervention"
    )
    if tokens.get("environment"):
        head += f" + {tokens['environment']} environment"
    if not record["finished"]:
        head += "  (truncated)"
    lines = [head]
    branch = record.get("branch")
    if branch is not None:
        lines.append(
            f"  branch: {branch['kind']} from row {branch['parent']} at token {branch['anchor']}"
            f" (T = {number(branch['temperature'], 2)})"
        )
    lines.append(f"  question: {record['question']}")
    lines.append("  response: " + highlight(record["segments"], color).replace("\n", "\n            "))
    lines.extend(_review_line(r, color) for r in record["reviews"])
    for k, turn in enumerate(record.get("turns") or []):
        flags = "".join((" (invalid)" if turn["invalid"] else "", " (intervened)" if turn["intervened"] else ""))
        lines.append(
            f"  turn {k}: {turn['kind']}{flags}, {turn['action_tokens']} action tokens, "
            f"{turn['observation_tokens']} observation tokens; observation: {turn['observation'][:200]!r}"
        )
    return "\n".join(lines)


def summary_line(records: list[dict]) -> str:
    """Counts of one step: rollouts, intervened rollouts, revise verdicts, off-policy token
    fraction (intervention / response tokens) and the mean reward of control rollouts
    (:func:`step_stats`)."""
    st = step_stats(records)
    return (
        f"{st['rollouts']} rollouts, {st['intervened']} with intervention tokens, "
        f"{st['revises']} revise verdicts, off-policy token fraction {st['offpolicy_frac']:.4f}, "
        f"control reward {number(st['reward_control'])}"
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def step_stats(records: list[dict]) -> dict:
    """What the judge and the intervention did in one step's records (how much
    of each response the corrections write).

    Args:
        records: one step's records (:func:`read_records`).

    Returns:
        ``rollouts``, ``semi`` (semi-on-policy rollouts), ``intervened`` (rollouts with intervention
        tokens), ``revises`` (Revise verdicts applied, i.e. ``revised``), ``cuts_at_0`` (of those, cut at
        response token 0: the correction replaces the response from its start), ``offpolicy_frac``
        (intervention / (policy + intervention) tokens over all rollouts), ``iv_share_intervened`` (the same
        ratio over the intervened rollouts only; None without any), ``reward_control`` and ``reward_semi``
        (mean rewards, None without such rollouts or rewards), ``rewarded_intervened`` (rollouts with reward
        > 0 and intervention tokens). Token counts are the records' ``tokens`` (tokens).
    """
    revises = [v for r in records for v in r["reviews"] if v["revised"]]
    intervened = [r for r in records if intervention_tokens(r) > 0]

    def share(rows: list[dict]) -> float | None:
        total = sum(r["tokens"]["policy"] + r["tokens"]["intervention"] for r in rows)
        return sum(intervention_tokens(r) for r in rows) / total if total else None

    def rewards(control: bool) -> list[float]:
        return [r["reward"] for r in records if r["control"] == control and r["reward"] is not None]

    return {
        "rollouts": len(records),
        "semi": sum(not r["control"] for r in records),
        "intervened": len(intervened),
        "revises": len(revises),
        "cuts_at_0": sum(v["at_token"] == 0 for v in revises),
        "offpolicy_frac": share(records) or 0.0,
        "iv_share_intervened": share(intervened),
        "reward_control": _mean(rewards(True)),
        "reward_semi": _mean(rewards(False)),
        "rewarded_intervened": sum((r["reward"] or 0) > 0 for r in intervened),
    }


STATS_COLUMNS = (
    ("step", "step"),
    ("rollouts", "rollouts"),
    ("semi", "semi-on-policy"),
    ("intervened", "intervened"),
    ("revises", "revise verdicts"),
    ("cuts_at_0", "cut at token 0"),
    ("offpolicy_frac", "off-policy token fraction"),
    ("iv_share_intervened", "intervention share of intervened rollouts"),
    ("reward_control", "control reward"),
    ("reward_semi", "semi-on-policy reward"),
    ("rewarded_intervened", "rewarded with intervention tokens"),
)


def format_stats(run: str | Path, split: str = "train", step: int | None = None) -> str:
    """What ``mintrl-rollouts RUN --stats`` prints: a markdown table of :func:`step_stats` per step file,
    then a row summed (counts) or pooled over all records (fractions, mean rewards).

    Raises:
        FileNotFoundError, ValueError: see :func:`record_files`.
    """
    rows, everything = [], []
    for s, path in record_files(run, split, step):
        records = read_records(path)
        everything += records
        rows.append({"step": str(s), **step_stats(records)})
    rows.append({"step": "all", **step_stats(everything)})

    def cell(v) -> str:
        return v if isinstance(v, str) else number(v) if isinstance(v, float) or v is None else str(v)

    lines = [
        "| " + " | ".join(title for _, title in STATS_COLUMNS) + " |",
        "|" + "---|" * len(STATS_COLUMNS),
    ]
    lines += ["| " + " | ".join(cell(r[key]) for key, _ in STATS_COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def format_run(
    run: str | Path,
    split: str = "train",
    step: int | None = None,
    intervened: bool = False,
    reward: float | None = None,
    color: bool = False,
) -> str:
    """What ``mintrl-rollouts`` prints: per step file, a summary of all its records
    (:func:`summary_line`) then the records that pass the filters (:func:`format_record`).

    Raises:
        FileNotFoundError, ValueError: see :func:`record_files`.
    """
    out = []
    for s, path in record_files(run, split, step):
        records = read_records(path)
        shown = filter_records(records, intervened, reward)
        out.append(f"### {split} step {s}: {path}")
        out.append(f"### {summary_line(records)}; {len(shown)} shown")
        out.extend(format_record(r, color) for r in shown)
        out.append("")
    return "\n".join(out)
