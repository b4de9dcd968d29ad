"""What every prompt source shares: the prompt item, bad-row errors and filtering, local json rows,
chat-templated prompt ids."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from mintrl.model.tokens import chat_ids

DEFAULT_INSTRUCTION = "{question}\nGive the final answer inside <answer></answer> tags."


@dataclass
class PromptItem:
    """One prompt of a group.

    Attributes:
        index: position in its split; question: the task text; reference: the reference answer
        (privileged context of the self-intervention judge); prompt_ids: chat-templated token ids;
        entry: the reasoning-gym entry (scored by the reward); task: the task name.
        solution: a reference solution in the reward's answer format (:mod:`mintrl.data.solutions`),
        or None where the source has none; what a guide splices in (:mod:`mintrl.guide`).
    """

    index: int
    question: str
    reference: str
    prompt_ids: list[int]
    entry: dict[str, Any] = field(repr=False)
    task: str = ""
    solution: str | None = field(default=None, repr=False)


class InvalidRow(ValueError):
    """A bad dataset row: missing, empty or non-string field, or a prompt over the length limit.
    The message names the row index and the field. ``data.skip_invalid=true`` skips such rows
    (counted) instead of stopping at the first."""


class RowFilter:
    """Builds items row by row: an :class:`InvalidRow` stops the build (default) or, with
    ``skip=True``, drops the row and is remembered in ``skipped`` (the messages, each once: a source
    that reads its whole file for each split skips a bad row twice, and it is one row)."""

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
            if str(err) not in self.skipped:
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


def prompt_ids(
    tokenizer,
    instruction: str,
    question: str,
    max_prompt_tokens: int,
    where: str,
    history: Sequence[Mapping[str, str]] = (),
    **chat_template_kwargs,
) -> list[int]:
    """Token ids of the chat-templated user message ``instruction.format(question=question)``,
    after the chat messages of ``history`` (``{"role", "content"}`` dicts, e.g. a worked example
    exchange; none by default).

    Raises:
        InvalidRow: the prompt is longer than ``max_prompt_tokens`` (``where`` names the row).
    """
    messages = [*map(dict, history), {"role": "user", "content": instruction.format(question=question)}]
    ids = chat_ids(tokenizer, messages, **chat_template_kwargs)
    if len(ids) > max_prompt_tokens:
        raise InvalidRow(
            f"{where}: field 'question': prompt has {len(ids)} tokens > max_prompt_tokens={max_prompt_tokens}"
        )
    return ids


class PromptSource(ABC):
    """A source of prompts (``data.prompts``): ``build(split, tokenizer, rows)`` gives the items of
    ``"train"`` or ``"val"``, each row checked (:class:`InvalidRow`, filtered by ``rows``).

    Contract: :meth:`serves_code` answers from the config alone, before anything is built (the
    config check pairs code problems with ``reward=code``)."""

    @abstractmethod
    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """The prompt items of ``split``."""

    @classmethod
    def serves_code(cls, config: Mapping[str, Any]) -> bool:
        """True when a source configured by ``config`` (its ``data.prompts`` node) yields coding
        problems scored by unit tests."""
        return False
