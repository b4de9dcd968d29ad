"""Prompt sources: procedural, verifiable tasks from reasoning-gym (``data.prompts``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import reasoning_gym
from reasoning_gym.factory import DATASETS

from mintrl.model.tokens import chat_ids

DEFAULT_INSTRUCTION = "{question}\nGive the final answer inside <answer></answer> tags."


@dataclass
class PromptItem:
    """One prompt of a group.

    Attributes:
        index: position in its split; question: the task text; reference: the reference answer
        (privileged context of the self-intervention judge); prompt_ids: chat-templated token ids;
        entry: the reasoning-gym entry (scored by the reward); task: the task name.
    """

    index: int
    question: str
    reference: str
    prompt_ids: list[int]
    entry: dict[str, Any] = field(repr=False)
    task: str = ""


class InvalidRow(ValueError):
    """A bad dataset row: missing, empty or non-string field, or a prompt over the length limit.
    The message names the row index and the field. ``data.skip_invalid=true`` skips such rows
    (counted) instead of stopping at the first."""


class RowFilter:
    """Builds items row by row: an :class:`InvalidRow` stops the build (default) or, with
    ``skip=True``, drops the row and is remembered in ``skipped`` (the messages)."""

    def __init__(self, skip: bool = False):
        self.skip = skip
        self.skipped: list[str] = []

    def __call__(self, make):
        """``make()``, or None for a skipped invalid row."""
        try:
            return make()
        except InvalidRow as err:
            if not self.skip:
                raise
            self.skipped.append(str(err))
            return None


def read_json_rows(path: str) -> list[dict[str, Any]]:
    """Rows of a local ``.jsonl`` / ``.jsonl.gz`` (one object per line) or ``.json`` (a list) file,
    each field as written. ``datasets`` would coerce every column to one Arrow type and refuse a
    file whose rows disagree without naming the row; read this way, a bad row is named (or
    skipped with ``data.skip_invalid``) by the row checks of the prompt sources.

    Raises:
        InvalidRow: a line that is not a JSON object (line number named).
    """
    import gzip
    import json

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        if path.endswith(".json"):
            rows = json.load(f)
            rows = rows if isinstance(rows, list) else [rows]
        else:
            rows = []
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise InvalidRow(f"{os.path.basename(path)} line {n}: not JSON ({err.msg})") from None
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InvalidRow(f"{os.path.basename(path)} row {n}: a {type(row).__name__}, not a JSON object")
    return rows


def prompt_ids(tokenizer, instruction: str, question: str, max_prompt_tokens: int, where: str, **chat_template_kwargs) -> list[int]:
    """Token ids of the chat-templated user message ``instruction.format(question=question)``.

    Raises:
        InvalidRow: the prompt is longer than ``max_prompt_tokens`` (``where`` names the row).
    """
    ids = chat_ids(tokenizer, [{"role": "user", "content": instruction.format(question=question)}], **chat_template_kwargs)
    if len(ids) > max_prompt_tokens:
        raise InvalidRow(f"{where}: field 'question': prompt has {len(ids)} tokens > max_prompt_tokens={max_prompt_tokens}")
    return ids


class ReasoningGymPrompts:
    """Train and validation prompts of one reasoning-gym task, from disjoint seeds.

    Args:
        task: reasoning-gym dataset name (e.g. ``basic_arithmetic``).
        task_kwargs: generator config of that task.
        train_size, val_size: number of prompts per split (positive).
        train_seed, val_seed: generator seeds; must differ (disjoint seeds).
        instruction: user-message template with ``{question}``.
        max_prompt_tokens: longer prompts are rejected (tokens).
        chat_template_kwargs: extra arguments of ``apply_chat_template`` (e.g. ``enable_thinking:
            false`` for Qwen3's non-thinking mode, as in the paper).

    Raises:
        ValueError: unknown task (message lists valid names), non-positive sizes, equal seeds.
    """

    def __init__(
        self,
        task: str = "basic_arithmetic",
        task_kwargs: dict | None = None,
        train_size: int = 1000,
        val_size: int = 64,
        train_seed: int = 1,
        val_seed: int = 2,
        instruction: str = DEFAULT_INSTRUCTION,
        max_prompt_tokens: int = 512,
        chat_template_kwargs: dict | None = None,
    ):
        if task not in DATASETS:
            raise ValueError(f"data.prompts.task={task!r} is not a reasoning-gym task; valid: {sorted(DATASETS)}")
        for name, value in (("train_size", train_size), ("val_size", val_size), ("max_prompt_tokens", max_prompt_tokens)):
            if value <= 0:
                raise ValueError(f"data.prompts.{name} must be positive, got {value}")
        if train_seed == val_seed:
            raise ValueError("data.prompts.train_seed and val_seed must differ (disjoint seeds)")
        if "{question}" not in instruction:
            raise ValueError("data.prompts.instruction must contain '{question}'")
        self.task, self.task_kwargs = task, dict(task_kwargs or {})
        self.sizes = {"train": train_size, "val": val_size}
        self.seeds = {"train": train_seed, "val": val_seed}
        self.instruction, self.max_prompt_tokens = instruction, max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """Generate and chat-template the ``split`` ("train" or "val") prompts.

        Args:
            rows: what to do with invalid rows (default: raise).

        Raises:
            InvalidRow: a row with a missing, empty or non-string question or answer, or a prompt
                longer than ``max_prompt_tokens`` (row index and field named).
        """
        rows = rows or RowFilter()
        dataset = reasoning_gym.create_dataset(self.task, seed=self.seeds[split], size=self.sizes[split], **self.task_kwargs)
        items = []
        for i, entry in enumerate(dataset):
            item = rows(lambda i=i, entry=entry: self._item(i, entry, split, tokenizer))
            if item is not None:
                items.append(item)
        return items

    def _item(self, i: int, entry: dict, split: str, tokenizer) -> PromptItem:
        for key in ("question", "answer"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise InvalidRow(f"{self.task} {split} row {i}: field {key!r} is missing, empty or not a string")
        ids = prompt_ids(tokenizer, self.instruction, entry["question"], self.max_prompt_tokens, f"{self.task} {split} row {i}",
                         **self.chat_template_kwargs)
        return PromptItem(i, entry["question"], entry["answer"], ids, entry, self.task)
