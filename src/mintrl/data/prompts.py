"""Prompt sources: procedural, verifiable tasks from reasoning-gym (``data.prompts``)."""

from __future__ import annotations

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


def prompt_ids(tokenizer, instruction: str, question: str, max_prompt_tokens: int, where: str, **chat_template_kwargs) -> list[int]:
    """Token ids of the chat-templated user message ``instruction.format(question=question)``.

    Raises:
        ValueError: the prompt is longer than ``max_prompt_tokens`` (``where`` names the row).
    """
    ids = chat_ids(tokenizer, [{"role": "user", "content": instruction.format(question=question)}], **chat_template_kwargs)
    if len(ids) > max_prompt_tokens:
        raise ValueError(f"{where}: prompt has {len(ids)} tokens > max_prompt_tokens={max_prompt_tokens}")
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

    def build(self, split: str, tokenizer) -> list[PromptItem]:
        """Generate and chat-template the ``split`` ("train" or "val") prompts.

        Raises:
            ValueError: a row with an empty question or answer, or a prompt longer than
                ``max_prompt_tokens`` (row index and field named).
        """
        dataset = reasoning_gym.create_dataset(self.task, seed=self.seeds[split], size=self.sizes[split], **self.task_kwargs)
        items = []
        for i, entry in enumerate(dataset):
            for key in ("question", "answer"):
                if not isinstance(entry.get(key), str) or not entry[key].strip():
                    raise ValueError(f"{self.task} {split} row {i}: field {key!r} is missing or empty")
            ids = prompt_ids(tokenizer, self.instruction, entry["question"], self.max_prompt_tokens, f"{self.task} {split} row {i}",
                             **self.chat_template_kwargs)
            items.append(PromptItem(i, entry["question"], entry["answer"], ids, entry, self.task))
        return items
