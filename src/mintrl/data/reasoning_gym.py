"""Prompt sources: procedural, verifiable tasks from reasoning-gym (``data.prompts``)."""

from __future__ import annotations

import reasoning_gym
from reasoning_gym.factory import DATASETS

from mintrl.core.checks import check_int
from mintrl.data.base import DEFAULT_INSTRUCTION, InvalidRow, PromptItem, PromptSource, RowFilter, prompt_ids
from mintrl.data.solutions import reasoning_gym_solution


class ReasoningGymPrompts(PromptSource):
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
        for name, value in (
            ("train_size", train_size),
            ("val_size", val_size),
            ("max_prompt_tokens", max_prompt_tokens),
        ):
            check_int(f"data.prompts.{name}", value)
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
        dataset = reasoning_gym.create_dataset(
            self.task, seed=self.seeds[split], size=self.sizes[split], **self.task_kwargs
        )
        items = []
        for i, entry in enumerate(dataset):
            item = rows(lambda i=i, entry=entry: self._item(i, entry, split, tokenizer))
            if item is not None:
                items.append(item)
        return items

    def history(self) -> list[dict[str, str]]:
        """Chat messages put before every prompt (none here; a subclass may add a worked example)."""
        return []

    def _item(self, i: int, entry: dict, split: str, tokenizer) -> PromptItem:
        for key in ("question", "answer"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise InvalidRow(f"{self.task} {split} row {i}: field {key!r} is missing, empty or not a string")
        ids = prompt_ids(
            tokenizer,
            self.instruction,
            entry["question"],
            self.max_prompt_tokens,
            f"{self.task} {split} row {i}",
            history=self.history(),
            **self.chat_template_kwargs,
        )
        return PromptItem(i, entry["question"], entry["answer"], ids, entry, self.task, reasoning_gym_solution(entry))
