"""What a local AgentBench DB-bench file gives ``env=sql``: the rows loaded and refused (with the reasons),
the rows whose reference query was dropped, and whether each loaded row's own reference action scores
1 in the real environment (:class:`~mintrl.env.sql.environment.SqlEnvironment`).

``python -m mintrl.env.sql.coverage DIR_OR_FILE ...`` prints it for each ``.jsonl`` / ``.json`` file
given (a folder: the files of its ``data/dbbench`` when it has one, else its own).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

from mintrl.data.base import InvalidRow, PromptItem, RowFilter
from mintrl.env.sql.environment import SqlEnvironment
from mintrl.env.sql.loader import load_dbbench
from mintrl.env.sql.tasks import reference_values

DONE = "<answer>done</answer>"  # what a change episode answers after its statement


@dataclass
class FileCoverage:
    """One file's coverage.

    Attributes:
        path: the file; rows: its rows (count); error: why it could not be read at all (then
            nothing else is filled), else None.
        refused: row index -> why the loader refused it; changed: row index -> why its reference
            query was dropped (the row loads, its reference action is the label).
        rewards: row index -> the reward of the row's reference episode (loaded rows only).
    """

    path: str
    rows: int = 0
    error: str | None = None
    refused: dict[int, str] = field(default_factory=dict)
    changed: dict[int, str] = field(default_factory=dict)
    rewards: dict[int, float] = field(default_factory=dict)

    @property
    def loaded(self) -> int:
        """Rows loaded (count)."""
        return len(self.rewards)

    @property
    def scored(self) -> int:
        """Loaded rows whose reference episode scores 1 (count)."""
        return sum(r == 1.0 for r in self.rewards.values())

    def summary(self) -> str:
        """One line: rows, loaded and scored with their shares."""
        if self.error:
            return f"{os.path.basename(self.path)}: not read ({self.error})"
        if not self.rows:
            return f"{os.path.basename(self.path)}: no rows (an empty file)"
        share = self.loaded / self.rows if self.rows else 0.0
        scored = self.scored / self.loaded if self.loaded else 0.0
        return (
            f"{os.path.basename(self.path)}: {self.rows} rows, {self.loaded} loaded ({share:.1%}), "
            f"{len(self.refused)} refused, {len(self.changed)} with the reference query dropped; "
            f"{self.scored} of {self.loaded} references score 1 ({scored:.1%})"
        )


def reference_episode(entry: dict, env: SqlEnvironment | None = None) -> float:
    """The reward of an episode of ``entry`` that writes its reference action
    (``entry["reference_action"]``) and then, when the episode goes on, answers as an agent that read
    the result would: a change ``done``; a SELECT the query's result values as a list literal (as
    AgentBench's agents paste MySQL's result), or nothing for a result without rows (AgentBench reads
    an empty answer as ``0``, as it reads ``none``).

    Args:
        env: the environment to run it in (a fresh :class:`SqlEnvironment` by default).
    """
    env = env or SqlEnvironment()
    env.reset([PromptItem(0, entry["question"], entry["reference_action"], [], entry, "sql")])
    out = env.step([0], [entry["reference_action"]])
    if out.done[0]:
        return out.rewards[0]
    values = reference_values(entry) if entry["kind"] == "select" else []
    answer = DONE if entry["kind"] != "select" else f"<answer>{repr(values) if values else ''}</answer>"
    return env.step([0], [answer]).rewards[0]


def file_coverage(path: str) -> FileCoverage:
    """Load ``path`` with invalid rows skipped and run each loaded row's reference episode
    (:func:`reference_episode`)."""
    report = FileCoverage(path)
    try:
        skip = RowFilter(skip=True)
        entries = load_dbbench(path, skip)
    except (InvalidRow, OSError, ValueError) as err:  # an unreadable file: not JSON, empty, missing
        report.error = str(err) or type(err).__name__
        return report
    report.refused, report.changed = dict(entries.dropped), dict(entries.changed)
    report.rows = len(entries) + len(entries.dropped)
    env = SqlEnvironment()
    for entry in entries:
        report.rewards[entry["index"]] = reference_episode(entry, env)
    return report


def dbbench_files(location: str) -> list[str]:
    """The DB-bench files at ``location``: itself when it is a file, else the ``.jsonl``/``.json`` files of
    its ``data/dbbench`` folder when it has one, else of itself (sorted by name)."""
    if os.path.isfile(location):
        return [location]
    folder = os.path.join(location, "data", "dbbench")
    folder = folder if os.path.isdir(folder) else location
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith((".jsonl", ".json")))


def main(argv: list[str]) -> int:
    """Print each file's summary, then every refused row, row with a dropped query and row whose
    reference does not score 1, with the reason; ``--json`` prints the reports as JSON instead."""
    as_json = "--json" in argv
    reports = [file_coverage(p) for a in argv if a != "--json" for p in dbbench_files(a)]
    if as_json:
        print(json.dumps([r.__dict__ for r in reports], indent=1, ensure_ascii=False))
        return 0
    for report in reports:
        print(report.summary())
        for index, reason in report.refused.items():
            print(f"  refused {index}: {reason}")
        for index, reason in report.changed.items():
            print(f"  query dropped {index}: {reason}")
        for index, reward in report.rewards.items():
            if reward != 1.0:
                print(f"  reference scores {reward} {index}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
