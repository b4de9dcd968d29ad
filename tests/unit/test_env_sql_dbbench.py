"""env=sql with AgentBench DB-bench files: answers compared as AgentBench compares them (environment and
judge alike), labels written so that they match, reference queries checked value by value, and every
task the loader changes or drops counted and logged."""

from __future__ import annotations

import json

import pytest
from sql_helpers import item

from mintrl.core.verdict import KEEP, REVISE, ReviewRequest
from mintrl.data.base import RowFilter
from mintrl.env.sql.environment import SqlEnvironment
from mintrl.env.sql.loader import load_dbbench
from mintrl.env.sql.protocol import answers_match
from mintrl.judge.sql import SqlJudge

CITIES = [["Washington, D.C.", "USA", 689], ["Paris", "France", 2103], ["Oslo", "Norway", 709]]


def _row(label, query=None, **changes):
    row = {
        "description": "Which city?",
        "label": label,
        "table": {
            "table_name": "cities",
            "table_info": {
                "columns": [
                    {"name": "city", "type": "TEXT"},
                    {"name": "country", "type": "TEXT"},
                    {"name": "population", "type": "INT"},
                ],
                "rows": [list(r) for r in CITIES],
            },
        },
        "type": ["other"],
    }
    if query is not None:
        row["sql"] = {"query": query}
    row.update(changes)
    return row


def _load(tmp_path, rows, skip=None):
    path = tmp_path / "dbbench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_dbbench(str(path), skip)


@pytest.mark.parametrize(
    "answer,label,same",
    [
        # one-value labels: the whole answer is one value, its commas kept (removed as thousands separators)
        ("Washington, D.C.", ["Washington, D.C."], True),
        ("Washington D.C.", ["Washington, D.C."], True),  # AgentBench drops a value's commas on both sides
        ("D.C., Washington", ["Washington, D.C."], False),
        ("['Washington, D.C.']", ["Washington, D.C."], True),
        ("[('Washington, D.C.',)]", ["Washington, D.C."], True),  # a MySQL-style result
        ("[Washington, D.C.", ["Washington, D.C."], False),  # not a list literal: one value
        # several values: a list literal's items, or comma-separated values where quotes keep commas
        ('"Paris", "Washington, D.C."', ["Washington, D.C.", "Paris"], True),
        ("Paris, Washington, D.C.", ["Washington, D.C.", "Paris"], False),
        ("['', 'Paris']", ["Paris"], False),  # a list literal's empty item is a value ("0"), as in AgentBench
        ("[None, 'Paris']", ["Paris"], False),
        # numbers within 0.01; NULL-like words are "0"
        ("34.004", ["34"], True),
        ("34.02", ["34"], False),
        ("1,200", ["1200"], True),
        ("-Infinity", ["0"], True),
        ("null", [None], True),
        ("12%", ["12"], True),
        ("1,000%", ["1000"], False),  # AgentBench strips the % and keeps the value's commas
        ("[1, 2.001]", ["2", "1"], True),
        ("[1, 2]", ["1", "2", "2"], False),
        ("Paris, Paris", ["Paris"], False),  # one-value label: one value
        ("['Paris', 'Paris']", ["Paris"], True),  # several text values compare as sets, as in AgentBench
    ],
)
def test_file_answers_are_compared_as_agentbench_does(answer, label, same):
    values = ["NULL" if v is None else v for v in label]
    assert answers_match(answer, ", ".join(values), values) is same


def test_labels_with_commas_are_written_so_that_they_match(tmp_path):
    """A label of several values, one holding a comma, is written as a list literal: the reference
    action (and the judge's correction) then scores 1."""
    entries = _load(tmp_path, [_row(["Washington, D.C.", "Paris"]), _row(["Washington, D.C."]), _row(["Oslo", 2])])
    assert [e["label"] for e in entries] == ["['Washington, D.C.', 'Paris']", "Washington, D.C.", "Oslo, 2"]
    env = SqlEnvironment()
    for entry in entries:
        assert entry["reference_action"] == f"<answer>{entry['label']}</answer>"
        env.reset([item(entry)])
        assert env.step([0], [entry["reference_action"]]).rewards == [1.0]


def test_the_reference_query_is_checked_value_by_value(tmp_path):
    """The reference query's result values are compared with the label's values (not its text
    joined by commas): two cities that hold a comma match a two-value label; two rows whose text
    joins to the one label value do not."""
    rows = [
        _row(["Washington, D.C.", "Paris"], "SELECT city FROM cities WHERE country <> 'Norway'"),
        _row(["Paris, France"], "SELECT city, country FROM cities WHERE city = 'Paris'"),
        _row(["Paris"], "SELECT city FROM cities WHERE country = 'France'"),
    ]
    entries = _load(tmp_path, rows)
    assert [e["query"] != "" for e in entries] == [True, False, True]
    assert entries[1]["changed"] == (
        "reference query dropped: its result ['Paris', 'France'] differs from the label ['Paris, France']"
    )


def test_the_judge_compares_a_file_answer_as_the_environment_does(tmp_path):
    (entry,) = _load(tmp_path, [_row(["Washington, D.C."])])

    def review(answer):
        request = ReviewRequest("q", "ref", "", [f"<answer>{answer}</answer>"], final=True, entry=entry)
        verdict = SqlJudge().review([request])[0]
        return verdict.kind, verdict.correction

    assert review("Washington, D.C.") == (KEEP, None)
    assert review("D.C., Washington") == (REVISE, "<answer>Washington, D.C.</answer>")


def test_the_loader_counts_and_logs_what_it_changes_and_drops(tmp_path, caplog):
    rows = [
        _row(["Paris"], "SELECT city FROM cities WHERE country = 'France'"),
        _row(["Oslo"], "SELECT city FROM cities WHERE country = 'France'"),  # result differs: query dropped
        _row(["Oslo"], "SELECT nope FROM cities"),  # fails on SQLite: query dropped
        _row(["Oslo"], description=""),  # invalid: the row is dropped
    ]
    skip = RowFilter(skip=True)
    with caplog.at_level("WARNING", logger="mintrl.env.sql.loader"):
        entries = _load(tmp_path, rows, skip)
    assert [e["index"] for e in entries] == [0, 1, 2]
    assert entries.changed == {
        1: "reference query dropped: its result ['Paris'] differs from the label ['Oslo']",
        2: "reference query dropped: it fails on SQLite (field 'query': the reference statement fails: "
        "no such column: nope)",
    }
    assert entries.dropped == {3: "dbbench.jsonl row 3: field 'description': missing, empty or not a string"}
    assert [r.getMessage() for r in caplog.records] == [
        "dbbench.jsonl: 2 of 4 rows changed (rows 1, 2): reference query dropped",
        "dbbench.jsonl: 1 of 4 rows dropped (rows 3): dbbench.jsonl row 3: field 'description': missing, empty or "
        "not a string",
    ]
    clean = _load(tmp_path, rows[:1])
    assert (clean.changed, clean.dropped) == ({}, {})
