"""Evaluation prompt sources (``benchmark=`` configs of ``mintrl-eval``).

- :class:`BenchmarkPrompts` serves one split of any prompt source as the validation prompts (and
  no training prompts), optionally the first ``limit`` problems.
- :class:`ChampPrompts`: the answerable subset of CHAMP (``champ-dataset`` package, offline).
- :class:`HubPrompts`: a math benchmark from the Hugging Face hub or a local copy, loaded with
  ``datasets``; a clear error when neither is available.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from hydra.utils import get_class

from mintrl.core.checks import check_int
from mintrl.data.base import (
    DEFAULT_INSTRUCTION,
    InvalidRow,
    PromptItem,
    PromptSource,
    RowFilter,
    prompt_ids,
    read_json_rows,
)
from mintrl.data.code import CODE_INSTRUCTION, code_items, normalise_row
from mintrl.data.solutions import champ_solution

_WORD = re.compile(r"[A-Za-z]{2,}")
MATH_WORDS = {"sqrt", "floor", "ceil", "pi", "ln", "log", "exp", "sin", "cos", "tan", "infty", "frac", "binom"}


class BenchmarkPrompts(PromptSource):
    """One split of a prompt source as validation prompts; no training prompts.

    Args:
        source: any prompt source with ``build(split, tokenizer)`` (or :meth:`rows`-based sources
            below). split: which split of it ("val", "train", or "all" where supported).
        limit: keep the first ``limit`` problems (None: all).
    """

    def __init__(self, source, split: str = "val", limit: int | None = None):
        check_int("limit", limit, none_ok=True)
        self.source, self.split, self.limit = source, split, limit

    @classmethod
    def serves_code(cls, config) -> bool:
        """What its ``source`` serves."""
        source = config.get("source")
        target = source.get("_target_") if isinstance(source, Mapping) else None
        return bool(target) and get_class(str(target)).serves_code(source)

    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """``"val"``: the source's ``self.split`` problems (first ``limit``); ``"train"``: none."""
        if split == "train":
            return []
        items = (
            self.source.build(self.split, tokenizer, rows)
            if rows is not None
            else self.source.build(self.split, tokenizer)
        )
        return items[: self.limit] if self.limit else items


def is_answerable(answer: str) -> bool:
    """Whether a reference answer is one math expression ``math-verify`` can grade: no words but
    function names (``sqrt``, ``floor``, ...), and it verifies against itself."""
    import math_verify

    from mintrl.reward.math import parse_gold

    if not answer.strip() or any(w.lower() not in MATH_WORDS for w in _WORD.findall(answer)):
        return False
    gold = parse_gold(answer)
    return bool(gold) and math_verify.verify(gold, gold)


class _RowPrompts(PromptSource):
    """Shared ``build`` of sources whose rows are ``{"question", "answer", ...}`` dicts."""

    task = "benchmark"

    def __init__(
        self,
        instruction: str = DEFAULT_INSTRUCTION,
        max_prompt_tokens: int = 2048,
        chat_template_kwargs: dict | None = None,
    ):
        if "{question}" not in instruction:
            raise ValueError("instruction must contain '{question}'")
        self.instruction, self.max_prompt_tokens = instruction, max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def rows(self, rows: RowFilter | None = None) -> list[dict[str, Any]]:
        raise NotImplementedError

    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """All rows (``split`` is ``"val"`` or ``"all"``: a benchmark has one split); ``rows``:
        what to do with invalid rows (default: raise :class:`InvalidRow`)."""
        rows = rows or RowFilter()
        items = []
        for i, row in enumerate(self.rows(rows)):
            ids = rows(
                lambda i=i, row=row: prompt_ids(
                    tokenizer,
                    self.instruction,
                    row["question"],
                    self.max_prompt_tokens,
                    f"{self.task} row {row.get('row', i)}",
                    **self.chat_template_kwargs,
                )
            )
            if ids is not None:
                items.append(
                    PromptItem(len(items), row["question"], row["answer"], ids, row, self.task, row.get("solution"))
                )
        return items


class ChampPrompts(_RowPrompts):
    """CHAMP competition problems (Mao et al. 2024) shipped in ``champ-dataset``; only those whose
    answer :func:`is_answerable` (177 of 270 in v0). Graded by ``reward=math_verify``."""

    task = "champ"

    def __init__(self, version: str = "v0", **kwargs):
        super().__init__(**kwargs)
        self.version = version

    def rows(self, rows: RowFilter | None = None) -> list[dict[str, Any]]:
        import champ_dataset

        problems = champ_dataset.load(self.version).problems
        return [
            {"id": key, "question": p.text, "answer": p.answer, "solution": champ_solution(p)}
            for key, p in problems.items()
            if is_answerable(p.answer)
        ]


