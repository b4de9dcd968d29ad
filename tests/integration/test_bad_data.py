"""Bad dataset rows are caught at load time: an error naming the row index and the field, or with
``data.skip_invalid=true`` the row is skipped and counted. One table of bad rows per format."""

from __future__ import annotations

import json

import pytest

from mintrl.data import RolloutDataModule
from mintrl.data.base import InvalidRow, RowFilter
from mintrl.data.benchmarks import HubPrompts
from mintrl.data.code import CodePrompts
from mintrl.env.sql.source import SqlTasks

GOOD_HE = {
    "task_id": "t/0",
    "prompt": "def f(x):\n",
    "canonical_solution": "    return x\n",
    "test": "def check(c):\n    assert c(1) == 1\n",
    "entry_point": "f",
}
# (row, the error it must give); row i of the file is BAD[i - 1] (row 0 is good)
BAD_CODE = [
    ({**GOOD_HE, "prompt": ""}, "row 1: field 'prompt' is missing, empty or not a string"),
    ({**GOOD_HE, "canonical_solution": None}, "row 2: field 'canonical_solution' is missing, empty or not a string"),
    ({**GOOD_HE, "test": 17}, "row 3: field 'test' is missing, empty or not a string"),
    (
        {"task_id": "m/1", "text": "Add.", "code": "def add(a, b): return a + b", "test_list": []},
        "row 4: field 'test_list' must be a non-empty list",
    ),
    ({"task_id": "x", "question": "?"}, "row 5: neither HumanEval format"),
    (
        {**GOOD_HE, "prompt": "def f(x):\n" + "    # padding\n" * 400},
        "row 6 (problem t/0): field 'question': prompt has",
    ),
]
GOOD_MATH = {"problem": "What is 1 + 1?", "answer": "2"}
BAD_MATH = [
    ({"problem": "  ", "answer": "2"}, "row 1: field 'problem' is missing or empty"),
    ({"problem": "What is 2 + 2?"}, "row 2: field 'answer' is missing or empty"),
    ({"problem": 42, "answer": "3"}, "row 3: field 'problem' is a int, not a string"),
    ({"problem": "x" * 3000, "answer": "3"}, "row 4: field 'question': prompt has"),
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("k", range(len(BAD_CODE)))
def test_each_bad_code_row_is_named(tmp_path, tokenizer, k):
    row, message = BAD_CODE[k]
    field = message.split(": ", 1)[1]
    path = _write(tmp_path / "code.jsonl", [GOOD_HE] * (k + 2) + [row])  # the bad row is row k + 2
    with pytest.raises(InvalidRow) as err:
        CodePrompts(path, val_size=1, max_prompt_tokens=512).build("train", tokenizer)
    assert f"row {k + 2}" in str(err.value) and field[:25] in str(err.value), str(err.value)


def test_bad_code_rows_are_skipped_and_counted(tmp_path, tokenizer):
    path = _write(tmp_path / "code.jsonl", [GOOD_HE, *[r for r, _ in BAD_CODE], GOOD_HE, GOOD_HE])
    with pytest.raises(InvalidRow, match="code.jsonl train row 1: field 'prompt'|code.jsonl row 1: field 'prompt'"):
        CodePrompts(path, val_size=1, max_prompt_tokens=512).build("train", tokenizer)
    rows = RowFilter(skip=True)
    source = CodePrompts(path, val_size=1, max_prompt_tokens=512)
    items = source.build("train", tokenizer, rows) + source.build("val", tokenizer, rows)
    assert len(items) == 3 and len(rows.skipped) == len(BAD_CODE)
    for (_, message), got in zip(BAD_CODE, rows.skipped):
        assert message.split(": ", 1)[1][:25] in got


def test_bad_math_rows_give_their_error_or_are_skipped(tmp_path, tokenizer):
    path = _write(tmp_path / "math.jsonl", [GOOD_MATH, *[r for r, _ in BAD_MATH]])
    for k, (row, message) in enumerate(BAD_MATH, 1):
        single = _write(tmp_path / f"m{k}.jsonl", [GOOD_MATH] * (k + 1) + [row])  # the bad row is row k + 1
        with pytest.raises(InvalidRow) as err:
            HubPrompts(single, max_prompt_tokens=512).build("val", tokenizer)
        assert f"row {k + 1}:" in str(err.value) and message.split(": ", 1)[1][:22] in str(err.value), str(err.value)
    rows = RowFilter(skip=True)
    assert [i.question for i in HubPrompts(path, max_prompt_tokens=512).build("val", tokenizer, rows)] == [
        "What is 1 + 1?"
    ]
    assert len(rows.skipped) == len(BAD_MATH)
    (tmp_path / "broken.jsonl").write_text(json.dumps(GOOD_MATH) + "\n{not json\n")
    with pytest.raises(InvalidRow, match="broken.jsonl line 2: not JSON"):
        HubPrompts(str(tmp_path / "broken.jsonl")).build("val", tokenizer)


def test_data_module_skip_invalid_counts_the_skipped_rows(tmp_path, tokenizer):
    path = _write(tmp_path / "code.jsonl", [GOOD_HE, *[r for r, _ in BAD_CODE], GOOD_HE, GOOD_HE])
    strict = RolloutDataModule(
        CodePrompts(path, val_size=1, max_prompt_tokens=512), rollout=None, tokenizer=tokenizer, prompts_per_step=1
    )
    with pytest.raises(InvalidRow, match="row 1: field 'prompt'"):
        strict.setup()
    lenient = RolloutDataModule(
        CodePrompts(path, val_size=1, max_prompt_tokens=512),
        rollout=None,
        tokenizer=tokenizer,
        prompts_per_step=1,
        skip_invalid=True,
    )
    lenient.setup()
    assert lenient.skipped_rows == len(BAD_CODE) and len(lenient.train_items) == 2 and len(lenient.val_items) == 1


def _dbbench_row(i: int, **changes) -> dict:
    row = {
        "description": f"What is the age of person {i}?",
        "label": [str(20 + i)],
        "table": {
            "table_name": "people",
            "table_info": {
                "columns": [{"name": "id", "type": "INT"}, {"name": "age", "type": "INT"}],
                "rows": [[i, 20 + i]],
            },
        },
        "type": ["other"],
        "sql": {"query": f"SELECT age FROM people WHERE id = {i};"},
    }
    return {**row, **changes}


def test_a_bad_row_of_a_file_both_splits_read_is_counted_once(tmp_path, tokenizer):
    # the DB-bench source reads the whole file for each split (then splits it): row 2 is skipped twice, one row
    rows = [_dbbench_row(i) for i in range(6)]
    rows[2] = _dbbench_row(2, description="")
    path = tmp_path / "dbbench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = RolloutDataModule(
        SqlTasks(path=str(path), val_size=2, train_size=None, split_seed=0),
        rollout=None,
        tokenizer=tokenizer,
        prompts_per_step=1,
        skip_invalid=True,
    )
    data.setup()
    assert data.skipped_rows == 1 and len(data.train_items) == 3 and len(data.val_items) == 2
