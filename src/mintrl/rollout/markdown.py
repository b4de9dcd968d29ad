"""Rollout records (:mod:`mintrl.rollout.records`) as markdown, for TensorBoard's text dashboard
(:class:`mintrl.training.callbacks.rollout_text.RolloutText`) and any other markdown viewer.

What a rollout shows: its row, group and kind (control or semi-on-policy), reward, advantage and
tokens by provenance; the last line of its prompt; the response with the tokens the policy did not
sample marked (:data:`MARKS`: intervention ``[[...]]``, guide ``{{...}}``, an episode's environment
tokens ``<<env: ...>>``); the judge's verdicts in order (:func:`review_line`); and
for an episode (``rollout=episodes``) its turns in order, each action (with its own marks when the
record's turn carries ``segments``, see :func:`with_action_segments`) and the observation the
environment returned. Texts the model or the environment wrote go into fenced code blocks (or
code spans), so markdown and HTML in them are shown as written.

``mintrl-rollouts`` (:mod:`mintrl.analysis.rollouts`) prints records with the same marks
(:func:`marked`, colour optional) and the same verdict lines (:func:`review_line`).

:func:`pick_rows` chooses which rows of a step to show: a seeded, deterministic pick spread over
rollouts with intervention tokens, rewarded rollouts and unrewarded ones.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import torch

from mintrl.core.batch import Provenance, RolloutBatch
from mintrl.rollout.records import PROVENANCE_NAMES, provenance_runs

INTERVENTION_MARKS = ("[[", "]]")  # the intervention's tokens (mintrl-rollouts without colour, too)
GUIDE_MARKS = ("{{", "}}")  # tokens spliced from a guide (a reference solution's prefix, a demonstration)
ENVIRONMENT_MARKS = ("<<env: ", ">>")  # an episode's observation turns
MARKS = {"intervention": INTERVENTION_MARKS, "guide": GUIDE_MARKS, "environment": ENVIRONMENT_MARKS}
CATEGORIES = ("intervened", "rewarded", "unrewarded")  # the kinds of rows pick_rows spreads over, in turn
NOT_APPLIED = (
    "not applied: the step is outside the chunk, or the cut would keep fewer than rollout.min_kept_tokens tokens"
)


def marked(segments: list[dict], marks: dict[str, tuple[str, str]] = MARKS) -> str:
    """The text of ``segments`` (a record's ``[{"by", "text"}]`` runs) with each run whose ``by``
    has marks in ``marks`` (provenance name -> (start, end); default :data:`MARKS`) between them;
    the other runs (the policy's) as they are."""
    out = []
    for s in segments:
        start, end = marks.get(s["by"], ("", ""))
        out.append(start + s["text"] + end)
    return "".join(out)


def fenced(text: str) -> str:
    """``text`` as a fenced code block (shown verbatim): a fence of backticks one longer than the
    longest run of backticks in ``text`` (at least 3), so a code block inside the text cannot close it."""
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}\n{text}\n{fence}"


def code_span(text: str) -> str:
    """``text`` as an inline code span (shown verbatim on one line: newlines become ``⏎``); the
    span's backticks outnumber any run of backticks inside, and a space pads a text that starts or
    ends with a backtick."""
    text = text.replace("\n", "⏎")
    runs = [len(m) for m in re.findall(r"`+", text)]
    ticks = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def number(x: float | None, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals, or ``none`` for None (a record's missing reward or advantage)."""
    return "none" if x is None else f"{x:.{digits}f}"


def last_line(text: str | None) -> str:
    """The last non-blank line of ``text``, stripped ("" for None or a blank text)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def review_line(
    review: dict, correction: Callable[[str], str] = code_span, written: Callable[[str], str] = code_span
) -> str:
    """One verdict of a record's ``reviews`` as one line, in the wording every viewer uses
    (``mintrl-rollouts``, the TensorBoard text, and the same words in the browser page's script):
    round, kind, the step index, that a Revise was not applied (:data:`NOT_APPLIED`), the cut, the
    judge's correction and what the intervention wrote. ``correction`` and ``written`` quote those
    two texts for the medium (default: markdown code spans; the terminal viewer: ``repr`` and the
    intervention's marks), e.g. ``review 0: revise at step 1, cut at token 4; judge's correction:
    `3+4=7`; intervention wrote 2 tokens: `=7```."""
    line = f"review {review['round']}: {review['kind']}"
    if review["step"] is not None:
        line += f" at step {review['step']}"
    if review["kind"] == "revise" and not review["revised"]:
        line += f" ({NOT_APPLIED})"
    if review["revised"]:
        line += f", cut at token {review['at_token']}"
    if review["correction"]:
        line += f"; judge's correction: {correction(review['correction'])}"
    if review["written"]:
        line += f"; intervention wrote {review['written']} tokens: {written(review['written_text'])}"
    return line


def _turn(k: int, turn: dict) -> list[str]:
    """One episode turn: a heading line (its number from 1, the action's kind, flags), the action
    (marked from the turn's ``segments`` when present) and the observation when there was one."""
    flags = "".join((", invalid" if turn["invalid"] else "", ", intervened" if turn["intervened"] else ""))
    action = marked(turn["segments"]) if "segments" in turn else turn["action"]
    parts = [f"**turn {k}**: {turn['kind']}{flags}, {turn['action_tokens']} action tokens", fenced(action)]
    if turn["observation"]:
        parts += [f"observation ({turn['observation_tokens']} tokens):", fenced(turn["observation"])]
    return parts


def record_markdown(record: dict) -> str:
    """One rollout record (keys of :mod:`mintrl.rollout.records`) as markdown: a heading (row,
    group, control or semi-on-policy, truncated), a line of reward, advantage and tokens by
    provenance, the prompt's last line, then for a single-turn rollout the response with its marks
    (:func:`marked`) and for an episode its turns in order (:func:`with_action_segments` adds the
    marks inside actions), then the judge's verdicts. Blocks are separated by blank lines."""
    kind = "control" if record["control"] else "semi-on-policy"
    head = f"#### row {record['row']}, group {record['group']}, {kind}"
    if not record["finished"]:
        head += ", truncated"
    tokens = record["tokens"]
    counts = f"{tokens['policy']} policy, {tokens['intervention']} intervention"
    for name in ("guide", "environment"):
        if tokens.get(name):
            counts += f", {tokens[name]} {name}"
    parts = [
        head,
        f"reward {number(record['reward'])}, advantage {number(record['advantage'])}; tokens: {counts}",
        "prompt (last line):",
        fenced(last_line(record["question"])),
    ]
    turns = record.get("turns") or []
    if turns:
        for k, turn in enumerate(turns, 1):
            parts += _turn(k, turn)
    else:
        parts += ["response ([[intervention]], {{guide}}):", fenced(marked(record["segments"]))]
    reviews = record["reviews"]
    parts.append("judge's verdicts:" if reviews else "judge's verdicts: none")
    if reviews:
        parts.append("\n".join("- " + review_line(r) for r in reviews))
    return "\n\n".join(parts)


def step_markdown(records: list[dict], split: str, step: int, rows: int) -> str:
    """A step's shown rollouts as one markdown text: a line saying how many of the step's ``rows``
    rollouts are shown, then each record (:func:`record_markdown`), separated by horizontal rules."""
    head = f"{split} step {step}: {len(records)} of {rows} rollouts"
    return "\n\n---\n\n".join([head, *(record_markdown(r) for r in records)])


def pick_rows(rewards: Sequence[float], intervened: Sequence[bool], count: int, seed: int, step: int) -> list[int]:
    """Which rows of a step to show: up to ``count`` rows taken in turn from the rows with
    intervention tokens, the rewarded rows (reward > 0) without any and the rest (reward 0 or
    none), each kind in a random order drawn from ``(seed, step)``; a kind that runs out is
    skipped. The same arguments give the same rows.

    Args:
        rewards: per row, its reward (NaN: none). intervened: per row, it has intervention tokens.
        count: rows to show at most (>= 0). seed, step: the draw's seed and the step (integers).

    Returns:
        the chosen row indices, ascending.
    """
    kinds: dict[str, list[int]] = {name: [] for name in CATEGORIES}
    for i, (reward, iv) in enumerate(zip(rewards, intervened)):
        kinds["intervened" if iv else "rewarded" if reward > 0 else "unrewarded"].append(i)  # NaN > 0 is False
    rng = random.Random(f"{seed}/{step}")
    queues = [rng.sample(kinds[name], len(kinds[name])) for name in CATEGORIES]
    chosen: list[int] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return sorted(chosen)


def with_action_segments(records: list[dict], batch: RolloutBatch, tokenizer) -> list[dict]:
    """Copies of ``records`` (row ``k`` of ``batch`` for record ``k``, as
    :func:`mintrl.rollout.records.batch_records` made them) whose episode turns carry
    ``"segments"``: the action's runs by provenance, decoded each on its own (display only), so
    that :func:`record_markdown` marks intervention tokens inside actions.

    Raises:
        ValueError: ``records`` and ``batch`` differ in length.
    """
    if len(records) != len(batch):
        raise ValueError(f"with_action_segments: {len(records)} records for a batch of {len(batch)} rows")
    input_ids, provenance = batch.input_ids.detach().cpu(), batch.provenance.detach().cpu()
    out = []
    for i, record in enumerate(records):
        trace_turns = batch.traces[i].turns if batch.traces is not None else ()
        if not trace_turns:
            out.append(record)
            continue
        mask = provenance[i] != int(Provenance.NONE)  # [L] the response, observation turns included
        ids = input_ids[i][mask].tolist()
        by = [PROVENANCE_NAMES[Provenance(k)] for k in provenance[i][mask].tolist()]
        turns = [
            {
                **turn,
                "segments": provenance_runs(
                    tokenizer, ids[t.action_start : t.action_end], by[t.action_start : t.action_end]
                ),
            }
            for turn, t in zip(record["turns"], trace_turns)
        ]
        out.append({**record, "turns": turns})
    return out


def intervened_rows(batch: RolloutBatch) -> list[bool]:
    """Per row of ``batch``, whether it has intervention tokens."""
    return (batch.provenance == int(Provenance.INTERVENTION)).any(-1).detach().cpu().tolist()


def select_rows(batch: RolloutBatch, rows: list[int]) -> RolloutBatch:
    """The sub-batch of ``rows`` (:meth:`RolloutBatch.select`)."""
    return batch.select(torch.tensor(rows, dtype=torch.long, device=batch.input_ids.device))
