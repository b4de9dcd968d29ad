"""How much of a local copy of AgentBench's OS-interaction files the shell environment runs: per data
file, the rows loaded and the rows refused (with reasons), and the share of loaded rows whose own
reference action scores 1 in :class:`~mintrl.env.shell.environment.ShellEnvironment`.

The folder is ``data/os_interaction`` of THUDM/AgentBench (or a copy): ``data/**/*.json`` and
``.jsonl`` files, with their scripts in ``scripts/<group>/`` as AgentBench's ``configs/tasks/os.yaml``
pairs them (``data/<group>/x.json`` and ``data/<group>.json`` use ``scripts/<group>/``; a
``train_*`` folder uses ``scripts/7/``).

A row's reference action is scored as an agent would use it: with a reference command, the command
runs in the episode's shell, its stderr dropped (as AgentBench passes the example's stdout; an agent
would not answer with an error message), and its output (stripped) is the answer; without one (a
match row with no example), the answer is the label (it scores 1 by construction: counted in
``answer_only``).

Run: ``python -m mintrl.env.shell.coverage <folder> [uid] [--writable-root] [--state-checks]``.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from mintrl.data.base import PromptItem, RowFilter
from mintrl.env.shell.environment import ShellEnvironment
from mintrl.env.shell.loader import load_os_tasks
from mintrl.env.shell.protocol import NO_OUTPUT, OUTPUT_HINT


@dataclass
class FileCoverage:
    """One data file's numbers: ``rows`` (in the file), ``loaded``, ``refused`` (the loader's
    messages), ``answer_only`` (loaded rows without a reference command), ``scored_1`` (loaded rows
    whose reference action scored 1) and ``failed`` (``(row index, what the reference answered,
    the label)`` of the others)."""

    path: str
    rows: int = 0
    loaded: int = 0
    refused: list[str] = field(default_factory=list)
    answer_only: int = 0
    scored_1: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)


def scripts_dir_of(folder: str, data_file: str) -> str:
    """The scripts folder AgentBench pairs with ``data_file`` (see the module docstring)."""
    rel = os.path.relpath(data_file, os.path.join(folder, "data"))
    group = rel.split(os.sep)[0] if os.sep in rel else os.path.splitext(rel)[0]
    if rel.startswith(".."):  # a file outside data/ (train_0317/training.json)
        group = "7"
    return os.path.join(folder, "scripts", group)


def data_files(folder: str) -> list[str]:
    """The data files under ``folder`` (``data/**/*.json(l)`` and ``train_*/*.json``), sorted."""
    found = glob.glob(os.path.join(folder, "data", "**", "*.json*"), recursive=True)
    found += glob.glob(os.path.join(folder, "train_*", "*.json"))
    return sorted(p for p in found if p.endswith((".json", ".jsonl")))


def command_output(observation: str) -> str:
    """The command output shown in an observation of :func:`~mintrl.env.shell.protocol.output_observation`."""
    text = observation.removeprefix("Output:\n").removesuffix(OUTPUT_HINT).rstrip("\n")
    lines = text.split("\n")
    while lines and (lines[-1].startswith("(exit code ") or lines[-1].startswith("... (output cut")):
        lines.pop()
    text = "\n".join(lines)
    return "" if text == NO_OUTPUT else text.strip()


def reference_score(env: ShellEnvironment, entry: dict[str, Any]) -> tuple[float, str]:
    """``(reward, answer)`` of one episode that runs the entry's reference command and answers with
    its stdout (or answers the label, without a command)."""
    env.reset([PromptItem(0, entry["question"], entry["reference_action"], [1], entry, "shell")])
    try:
        answer = entry["label"]
        if entry["reference"]:
            command = f"```bash\n{{\n{entry['reference']}\n}} 2>/dev/null\n```"
            answer = command_output(env.step([0], [command]).observations[0])
        return env.step([0], [f"<answer>{answer}</answer>"]).rewards[0], answer
    finally:
        env.close()


def file_coverage(
    folder: str, path: str, uid: int, env: ShellEnvironment, root_uids: int | None = None, state_checks: bool = False
) -> FileCoverage:
    """The numbers of one data file (see :class:`FileCoverage`); load-time runs as ``uid`` (on a
    writable root mapped to ``root_uids`` onwards when given)."""
    cov = FileCoverage(os.path.relpath(path, folder))
    with open(path, encoding="utf-8") as f:
        raw = [json.loads(line) for line in f if line.strip()] if path.endswith(".jsonl") else json.load(f)
    cov.rows = len(raw) if isinstance(raw, list) else 1
    skip = RowFilter(skip=True)
    entries = load_os_tasks(
        path, skip, scripts_dir_of(folder, path), uid, root_uids=root_uids, state_checks=state_checks
    )
    cov.loaded, cov.refused = len(entries), list(skip.skipped)
    for entry in entries:
        reward, answer = reference_score(env, entry)
        cov.answer_only += not entry["reference"]
        cov.scored_1 += reward == 1.0
        if reward != 1.0:
            cov.failed.append((entry["index"], answer, entry["label"]))
    return cov


def os_coverage(
    folder: str, uid: int = 64300, uid_base: int = 64400, writable_root: bool = False, state_checks: bool = False
) -> list[FileCoverage]:
    """:class:`FileCoverage` of every data file under ``folder`` (load-time runs as ``uid``, the
    episodes in an environment of one shell as ``uid_base``; both used only as root). With
    ``writable_root`` both run on a writable root (``env.writable_root``), as root of user
    namespaces mapped to the host uids 2_100_000_000 (load) and 2_000_000_000 (episodes) onwards,
    and with ``state_checks`` too the rows whose check tests the final state load."""
    env = ShellEnvironment(max_shells=1, uid_base=uid_base, command_timeout_s=10.0, writable_root=writable_root)
    root_uids = 2_100_000_000 if writable_root else None
    return [file_coverage(folder, path, uid, env, root_uids, state_checks) for path in data_files(folder)]


def report(covs: list[FileCoverage]) -> str:
    """A text table of :func:`os_coverage`'s numbers, then the refused rows and failed references."""
    lines = [f"{'file':40} rows loaded refused scored_1 answer_only"]
    for c in covs:
        lines.append(f"{c.path:40} {c.rows:4} {c.loaded:6} {len(c.refused):7} {c.scored_1:8} {c.answer_only:11}")
    total = [sum(getattr(c, k) for c in covs) for k in ("rows", "loaded", "scored_1", "answer_only")]
    lines.append(f"{'total':40} {total[0]:4} {total[1]:6} {total[0] - total[1]:7} {total[2]:8} {total[3]:11}")
    for c in covs:
        lines += [f"refused {c.path}: {m}" for m in c.refused]
        lines += [f"reference not 1 {c.path} row {i}: answered {a!r}, label {b!r}" for i, a, b in c.failed]
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {"writable_root": "--writable-root" in sys.argv, "state_checks": "--state-checks" in sys.argv}
    print(report(os_coverage(args[0], *(int(a) for a in args[1:2]), **flags)))
