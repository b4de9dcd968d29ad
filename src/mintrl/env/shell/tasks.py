"""Procedural shell tasks in the style of AgentBench's OS interaction: an init script lays out files
and folders under ``~/data``, a question about them, the answer (computed in Python from the
layout), a reference command that prints it, and the instruction the agent sees.

A task is a JSON-serialisable dict (the prompt item's ``entry``):

- ``question``: the natural-language question; ``init``: the bash script run first in the episode's
  fresh shell (as the sandbox user, in ``~`` = ``/tmp/work``; "" for none);
- ``reference``: a command whose output is the answer ("" when a loaded row has none);
- ``label``: the answer text; ``check``: how an answer is compared with it (one of
  :data:`mintrl.env.shell.protocol.CHECKS`);
- ``reference_action``: the action text an intervention writes (:func:`reference_action`);
- ``kind``: the question kind (one of :data:`KINDS`, or ``loaded``); ``source``, ``index``: where
  the task came from (``generated`` and the generator index, or the file name and row).

Files live under the sandbox's private tmpfs (the rest of the file system is read-only there), so
every generated task uses ``~/data``. Questions about owners or users are not generated: every
file belongs to the one sandbox user (no root inside the sandbox to make others). Every file and
folder gets the same modification time (2024-01-01 00:00 UTC) so that ``ls -l`` is deterministic
(its owner column shows the slot's uid, which may differ between slots).

Generated tasks are deterministic given ``(seed, index, difficulty)``.
"""

from __future__ import annotations

import posixpath
import random
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from mintrl.core.checks import check_int, check_range
from mintrl.env.source import check_spans

ROOT = "~/data"
MTIME = "2024-01-01 00:00:00 UTC"  # every generated file's and folder's modification time
KINDS = ("count_files", "file_content", "count_ext", "count_dirs", "count_lines", "largest_file", "total_size")
EXTENSIONS = ("txt", "log", "csv", "md")
STEMS = (
    "notes", "report", "data", "todo", "list", "draft", "plan", "index", "items", "summary",
    "config", "backup", "readme", "output", "input", "record",
)  # fmt: skip
FOLDERS = ("docs", "logs", "src", "tmp", "old", "new", "work", "misc")
WORDS = ("apple", "river", "stone", "cloud", "green", "error", "table", "light", "music", "paper", "ocean", "tiger")
_TRIES = 50  # draws before the generator gives up finding a task with a unique answer
PROTOCOL = (
    "You are in a Linux bash shell as an unprivileged user; your home folder ~ is /tmp/work (the rest of the "
    "file system is read-only, and there is no network). To run a command, write it in a ```bash block; you will "
    "see its output. When you know the answer, write it inside <answer></answer> tags."
)


@dataclass(frozen=True)
class Difficulty:
    """The generator's knobs (checked on construction; ``field`` prefix names them in errors).

    Attributes:
        min_files, max_files: files in the layout (files, 1..40).
        max_depth: deepest folder level below ``~/data`` (0: every file directly in it; 0..4).
        min_lines, max_lines: lines per file (lines, 1..30); each line holds 1-4 words of
            :data:`WORDS`.
        kinds: the question kinds drawn from, uniformly (a subset of :data:`KINDS`).
        field: config prefix of the knobs in error messages.

    Raises:
        ValueError: a knob out of its range, a minimum above its maximum, or an unknown kind.
    """

    min_files: int = 2
    max_files: int = 4
    max_depth: int = 0
    min_lines: int = 1
    max_lines: int = 3
    kinds: tuple[str, ...] = ("count_files", "file_content")
    field: str = "data.prompts"

    def __post_init__(self):
        f = self.field
        check_spans(self, f, (("files", 1, 40), ("lines", 1, 30)))
        check_int(f"{f}.max_depth", self.max_depth, 0)
        check_range(f"{f}.max_depth", self.max_depth, 0, 4)
        object.__setattr__(self, "kinds", tuple(self.kinds))
        unknown = [k for k in self.kinds if k not in KINDS]
        if not self.kinds or unknown:
            raise ValueError(f"{f}.kinds={list(self.kinds)!r}: give one or more of {KINDS}")


@dataclass(frozen=True)
class Layout:
    """A generated tree under :data:`ROOT`: ``folders`` (relative paths, parents first) and
    ``files`` (relative path -> content), every path relative to ``~/data``."""

    folders: tuple[str, ...]
    files: dict[str, str]


def file_size(content: str) -> int:
    """Bytes of a file with this content (UTF-8)."""
    return len(content.encode())


def init_script(layout: Layout) -> str:
    """The bash script that makes ``layout`` under ``~/data``, every mtime :data:`MTIME`."""
    lines = ["mkdir -p ~/data"]
    lines += [f"mkdir -p ~/data/{shlex.quote(d)}" for d in layout.folders]
    lines += [f"printf '%s' {shlex.quote(c)} > ~/data/{shlex.quote(p)}" for p, c in layout.files.items()]
    lines.append(f"find ~/data -exec touch -h -d {shlex.quote(MTIME)} {{}} +")
    return "\n".join(lines)


def reference_action(entry: Mapping[str, Any]) -> str:
    """The action an intervention writes for a task: the reference command in a ```bash block (the
    agent then sees the answer and writes it itself), or ``<answer>label</answer>`` for a loaded
    row without a reference command."""
    command = (entry.get("reference") or "").strip()
    return f"```bash\n{command}\n```" if command else f"<answer>{entry.get('label', '')}</answer>"