class HubPrompts(_RowPrompts):
    """A benchmark from the Hugging Face hub (cached) or a local copy, through ``datasets``.

    Args:
        path: hub id (e.g. ``HuggingFaceH4/MATH-500``), a local folder (``save_to_disk`` output or
            a folder of data files) or a local ``.json``/``.jsonl``/``.parquet`` file.
        name: the dataset config name (hub), if any. split: the split to read.
        question_field, answer_field: row fields of the question and the reference answer.
        solution_field: row field of a worked reference solution (``PromptItem.solution``, what a
            guide splices in), or None; a row whose field is missing or empty gets no solution.
        answer_pattern: optional regex whose first group is the answer inside the answer field
            (e.g. GSM8K's ``#### (.+)``).
        code: rows are coding problems in HumanEval/MBPP format (``reward=code``) instead.

    Raises:
        RuntimeError: the dataset can be loaded neither from the hub nor locally (what to do is in
            the message). ValueError: a row without the fields (row and field named).
    """

    @classmethod
    def serves_code(cls, config) -> bool:
        """Its ``code`` flag."""
        return bool(config.get("code", False))

    def __init__(
        self,
        path: str,
        split: str = "test",
        name: str | None = None,
        question_field: str = "problem",
        answer_field: str = "answer",
        answer_pattern: str | None = None,
        code: bool = False,
        solution_field: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.solution_field = solution_field
        self.path, self.split, self.name = path, split, name
        self.question_field, self.answer_field = question_field, answer_field
        self.answer_pattern = re.compile(answer_pattern, re.S) if answer_pattern else None
        self.code, self.task = code, os.path.basename(path.rstrip("/"))

    def load(self):
        """The ``datasets.Dataset`` of ``path``/``split``."""
        import datasets

        try:
            if os.path.isfile(self.path) and not self.path.endswith(".parquet"):
                return read_json_rows(self.path)  # rows as written: bad rows named, not an Arrow error
            if os.path.isfile(self.path):
                return datasets.load_dataset("parquet", data_files=self.path, split="train")
            if os.path.isdir(os.path.join(self.path, "")) and os.path.exists(
                os.path.join(self.path, "dataset_info.json")
            ):
                return datasets.load_from_disk(self.path)
            return datasets.load_dataset(self.path, self.name, split=self.split)
        except InvalidRow:
            raise
        except Exception as exc:  # noqa: BLE001 - offline, missing, or not a dataset: one clear message
            raise RuntimeError(
                f"benchmark {self.path!r} (split {self.split!r}) could not be loaded: {type(exc).__name__}: {str(exc)[:300]}. "
                "It needs the Hugging Face hub (then it is cached) or a local copy: set benchmark.prompts.path to a "
                "folder saved with Dataset.save_to_disk, a folder of data files, or a .jsonl/.parquet file."
            ) from exc

    def _row(self, i: int, row: dict) -> dict[str, Any]:
        if self.code:
            return normalise_row(dict(row), i, self.task)
        for key in (self.question_field, self.answer_field):
            value = row.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                raise InvalidRow(f"{self.task} row {i}: field {key!r} is missing or empty (fields: {sorted(row)})")
            if key == self.question_field and not isinstance(value, str):
                raise InvalidRow(f"{self.task} row {i}: field {key!r} is a {type(value).__name__}, not a string")
        answer = str(row[self.answer_field])
        if self.answer_pattern:
            match = self.answer_pattern.search(answer)
            if not match:
                raise InvalidRow(
                    f"{self.task} row {i}: field {self.answer_field!r}: answer_pattern finds nothing in {answer[-80:]!r}"
                )
            answer = match.group(1).strip()
        out = {"row": i, "question": row[self.question_field], "answer": answer}
        solution = row.get(self.solution_field) if self.solution_field else None
        if isinstance(solution, str) and solution.strip():
            out["solution"] = solution
        return out

    def rows(self, rows: RowFilter | None = None) -> list[dict[str, Any]]:
        """The valid rows, normalised (``rows``: what to do with invalid ones; default raise)."""
        rows = rows or RowFilter()
        out = [rows(lambda i=i, row=row: self._row(i, row)) for i, row in enumerate(self.load())]
        return [r for r in out if r is not None]

    def build(self, split: str, tokenizer, rows: RowFilter | None = None) -> list[PromptItem]:
        """All rows as prompt items (code rows keep their tests in ``item.entry``)."""
        if not self.code:
            return super().build(split, tokenizer, rows)
        instruction = CODE_INSTRUCTION if self.instruction == DEFAULT_INSTRUCTION else self.instruction
        return code_items(
            self.rows(rows),
            tokenizer,
            instruction,
            self.max_prompt_tokens,
            self.task,
            self.chat_template_kwargs,
            self.task,
            rows,
        )
