"""``data.prompts`` for ``env=shell``: shell tasks, generated or read from an AgentBench OS file."""

from __future__ import annotations

import os
import random
from typing import Any, Sequence

from mintrl.data.base import PromptItem, PromptSource, RowFilter, prompt_ids
from mintrl.env.shell.loader import load_os_tasks
from mintrl.env.shell.tasks import KINDS, Difficulty, example_messages, generate_task, render_instruction
from mintrl.training.checks import check_int

TASK = "shell"


class ShellTasks(PromptSource):
    """Train and validation shell tasks (:mod:`mintrl.env.shell.tasks`) as prompt items.

    Each item's ``question`` is the instruction (question and protocol:
    :func:`~mintrl.env.shell.tasks.render_instruction`), ``entry`` the task dict the environment and
    the shell judge run, ``task`` ``"shell"``, and ``reference`` the reference action an
    intervention writes (``entry["reference_action"]``: the reference command in a ```bash block,
    so that a corrected agent sees the output and then answers itself).

    Args:
        path: a local AgentBench OS ``.json``/``.jsonl`` file (:mod:`mintrl.env.shell.loader`; each
            row's init runs once in the sandbox at load time), or None to generate tasks.
        scripts_dir: folder of the file's ``{"file": ...}`` scripts (default: the file's folder).
        train_size, val_size: tasks per split (tasks, >= 1; for a file, ``train_size`` None takes
            all the rows not held out).
        train_seed, val_seed: generator seeds (must differ); a generated training task whose
            instruction and init equal a validation task's is skipped, so the splits are disjoint.
        split_seed: seed of the shuffle that splits a file (the first ``val_size`` rows are validation).
        min_files, max_files, max_depth, min_lines, max_lines, kinds: the generator's difficulty
            (:class:`~mintrl.env.shell.tasks.Difficulty`, units there).
        max_prompt_tokens: longer prompts are rejected (tokens).
        example: put a worked example episode before each task, as earlier chat turns
            (:func:`~mintrl.env.shell.tasks.example_messages`).
        chat_template_kwargs: extra arguments of ``apply_chat_template``.
        uid: sandbox uid of the load-time runs of a file's rows (used only as root).

    Raises:
        ValueError: a field out of range (named ``data.prompts.<field>``), equal seeds, a missing file.
    """

    def __init__(
        self,
        path: str | None = None,
        scripts_dir: str | None = None,
        train_size: int | None = 1000,
        val_size: int = 64,
        train_seed: int = 1,
        val_seed: int = 2,
        split_seed: int = 0,
        min_files: int = 2,
        max_files: int = 4,
        max_depth: int = 0,
        min_lines: int = 1,
        max_lines: int = 3,
        kinds: Sequence[str] = ("count_files", "file_content"),
        max_prompt_tokens: int = 512,
        chat_template_kwargs: dict | None = None,
        example: bool = True,
        uid: int = 64300,
    ):
        check_int("data.prompts.train_size", train_size, none_ok=path is not None)
        check_int("data.prompts.val_size", val_size)
        check_int("data.prompts.max_prompt_tokens", max_prompt_tokens)
        if train_seed == val_seed:
            raise ValueError("data.prompts.train_seed and val_seed must differ (disjoint seeds)")
        self.difficulty = Difficulty(
            min_files=min_files,
            max_files=max_files,
            max_depth=max_depth,
            min_lines=min_lines,
            max_lines=max_lines,
            kinds=tuple(kinds),
        )
        self.path = os.path.expanduser(path) if path else None
        if self.path is not None and not os.path.isfile(self.path):
            raise ValueError(f"data.prompts.path={path!r}: no such file")
        self.scripts_dir, self.uid = scripts_dir, uid
        self.sizes = {"train": train_size, "val": val_size}
        self.seeds = {"train": train_seed, "val": val_seed}
        self.split_seed, self.max_prompt_tokens = split_seed, max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.example = bool(example)

    @staticmethod
    def _key(entry: dict[str, Any]) -> tuple[str, str]:
        return render_instruction(entry), entry["init"]

    def _generated(self, split: str) -> list[dict[str, Any]]:
        if split == "val":
            return [generate_task(self.seeds["val"], i, self.difficulty) for i in range(self.sizes["val"])]
        held_out = {self._key(t) for t in self._generated("val")}
        tasks, index = [], 0
        while len(tasks) < self.sizes["train"]:
            task = generate_task(self.seeds["train"], index, self.difficulty)
            index += 1
            if self._key(task) not in held_out:
                tasks.append(task)
        return tasks

    def _loaded(self, split: str, rows: RowFilter | None) -> list[dict[str, Any]]:
        entries = load_os_tasks(self.path, rows, self.scripts_dir, self.uid)
        if self.sizes["val"] >= len(entries):
            raise ValueError(f"data.prompts.val_size={self.sizes['val']} leaves no training task of {len(entries)}")
        order = list(range(len(entries)))
        random.Random(self.split_seed).shuffle(order)
        val, train = order[: self.sizes["val"]], order[self.sizes["val"] :]
        chosen = val if split == "val" else train[: self.sizes["train"]]
        return [entries[k] for k in chosen]

    def tasks(self, split: str, rows: RowFilter | None = None) -> list[dict[str, Any]]:
        """The task entries of ``split`` ("train" or "val"), without tokenizing.

        Raises:
            ValueError: an unknown split, or ``val_size`` that leaves no training task of a file.
            InvalidRow: a bad file row (unless ``rows`` skips it).
        """
        if split not in self.sizes:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return self._generated(split) if self.path is None else self._loaded(split, rows)

    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """Chat-templated prompt items of ``split``.

        Raises:
            InvalidRow: a bad file row, or a prompt longer than ``max_prompt_tokens`` (the row is
                named; ``rows`` may skip it instead).
        """
        rows = rows or RowFilter()
        items = []
        for entry in self.tasks(split, rows):
            instruction = render_instruction(entry)
            where = f"shell {split} task {entry['index']} ({entry['source']})"
            ids = rows(
                lambda: prompt_ids(
                    tokenizer,
                    "{question}",
                    instruction,
                    self.max_prompt_tokens,
                    where,
                    history=example_messages() if self.example else (),
                    **self.chat_template_kwargs,
                )
            )
            if ids is not None:
                items.append(PromptItem(len(items), instruction, entry["reference_action"], ids, entry, TASK))
        return items


__all__ = ["KINDS", "ShellTasks", "TASK"]