def render_instruction(entry: Mapping[str, Any]) -> str:
    """The first user message: the question, then the action protocol (:data:`PROTOCOL`)."""
    return f"Question: {entry['question']}\n{PROTOCOL}"


def _layout(rng: random.Random, d: Difficulty) -> Layout:
    folders: list[str] = []
    if d.max_depth:
        for _ in range(rng.randint(1, 2 * d.max_depth)):
            parent = rng.choice([""] + [f for f in folders if f.count("/") + 1 < d.max_depth])
            name = rng.choice(FOLDERS)
            path = posixpath.join(parent, name) if parent else name
            if path not in folders:
                folders.append(path)
    files: dict[str, str] = {}
    for _ in range(rng.randint(d.min_files, d.max_files)):
        for _ in range(_TRIES):
            name = f"{rng.choice(STEMS)}.{rng.choice(EXTENSIONS)}"
            path = posixpath.join(rng.choice([""] + folders), name).lstrip("/")
            if path not in files:
                break
        lines = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(d.min_lines, d.max_lines))
        ]
        files[path] = "\n".join(lines) + "\n"
    return Layout(tuple(folders), files)


def _question(rng: random.Random, kind: str, layout: Layout) -> tuple[str, str, str, str] | None:
    """``(question, reference command, label, check)`` of one kind on ``layout``, or None when this
    layout has no unique answer for it."""
    files = layout.files
    if kind == "count_files":
        top = [p for p in files if "/" not in p]
        return (
            "How many files are directly in the folder ~/data (not in its subfolders)?",
            "find ~/data -maxdepth 1 -type f | wc -l",
            str(len(top)),
            "integer",
        )
    if kind == "count_ext":
        ext = rng.choice(sorted({p.rsplit(".", 1)[1] for p in files}))
        count = sum(p.endswith(f".{ext}") for p in files)
        return (
            f"How many files with the extension .{ext} are there under ~/data, subfolders included?",
            f"find ~/data -type f -name '*.{ext}' | wc -l",
            str(count),
            "integer",
        )
    if kind == "count_dirs":
        return (
            "How many folders are there under ~/data, subfolders included (not counting ~/data itself)?",
            "find ~/data -mindepth 1 -type d | wc -l",
            str(len(layout.folders)),
            "integer",
        )
    path = rng.choice(sorted(files))
    where = f"~/data/{path}"
    if kind == "file_content":
        first = files[path].split("\n")[0]
        return (
            f"What is the first line of the file {where}?",
            f"head -n 1 {where}",
            first,
            "exact",
        )
    if kind == "count_lines":
        word = rng.choice(WORDS)
        count = sum(word in line.split() for line in files[path].split("\n"))
        return (
            f"How many lines of the file {where} contain the word {word}?",
            f"grep -cw {word} {where}",
            str(count),
            "integer",
        )
    if kind == "largest_file":
        sizes = sorted(((file_size(c), p) for p, c in files.items()), reverse=True)
        if len(sizes) > 1 and sizes[0][0] == sizes[1][0]:
            return None
        return (
            "What is the name (without its folder) of the largest file under ~/data, subfolders included?",
            "find ~/data -type f -printf '%s %f\\n' | sort -n | tail -n 1 | cut -d ' ' -f 2",
            posixpath.basename(sizes[0][1]),
            "exact",
        )
    if kind == "total_size":
        return (
            "What is the total size in bytes of all the files under ~/data, subfolders included?",
            "find ~/data -type f -exec cat {} + | wc -c",
            str(sum(file_size(c) for c in files.values())),
            "integer",
        )
    raise ValueError(f"unknown shell task kind {kind!r}")


def generate_task(seed: int, index: int, difficulty: Difficulty | None = None) -> dict[str, Any]:
    """Task ``index`` of the generator seeded with ``seed`` (see the module docstring).

    The same ``(seed, index, difficulty)`` always gives the same task; its ``label`` is what its
    ``reference`` command prints on the layout its ``init`` makes (stripped).

    Raises:
        RuntimeError: no task with a unique answer in :data:`_TRIES` draws.
    """
    d = difficulty or Difficulty()
    rng = random.Random(f"mintrl-shell:{seed}:{index}")
    for _ in range(_TRIES):
        layout = _layout(rng, d)
        kind = rng.choice(d.kinds)
        got = _question(rng, kind, layout)
        if got is None:
            continue
        question, reference, label, check = got
        entry = {
            "question": question,
            "init": init_script(layout),
            "reference": reference,
            "label": label,
            "check": check,
            "kind": kind,
            "source": "generated",
            "index": index,
        }
        entry["reference_action"] = reference_action(entry)
        return entry
    raise RuntimeError(f"shell task generator: no task with a unique answer for seed {seed} index {index}")


EXAMPLE_TASK = {"question": "How many files are directly in the folder ~/box (not in its subfolders)?"}
EXAMPLE_COMMAND = "ls ~/box | wc -l"
EXAMPLE_OUTPUT = "3"


def example_messages() -> list[dict[str, str]]:
    """A worked example episode as chat messages (about 170 tokens), put before a task's prompt by
    ``ShellTasks(example=True)``: the instruction of :data:`EXAMPLE_TASK`, a command, the
    environment's observation of its output, the answer."""
    from mintrl.env.shell.protocol import output_observation

    return [
        {"role": "user", "content": render_instruction(EXAMPLE_TASK)},
        {"role": "assistant", "content": f"```bash\n{EXAMPLE_COMMAND}\n```"},
        {"role": "user", "content": output_observation(EXAMPLE_OUTPUT, 0)},
        {"role": "assistant", "content": f"<answer>{EXAMPLE_OUTPUT}</answer>"},
    ]
