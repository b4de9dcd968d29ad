"""The prompt source an environment's tasks share (``data.prompts`` of ``env=shell`` and ``env=sql``): tasks
generated from two disjoint seeds or read from a benchmark file and split by a seeded shuffle, each rendered
as an instruction and chat-templated, with an optional worked example episode before it."""

from __future__ import annotations

import os
import random
from abc import abstractmethod
from typing import Any, ClassVar, Hashable, Sequence

from mintrl.core.checks import check_int, check_range
from mintrl.data.base import PromptItem, PromptSource, RowFilter, prompt_ids


def check_spans(knobs: Any, field: str, spans: Sequence[tuple[str, int, int]]) -> None:
    """Check the ``min_<name>`` / ``max_<name>`` pairs of a task generator's knobs (its Difficulty):
    for each ``(name, low, high)`` of ``spans``, ``low <= min_<name> <= max_<name> <= high`` (integers).

    Raises:
        ValueError: a knob out of its range, or a minimum above its maximum (named ``<field>.<knob>``).
    """
    for name, low, high in spans:
        lo, hi = getattr(knobs, f"min_{name}"), getattr(knobs, f"max_{name}")
        check_int(f"{field}.min_{name}", lo, low)
        check_int(f"{field}.max_{name}", hi, lo)
        check_range(f"{field}.max_{name}", hi, low, high)


class EnvTaskSource(PromptSource):
    """Train and validation tasks of one environment as prompt items.

    Each item's ``question`` is the task's instruction (:meth:`render`), ``entry`` the task dict the
    environment and its judge run, ``task`` the environment's name (:attr:`task`), and ``reference`` the
    reference action an intervention writes (``entry["reference_action"]``).

    A subclass names its environment (:attr:`task`), takes its generator's knobs into
    :attr:`difficulty` and passes these fields on (as keywords), and provides the environment's task
    functions (:meth:`generate_task`, :meth:`render`, :meth:`examples`) and :meth:`load`;
    :meth:`key` says when a generated training task counts as a copy of a validation task (default:
    the same instruction).

    Args:
        path: a local benchmark file (read by :meth:`load`), or None to generate tasks.
        train_size: training tasks (tasks, >= 1; None with a file: all rows that are not validation).
        val_size: validation tasks (tasks, >= 1; the first ``val_size`` rows of a file after the shuffle).
        train_seed, val_seed: generator seeds (must differ); a generated training task whose :meth:`key`
            equals a validation task's is skipped, so the splits are disjoint.
        split_seed: seed of the shuffle that splits a file.
        max_prompt_tokens: prompt length limit (tokens); a longer prompt is an invalid row.
        chat_template_kwargs: extra arguments of the tokenizer's chat template.
        example: put the worked example episode (:meth:`examples`) before each task as earlier chat turns.

    Raises:
        ValueError: a size out of range (named ``data.prompts.<field>``), equal seeds, a missing file.
    """

    task: ClassVar[str]
    difficulty: Any  # the generator's knobs (the environment's Difficulty), set by the subclass

    def __init__(
        self,
        path: str | None = None,
        train_size: int | None = 1000,
        val_size: int = 64,
        train_seed: int = 1,
        val_seed: int = 2,
        split_seed: int = 0,
        max_prompt_tokens: int = 512,
        chat_template_kwargs: dict | None = None,
        example: bool = True,
    ):
        check_int("data.prompts.train_size", train_size, none_ok=path is not None)
        check_int("data.prompts.val_size", val_size)
        check_int("data.prompts.max_prompt_tokens", max_prompt_tokens)
        if train_seed == val_seed:
            raise ValueError("data.prompts.train_seed and val_seed must differ (disjoint seeds)")
        self.path = os.path.expanduser(path) if path else None
        if self.path is not None and not os.path.isfile(self.path):
            raise ValueError(f"data.prompts.path={path!r}: no such file")
        self.sizes = {"train": train_size, "val": val_size}
        self.seeds = {"train": train_seed, "val": val_seed}
        self.split_seed, self.max_prompt_tokens = split_seed, max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.example = bool(example)

    # --- what an environment provides -------------------------------------------------------------

    @staticmethod
    @abstractmethod
    def generate_task(seed: int, index: int, difficulty: Any) -> dict[str, Any]:
        """Task ``index`` of the generator seeded with ``seed`` at ``difficulty`` (deterministic)."""

    @staticmethod
    @abstractmethod
    def render(entry: dict[str, Any]) -> str:
        """The instruction of a task (the user message)."""

    @staticmethod
    @abstractmethod
    def examples() -> list[dict[str, str]]:
        """The worked example episode as chat messages."""

    @abstractmethod
    def load(self, rows: RowFilter | None) -> list[dict[str, Any]]:
        """Every task of the file at :attr:`path`, in file order.

        Raises:
            InvalidRow: a bad row (unless ``rows`` skips it).
        """

    def key(self, entry: dict[str, Any]) -> Hashable:
        """What makes two generated tasks the same (default: the instruction)."""
        return self.render(entry)

    # --- shared -----------------------------------------------------------------------------------

    def generate(self, seed: int, index: int) -> dict[str, Any]:
        """Task ``index`` of the generator seeded with ``seed`` at this source's :attr:`difficulty`."""
        return self.generate_task(seed, index, self.difficulty)

    def _generated(self, split: str) -> list[dict[str, Any]]:
        if split == "val":
            return [self.generate(self.seeds["val"], i) for i in range(self.sizes["val"])]
        held_out = {self.key(t) for t in self._generated("val")}
        tasks, index = [], 0
        while len(tasks) < self.sizes["train"]:
            task = self.generate(self.seeds["train"], index)
            index += 1
            if self.key(task) not in held_out:
                tasks.append(task)
        return tasks

    def _loaded(self, split: str, rows: RowFilter | None) -> list[dict[str, Any]]:
        entries = self.load(rows)
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
            instruction = self.render(entry)
            where = f"{self.task} {split} task {entry['index']} ({entry['source']})"
            ids = rows(
                lambda: prompt_ids(
                    tokenizer,
                    "{question}",
                    instruction,
                    self.max_prompt_tokens,
                    where,
                    history=self.examples() if self.example else (),
                    **self.chat_template_kwargs,
                )
            )
            if ids is not None:
                items.append(PromptItem(len(items), instruction, entry["reference_action"], ids, entry, self.task))
        return items
