"""Rollout records: every rollout of a step as one JSON line, one gzip file per step and split.

Files: ``<run>/rollouts/<split>/step_<NNNNNN>.jsonl.gz`` (``split`` is ``train`` or ``val``; the
step is the optimizer step whose weights generated the rollouts). One line per rollout, in batch
order (groups of a prompt together, control rollouts first), with the keys:

- ``split``, ``step``; ``row`` (index in the step's batch), ``group`` (index of its prompt in the step);
- ``prompt_index`` (the prompt's index in its split), ``question``, ``reference``;
- ``control``: true for a pure on-policy control rollout, false for a semi-on-policy one;
- ``response``: the response decoded as the reward saw it (special tokens skipped);
- ``segments``: the response as runs of one provenance, ``[{"by": "policy" | "intervention" |
  "guide" | "environment", "text": ...}]`` (each run decoded on its own, for display only);
- ``tokens``: ``{"policy": n, "intervention": m, "guide": g, "environment": e}``, response tokens by
  provenance, counted on the batch's ``provenance`` tensor (never re-tokenized; ``guide`` is 0
  without a guide, ``environment`` 0 for single-turn rollouts);
- ``finished``: the response ended with EOS (false: cut at the length limit);
- ``reward``: the reward (null: none); ``advantage``: the objective's advantage of the row (null
  when the objective computes none, e.g. distillation, and for validation); ``trains``: the row is
  in the loss (null for validation);
- ``reviews``: the judge's verdicts in order, ``{"round", "kind", "step", "correction", "revised",
  "at_token", "written", "written_text"}`` (see :class:`mintrl.core.batch.ReviewRecord`;
  ``written_text`` decodes the intervention tokens written after the verdict);
- ``first_error``: the response token where the judge marked a failed rollout's first wrong step
  (``objective=first_error``: :attr:`mintrl.core.batch.RolloutBatch.first_error`); null where none
  was marked or no judge marks them;
- ``branch``: null, or how the allocation branched the rollout ``{"kind", "anchor", "parent",
  "temperature"}`` (see :class:`mintrl.core.batch.BranchRecord`);
- ``turns``: an episode's action turns in order (empty for single-turn rollouts), ``{"kind",
  "invalid", "intervened", "action", "observation", "action_tokens", "observation_tokens"}``
  (see :class:`mintrl.core.batch.TurnRecord`; ``action`` decodes the action's tokens).

:class:`RecordWriter` writes them with the standard library (gzip + json) under a size cap;
:mod:`mintrl.analysis.rollouts` reads and prints them (``mintrl-rollouts``).
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

from mintrl.core.batch import Provenance, RolloutBatch, RolloutTrace
from mintrl.core.checks import check_range

SPLITS = ("train", "val")
PROVENANCE_NAMES = {
    Provenance.POLICY: "policy",
    Provenance.INTERVENTION: "intervention",
    Provenance.GUIDE: "guide",
    Provenance.ENVIRONMENT: "environment",
}  # the records' name of each response-token provenance
SUFFIX = ".jsonl.gz"


def record_path(root: str | Path, split: str, step: int) -> Path:
    """``<root>/<split>/step_<step:06d>.jsonl.gz``: the record file of one step (``root`` is the
    run's ``rollouts`` folder)."""
    return Path(root) / split / f"step_{step:06d}{SUFFIX}"


def _number(x: float) -> float | None:
    """``x``, or None when it is NaN or infinite (JSON has no such numbers)."""
    return x if math.isfinite(x) else None


def provenance_runs(tokenizer, ids: list[int], by: list[str]) -> list[dict]:
    """Runs of equal provenance (``by[k]`` of token ``k``), each decoded on its own (special tokens
    skipped; empty runs dropped)."""
    runs, start = [], 0
    for k in range(1, len(ids) + 1):
        if k == len(ids) or by[k] != by[start]:
            text = tokenizer.decode(ids[start:k], skip_special_tokens=True)
            if text:
                runs.append({"by": by[start], "text": text})
            start = k
    return runs


def _turns(tokenizer, ids: list[int], turns) -> list[dict]:
    """The records of an episode's turns (:class:`mintrl.core.batch.TurnRecord`)."""
    return [
        {
            "kind": t.kind,
            "invalid": t.invalid,
            "intervened": t.intervened,
            "action": tokenizer.decode(ids[t.action_start : t.action_end], skip_special_tokens=True),
            "observation": t.observation,
            "action_tokens": t.action_end - t.action_start,
            "observation_tokens": t.observation_end - t.action_end,
        }
        for t in turns
    ]


def batch_records(batch: RolloutBatch, tokenizer, split: str, step: int) -> list[dict]:
    """One record (a JSON-ready dict, keys in the module docstring) per row of ``batch``.

    Args:
        batch: ``N`` rollouts; after ``Objective.prepare`` its ``extras["advantages"]`` (``[N]``)
            and ``train_rows`` (``[N]``) give ``advantage`` and ``trains``.
        tokenizer: the policy tokenizer (decoding for display only).
        split: ``"train"`` or ``"val"``. step: the optimizer step that generated the batch.

    Returns:
        ``N`` dicts in row order.

    Raises:
        ValueError: ``split`` is not one of :data:`SPLITS`.
    """
    if split not in SPLITS:
        raise ValueError(f"rollout records: split {split!r} is not one of {SPLITS}")
    input_ids, provenance = batch.input_ids.detach().cpu(), batch.provenance.detach().cpu()
    rewards, groups = batch.rewards.detach().cpu().tolist(), batch.group_index.detach().cpu().tolist()
    control, finished = batch.is_control.detach().cpu().tolist(), batch.finished.detach().cpu().tolist()
    advantages = batch.extras.get("advantages")
    advantages = None if advantages is None else advantages.detach().float().cpu().tolist()
    trains = None if batch.train_rows is None else batch.train_rows.detach().cpu().tolist()
    first_error = [-1] * len(batch) if batch.first_error is None else batch.first_error.detach().cpu().tolist()
    records = []
    for i in range(len(batch)):
        mask = provenance[i] != int(Provenance.NONE)  # [L] the whole response, observation turns included
        ids = input_ids[i][mask].tolist()
        kinds = [Provenance(k) for k in provenance[i][mask].tolist()]
        by = [PROVENANCE_NAMES[k] for k in kinds]
        counts = {name: 0 for name in PROVENANCE_NAMES.values()}
        for name in by:
            counts[name] += 1
        item = batch.prompts[groups[i]] if batch.prompts is not None else None
        trace = batch.traces[i] if batch.traces is not None else RolloutTrace()
        records.append(
            {
                "split": split,
                "step": int(step),
                "row": i,
                "group": groups[i],
                "prompt_index": item.index if item is not None else None,
                "question": item.question if item is not None else None,
                "reference": item.reference if item is not None else None,
                "control": bool(control[i]),
                "response": tokenizer.decode(ids, skip_special_tokens=True),
                "segments": provenance_runs(tokenizer, ids, by),
                "tokens": counts,
                "finished": bool(finished[i]),
                "reward": _number(rewards[i]),
                "advantage": None if advantages is None else _number(advantages[i]),
                "trains": None if trains is None else bool(trains[i]),
                "first_error": None if first_error[i] < 0 else int(first_error[i]),
                "reviews": [
                    {
                        "round": r.round,
                        "kind": str(r.kind),
                        "step": r.step,
                        "correction": r.correction,
                        "revised": r.revised,
                        "at_token": r.at_token,
                        "written": r.written,
                        "written_text": tokenizer.decode(
                            ids[r.at_token : r.at_token + r.written], skip_special_tokens=True
                        )
                        if r.written
                        else "",
                    }
                    for r in trace.reviews
                ],
                "branch": None
                if trace.branch is None
                else {
                    "kind": trace.branch.kind,
                    "anchor": trace.branch.anchor,
                    "parent": trace.branch.parent,
                    "temperature": trace.branch.temperature,
                },
                "turns": _turns(tokenizer, ids, trace.turns),
            }
        )
    return records


def concat_records(parts: list[tuple[int, list[dict]]]) -> list[dict]:
    """Records of several batches (data-parallel ranks, validation batches) as one step's list:
    ``parts`` is ``[(num_groups, records), ...]``; rows, groups and branch parents are offset by
    the rows and groups before them, so they stay apart (as :func:`mintrl.core.batch.concat_batches`
    does for tensors). Returns new dicts; the inputs are not changed."""
    out, rows, groups = [], 0, 0
    for num_groups, records in parts:
        for r in records:
            r = {**r, "row": r["row"] + rows, "group": r["group"] + groups}
            if r["branch"] is not None and r["branch"]["parent"] >= 0:
                r["branch"] = {**r["branch"], "parent": r["branch"]["parent"] + rows}
            out.append(r)
        rows += len(records)
        groups += num_groups
    return out


def _compress(lines: list[str]) -> bytes:
    return gzip.compress("".join(lines).encode("utf-8"), mtime=0)  # mtime 0: same records, same bytes


class RecordWriter:
    """Writes record files under ``root`` until the run's records reach ``max_mib``.

    The cap counts the compressed bytes of every record file under ``root`` (files already there,
    e.g. from before a resume, included; a file written again replaces its old size). A step whose
    records do not all fit writes the longest prefix of them that does; from then on nothing is
    written and every record not written is counted in :attr:`dropped`.

    Args:
        root: the run's records folder (``<run>/rollouts``).
        max_mib: cap on the compressed size of all record files (MiB = 2**20 bytes; > 0), or None
            for no cap.

    Attributes:
        bytes_written: compressed bytes of the record files under ``root`` (bytes).
        dropped: records not written because of the cap (rows).
        full: the cap was reached; nothing more is written.

    Raises:
        ValueError: ``max_mib`` not positive (the field ``callbacks.records.max_mib`` is named).
    """

    def __init__(self, root: str | Path, max_mib: float | None = 64.0):
        check_range("callbacks.records.max_mib", max_mib, 0, low_open=True, none_ok=True)
        self.root = Path(root)
        self.limit = None if max_mib is None else int(max_mib * 2**20)
        self.dropped = 0
        self.full = False
        self.bytes_written = sum(f.stat().st_size for f in self.root.glob(f"*/*{SUFFIX}")) if self.root.is_dir() else 0

    def _fit(self, lines: list[str], room: int) -> tuple[int, bytes]:
        """The most leading lines whose compressed size is at most ``room`` bytes (binary search)."""
        lo, best = 0, b""
        hi = len(lines) - 1  # all of them did not fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            blob = _compress(lines[:mid])
            if len(blob) <= room:
                lo, best = mid, blob
            else:
                hi = mid - 1
        return lo, best

    def write(self, split: str, step: int, records: list[dict]) -> Path | None:
        """Write ``records`` to :func:`record_path` (replacing the file if present; written to a
        temporary file and renamed).

        Returns:
            the file written, or None when nothing was (no records, or the cap was reached).
        """
        if not records:
            return None
        if self.full:
            self.dropped += len(records)
            return None
        path = record_path(self.root, split, step)
        old = path.stat().st_size if path.is_file() else 0
        lines = [json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records]
        blob = _compress(lines)
        kept = len(lines)
        if self.limit is not None:
            room = self.limit - (self.bytes_written - old)
            if len(blob) > room:
                kept, blob = self._fit(lines, room) if room > 0 else (0, b"")
                self.full = True
                self.dropped += len(lines) - kept
        if not kept:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
        self.bytes_written += len(blob) - old
        return path
