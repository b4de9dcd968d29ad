"""env=sql: the task generator, the instruction, the action protocol, the DB-bench loader, the source."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from sql_helpers import task

from mintrl.data.base import InvalidRow, RowFilter
from mintrl.env.sql.loader import load_dbbench
from mintrl.env.sql.protocol import Action, answers_match, parse_action
from mintrl.env.sql.source import SqlTasks
from mintrl.env.sql.tasks import PROTOCOL, Difficulty, generate_task, render_instruction, select_label

MEDIUM = Difficulty(3, 5, 5, 10, 2, 0.5, 0.3, 0.25)


def test_protocol_wording():
    assert PROTOCOL == (
        "To run SQL, write one statement in a ```sql block; its result is shown to you. When you know the answer, "
        "write it inside <answer></answer> tags (for a change to the table, run the statement, then write "
        "<answer>done</answer>)."
    )


def test_instruction_shows_the_whole_table():
    assert render_instruction(task()) == (
        "Table people (name TEXT, age INTEGER, city TEXT):\n"
        "name | age | city\nAnn | 34 | Rome\nBen | 21 | Oslo\nCara | 34 | Lima\n"
        "Question: What is the age of Ann?\n" + PROTOCOL
    )
    spaced = task(table="Olympic Medals", columns=[{"name": "Tie no", "type": "TEXT"}], rows=[["1"]])
    assert render_instruction(spaced).startswith('Table "Olympic Medals" ("Tie no" TEXT):\nTie no\n1\n')


def test_schema_only_instruction_hides_the_rows_and_keeps_tasks_apart():
    assert render_instruction(task(), show_rows=False) == (
        "Table people (name TEXT, age INTEGER, city TEXT):\n"
        "(3 rows, not shown: query the table to see them)\n"
        "Question: What is the age of Ann?\n" + PROTOCOL
    )
    source = SqlTasks(show_rows=False, train_size=40, val_size=20, train_seed=1, val_seed=2)
    val, train = source.tasks("val"), source.tasks("train")
    assert source.render(val[0]) == render_instruction(val[0], show_rows=False)
    assert "not shown" in source.examples()[0]["content"] and "Rex" not in source.examples()[0]["content"]
    # held-out tasks are told apart by their rows, which the schema-only instruction does not show
    assert not {source.key(t) for t in train} & {source.key(t) for t in val}
    assert source.key(val[0]) == render_instruction(val[0])


def test_generator_is_deterministic_and_valid():
    first = [generate_task(5, i, MEDIUM) for i in range(200)]
    assert first == [generate_task(5, i, MEDIUM) for i in range(200)]
    assert first != [generate_task(6, i, MEDIUM) for i in range(200)]
    kinds = Counter(t["kind"] for t in first)
    assert set(kinds) == {"select", "insert", "update", "delete"}
    for t in first:
        assert 3 <= len(t["columns"]) <= 5 and 5 <= len(t["rows"]) <= 10
        assert t["reference_action"] == f"```sql\n{t['query']}\n```"
        if t["kind"] == "select":
            assert t["label"] and t["label"] == select_label(t)
        else:
            assert t["label"] == ""
        json.dumps(t)  # JSON-serialisable


def test_easy_tasks_are_single_equality_lookups():
    for i in range(40):
        t = generate_task(1, i)
        assert t["kind"] == "select" and len(t["rows"]) == 3 and 2 <= len(t["columns"]) <= 3
        assert t["query"].count(" = ") == 1 and " AND " not in t["query"] and "(" not in t["query"]


def test_generated_hand_checked_task():
    t = generate_task(1, 0)
    assert t["rows"] == [["Zoe", 18], ["Ben", 24], ["Rosa", 59]]
    assert (t["question"], t["query"], t["label"]) == (
        "What is the points of Zoe?",
        "SELECT points FROM members WHERE name = 'Zoe'",
        "18",
    )


@pytest.mark.parametrize(
    "knobs,message",
    [
        (dict(min_columns=1), "data.prompts.min_columns must be an integer >= 2, got 1"),
        (dict(max_columns=7), "data.prompts.max_columns must be in [2, 6], got 7"),
        (dict(min_rows=4, max_rows=3), "data.prompts.max_rows must be an integer >= 4, got 3"),
        (dict(max_conditions=3), "data.prompts.max_conditions must be in [0, 2], got 3"),
        (dict(aggregate_prob=1.5), "data.prompts.aggregate_prob must be in [0.0, 1.0], got 1.5"),
    ],
)
def test_bad_knobs_are_named(knobs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Difficulty(**knobs)


def test_generated_splits_are_disjoint():
    source = SqlTasks(train_size=200, val_size=50)
    train, val = source.tasks("train"), source.tasks("val")
    assert len(train) == 200 and len(val) == 50
    assert not {render_instruction(t) for t in train} & {render_instruction(t) for t in val}
    assert source.tasks("val") == val
    with pytest.raises(ValueError, match="train_seed and val_seed must differ"):
        SqlTasks(train_seed=3, val_seed=3)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("I'll check.\n```sql\nSELECT age FROM people\n```", Action("query", "SELECT age FROM people", 12, 45)),
        ("```\nselect 1\n```", Action("query", "select 1", 0, 16)),
        ("```python\nprint(1)\n```\n```SQL SELECT 2```", Action("query", "SELECT 2", 23, 41)),
        ("```sql\nSELECT 3", Action("query", "SELECT 3", 0, 15)),  # left open: the turn ended in it
        ("```sql SELECT 1``` so <answer>a</answer> no, <answer> 7 </answer>", Action("answer", "7", 45, 65)),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text) == expected


def test_parse_invalid_actions():
    assert parse_action("```python\nprint(1)\n```").kind == "invalid"
    assert parse_action("```\nDROP TABLE x\n```").kind == "invalid"  # no language, not a query word
    assert parse_action("x" * 11, max_chars=10).text.startswith("Your message is too long (11 characters")
    assert parse_action("```sql\nSELECT 3", allow_open=False).kind == "invalid"


@pytest.mark.parametrize(
    "answer,label,same",
    [
        ("34", "34", True),
        ("34.0", "34", True),
        ("3.40e1", "34", True),
        ("35", "34", False),
        ("Cara, Ann", "Ann, Cara", True),
        ("'ann' , CARA.", "Ann, Cara", True),
        ("Ann", "Ann, Ann", False),
        ("Ann, Ann", "Ann, Ann", True),
        ("1174", "1174.0", True),
        ("2 goals", "2", False),
        ("", "", True),
    ],
)
def test_answers_match(answer, label, same):
    assert answers_match(answer, label, None) is same


def _row(**changes):
    row = {
        "description": "What is the age of Ann?",
        "label": ["34"],
        "table": {
            "table_name": "people",
            "table_info": {
                "columns": [{"name": "name", "type": "TEXT"}, {"name": "age", "type": "INT"}],
                "rows": [["Ann", "34"], ["Ben", "21"]],
            },
        },
        "type": ["other"],
        "sql": {"query": "SELECT age FROM people WHERE name = 'Ann';"},
    }
    row.update(changes)
    return row


def test_dbbench_loader(tmp_path):
    rows = [
        _row(),
        _row(sql={"query": "SELECT nope FROM people"}, label=[34.0]),  # broken reference: answer is the correction
        _row(type=["INSERT"], label=[], sql={"query": "INSERT INTO `people` VALUES ('Cy', '5')"}),
        _row(type=["DELETE"], label=[], sql={"query": "DELETE FROM people WHERE age = 21"}),
    ]
    path = tmp_path / "dbbench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    entries = load_dbbench(str(path))
    assert [e["kind"] for e in entries] == ["select", "select", "insert", "delete"]
    assert entries[0]["label"] == "34" and entries[0]["reference_action"] == (
        "```sql\nSELECT age FROM people WHERE name = 'Ann';\n```"
    )
    assert entries[1]["query"] == "" and entries[1]["reference_action"] == "<answer>34</answer>"
    assert entries[2]["label"] == "" and entries[0]["columns"][1] == {"name": "age", "type": "TEXT"}
    assert (entries[3]["source"], entries[3]["index"]) == ("dbbench.jsonl", 3)


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(description=""), "dbbench.jsonl row 1: field 'description': missing, empty or not a string"),
        (dict(label="34"), "dbbench.jsonl row 1: field 'label': missing or not a list of answer values"),
        (dict(type="SELECT"), None),  # a plain string type is accepted
        (dict(type=["SELECT", "x"]), "dbbench.jsonl row 1: field 'type'"),
        (dict(table={"table_name": "people"}), "dbbench.jsonl row 1: field 'table': missing, or without 'table_info'"),
        (
            dict(table={"table_name": "", "table_info": {"columns": [{"name": "a", "type": "TEXT"}], "rows": []}}),
            "dbbench.jsonl row 1: field 'table.table_name': missing, empty or not a string",
        ),
        (
            dict(
                table={"table_name": "t", "table_info": {"columns": [{"name": "a", "type": "TEXT"}], "rows": [[1, 2]]}}
            ),
            "dbbench.jsonl row 1: field 'table.table_info.rows' [0]: not a list of 1 values",
        ),
        (dict(table=[{}, {}]), "dbbench.jsonl row 1: field 'table': 2 tables (only one table per task is supported"),
        (
            dict(type=["UPDATE"], sql=None),
            "dbbench.jsonl row 1: field 'label': a update row needs its reference statement (label[0] or sql.query)",
        ),
        (
            dict(type=["UPDATE"], sql={"query": "UPDATE elsewhere SET a = 1"}),
            "dbbench.jsonl row 1: field 'sql.query': the reference statement fails: no such table: elsewhere",
        ),
    ],
)
def test_dbbench_bad_rows_name_row_and_field(tmp_path, changes, message):
    path = tmp_path / "dbbench.jsonl"
    path.write_text(json.dumps(_row()) + "\n" + json.dumps(_row(**changes)) + "\n")
    if message is None:
        assert len(load_dbbench(str(path))) == 2
        return
    with pytest.raises(InvalidRow) as err:
        load_dbbench(str(path))
    assert str(err.value).startswith(message)
    skip = RowFilter(skip=True)
    assert len(load_dbbench(str(path), skip)) == 1 and skip.skipped[0].startswith(message)


def test_source_splits_a_file(tmp_path):
    path = tmp_path / "db.jsonl"
    path.write_text("\n".join(json.dumps(_row(description=f"Q{i}?")) for i in range(5)) + "\n")
    source = SqlTasks(path=str(path), val_size=2, train_size=None, split_seed=0)
    val, train = source.tasks("val"), source.tasks("train")
    assert len(val) == 2 and len(train) == 3
    assert sorted(e["index"] for e in val + train) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="no such file"):
        SqlTasks(path=str(tmp_path / "missing.jsonl"))


def test_dbbench_labels_are_compared_value_by_value_as_agentbench_does():
    """A file row's label is a list of values: one value is compared whole (its commas kept); several
    as a multiset (a quoted answer value keeps its commas); numbers within AgentBench's 0.01."""
    one, two = ["Washington, D.C."], ["Washington, D.C.", "Paris"]
    assert answers_match("Washington, D.C.", "Washington, D.C.", one)
    assert not answers_match("D.C., Washington", "Washington, D.C.", one)
    assert answers_match('["Washington, D.C."]', "Washington, D.C.", one)
    assert answers_match('"Paris", "Washington, D.C."', "Washington, D.C., Paris", two)
    assert not answers_match("Paris, Washington, D.C.", "Washington, D.C., Paris", two)
    assert answers_match("34.004", "34", ["34"]) and not answers_match("34.02", "34", ["34"])
    assert answers_match("1,200", "1200", ["1200"])  # a thousands separator in one value


def test_the_loader_reports_what_it_changes(tmp_path, caplog):
    rows = [_row(), _row(sql={"query": "SELECT name FROM people WHERE age = 34"}), _row(label=["Washington, D.C."])]
    path = tmp_path / "dbbench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with caplog.at_level("WARNING", logger="mintrl.env.sql.loader"):
        entries = load_dbbench(str(path))
    assert [e["label_values"] for e in entries] == [["34"], ["34"], ["Washington, D.C."]]
    assert [e["query"] != "" for e in entries] == [True, False, False]
    assert [e.get("changed") for e in entries] == [
        None,
        "reference query dropped: its result ['Ann'] differs from the label ['34']",
        "reference query dropped: its result ['34'] differs from the label ['Washington, D.C.']",
    ]
    assert "dbbench.jsonl: 2 of 3 rows changed (rows 1, 2): reference query dropped" in caplog.text
