"""``data.prompts`` for ``env=sql``: SQL tasks, generated or read from a DB-bench file."""

from __future__ import annotations

import os
import random
from typing import Any

from mintrl.data.base import PromptItem, PromptSource, RowFilter, prompt_ids
from mintrl.env.sql.loader import load_dbbench
from mintrl.env.sql.tasks import Difficulty, example_messages, generate_task, render_instruction
from mintrl.training.checks import check_int

TASK = "sql"


class SqlTasks(PromptSource):
    """Train and validation SQL tasks (:mod:`mintrl.env.sql.tasks`) as prompt items.

    Each item's ``question`` is the instruction (table, question, protocol:
    :func:`~mintrl.env.sql.tasks.render_instruction`), ``entry`` the task dict the environment and
    the SQL judge run, ``task`` ``"sql"``, and ``reference`` the reference action an intervention
    writes (``entry["reference_action"]``): the reference statement in a ```sql block, for a SELECT
    too, so that a corrected agent sees the result and then answers itself.

    Args:
        path: a local DB-bench ``.jsonl``/``.json`` file (:mod:`mintrl.env.sql.loader`), or None to
            generate tasks.
        train_size, val_size: tasks per split (tasks, >= 1; for a file, ``train_size`` None takes
            all the rows not held out).
        train_seed, val_seed: generator seeds (must differ); a generated training task identical
            to a validation task is skipped, so the splits are disjoint.
        split_seed: seed of the shuffle that splits a file (the first ``val_size`` rows are
            validation).
        min_columns, max_columns, min_rows, max_rows, max_conditions, comparison_prob,
            aggregate_prob, mutation_fraction: the generator's difficulty
            (:class:`~mintrl.env.sql.tasks.Difficulty`, units there).
        max_prompt_tokens: longer prompts are rejected (tokens).
        example: put a worked example episode before each task, as earlier chat turns
            (:func:`~mintrl.env.sql.tasks.example_messages`, about 150 tokens of the prompt).
        chat_template_kwargs: extra arguments of ``apply_chat_template``.

    Raises:
        ValueError: a field out of range (named ``data.prompts.<field>``), equal seeds, a missing
            file.
    """

    def __init__(
        self,
        path: str | None = None,
        train_size: int | None = 1000,
        val_size: int = 64,
        train_seed: int = 1,
        val_seed: int = 2,
        split_seed: int = 0,
        min_columns: int = 2,
        max_columns: int = 3,
        min_rows: int = 3,
        max_rows: int = 3,
        max_conditions: int = 1,
        comparison_prob: float = 0.0,
        aggregate_prob: float = 0.0,
        mutation_fraction: float = 0.0,
        max_prompt_tokens: int = 512,
        chat_template_kwargs: dict | None = None,
        example: bool = True,
    ):
        check_int("data.prompts.train_size", train_size, none_ok=path is not None)
        check_int("data.prompts.val_size", val_size)
        check_int("data.prompts.max_prompt_tokens", max_prompt_tokens)
        if train_seed == val_seed:
            raise ValueError("data.prompts.train_seed and val_seed must differ (disjoint seeds)")
        self.difficulty = Difficulty(
            min_columns=min_columns,
            max_columns=max_columns,
            min_rows=min_rows,
            max_rows=max_rows,
            max_conditions=max_conditions,
            comparison_prob=comparison_prob,
            aggregate_prob=aggregate_prob,
            mutation_fraction=mutation_fraction,
        )
        self.path = os.path.expanduser(path) if path else None
        if self.path is not None and not os.path.isfile(self.path):
            raise ValueError(f"data.prompts.path={path!r}: no such file")
        self.sizes = {"train": train_size, "val": val_size}
        self.seeds = {"train": train_seed, "val": val_seed}
        self.split_seed, self.max_prompt_tokens = split_seed, max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.example = bool(example)

    def _generated(self, split: str) -> list[dict[str, Any]]:
        if split == "val":
            return [generate_task(self.seeds["val"], i, self.difficulty) for i in range(self.sizes["val"])]
        held_out = {render_instruction(t) for t in self._generated("val")}
        tasks, index = [], 0
        while len(tasks) < self.sizes["train"]:
            task = generate_task(self.seeds["train"], index, self.difficulty)
            index += 1
            if render_instruction(task) not in held_out:
                tasks.append(task)
        return tasks

    def _loaded(self, split: str, rows: RowFilter | None) -> list[dict[str, Any]]:
        entries = load_dbbench(self.path, rows)
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
            where = f"sql {split} task {entry['index']} ({entry['source']})"
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
