"""env=sql on rows in each form AgentBench's DB-bench files hold: a change row whose reference statement is
``label[0]`` and whose expected table is ``answer_md5`` (AgentBench's MySQL hash of the table), MySQL syntax in
the reference statements, names MySQL refuses, a row whose database is a SQLite file, and the table built as
AgentBench builds it (every column TEXT, every value ``str(value)``, compared as MySQL's utf8mb4_0900_ai_ci)."""

from __future__ import annotations

import json
import time

import pytest
from sql_helpers import item

from mintrl.data.base import InvalidRow, RowFilter
from mintrl.env.sql.coverage import file_coverage
from mintrl.env.sql.database import TaskDatabase
from mintrl.env.sql.environment import SqlEnvironment
from mintrl.env.sql.loader import load_dbbench
from mintrl.env.sql.mysql import table_hash, to_sqlite

COLUMNS = [{"name": "Nation", "type": "TEXT"}, {"name": "Gold", "type": "INT"}, {"name": "Total", "type": "INT"}]
ROWS = [["Norway", "3", "5"], ["Sweden", 2, 4.0], ["Côte d'Ivoire", "05", "1"]]
# AgentBench's answer_md5 of a table: md5 of the sorted first-5-hex-digit md5s of each row's values joined by
# "," (MySQL: md5(group_concat(substring(md5(concat_ws(',', cols)), 1, 5) order by ...))), as MySQL's result
# text. These three were computed from the tables below by that formula (the module reproduces 237 of the 240
# answer_md5 of dev.jsonl and standard.jsonl this way):
MD5_INSERTED = "[('aaa0259febf48256f61433952c6aee80',)]"  # ROWS as text + ("Men's Team", "1", "1")
MD5_UPDATED = "[('3420ed59831e251cd89f2eb4f03e866e',)]"  # ROWS as text, Côte d'Ivoire's Total "2"
MD5_INITIAL = "[('d5d1feb3ff5b95aad22b7cb94a6f5f6d',)]"  # ROWS as text: ("Sweden", "2", "4.0"), ("Côte...", "05", "1")
INSERT = "INSERT INTO `Medal Table` (`Nation`, `Gold`, `Total`) VALUES ('Men\\'s Team', '1', 1)"
UPDATE = 'UPDATE `Medal Table` SET Total = Total + 1 WHERE Nation = "cote d\\\'ivoire"'


def _row(kind="other", label=None, md5=None, query=None, columns=COLUMNS, rows=ROWS, **extra):
    row = {
        "description": "Add the row." if kind in ("INSERT", "UPDATE", "DELETE") else "Which nation?",
        "label": label if label is not None else ["Sweden"],
        "table": {"table_name": "Medal Table", "table_info": {"columns": columns, "rows": rows}},
        "type": [kind],
    }
    if md5 is not None:
        row["answer_md5"] = md5
    if query is not None:
        row["sql"] = {"query": query}
    return row | extra


def _load(tmp_path, rows, skip=None):
    path = tmp_path / "dbbench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_dbbench(str(path), skip)


def _rewards(entry, actions):
    """The reward of one episode of ``entry`` that runs ``actions`` then answers ``done``."""
    env = SqlEnvironment()
    env.reset([item(entry)])
    for action in actions:
        assert env.step([0], [f"```sql\n{action}\n```"]).done == [False]
    return env.step([0], ["<answer>done</answer>"]).rewards[0]


def test_a_change_row_is_scored_on_the_table_its_label0_makes(tmp_path):
    """AgentBench's change rows carry the reference statement as label[0] (MySQL: backticks, a backslash
    escape) and the expected table as answer_md5: the row loads, the reference scores 1, and an agent's table
    is compared as AgentBench's hash compares it: rows in any order, duplicates counted, values as text."""
    (entry,) = _load(tmp_path, [_row("INSERT", [INSERT], MD5_INSERTED)])
    assert entry["kind"] == "insert"
    assert (
        entry["query"] == 'INSERT INTO "Medal Table" ("Nation", "Gold", "Total") VALUES (\'Men\'\'s Team\', \'1\', 1)'
    )
    assert [c["type"] for c in entry["columns"]] == ["TEXT", "TEXT", "TEXT"]
    assert entry["rows"] == [["Norway", "3", "5"], ["Sweden", "2", "4.0"], ["Côte d'Ivoire", "05", "1"]]
    assert _rewards(entry, [entry["query"]]) == 1.0
    assert _rewards(entry, ["INSERT INTO \"Medal Table\" VALUES ('Men''s Team', 1, '1')"]) == 1.0  # 1 is '1'
    assert _rewards(entry, ["INSERT INTO \"Medal Table\" VALUES ('Men''s Team', '1', '1.0')"]) == 0.0
    twice = "INSERT INTO \"Medal Table\" VALUES ('Men''s Team', '1', '1')"
    assert _rewards(entry, [twice, twice]) == 0.0  # a duplicate row is a different table
    assert _rewards(entry, []) == 0.0


def test_an_update_matches_rows_as_mysql_compares_text(tmp_path):
    """MySQL compares TEXT case- and accent-insensitively (utf8mb4_0900_ai_ci) and reads a double-quoted
    token as a string: the reference UPDATE changes Côte d'Ivoire's row, as answer_md5 says it does."""
    (entry,) = _load(tmp_path, [_row("UPDATE", [UPDATE], MD5_UPDATED)])
    assert entry["query"] == "UPDATE \"Medal Table\" SET Total = Total + 1 WHERE Nation = 'cote d''ivoire'"
    assert _rewards(entry, [entry["query"]]) == 1.0
    assert _rewards(entry, ["UPDATE \"Medal Table\" SET Total = '2' WHERE Gold = 5"]) == 1.0  # '05' = 5
    assert _rewards(entry, ["UPDATE \"Medal Table\" SET Total = '2.0' WHERE Gold = 5"]) == 0.0


def test_a_change_row_whose_answer_md5_is_another_table_is_refused(tmp_path):
    """AgentBench scores a change row by answer_md5 alone: when label[0] does not make that table (the
    initial table's hash here), no agent doing what label[0] does scores there, and the row is refused."""
    skip = RowFilter(skip=True)
    entries = _load(tmp_path, [_row("UPDATE", [UPDATE], MD5_INITIAL)], skip)
    assert len(entries) == 0
    assert entries.dropped == {
        0: "dbbench.jsonl row 0: field 'answer_md5': d5d1feb3ff5b95aad22b7cb94a6f5f6d is not the table the "
        "reference statement (label[0]) makes (3420ed59831e251cd89f2eb4f03e866e)"
    }


def test_a_change_row_without_answer_md5_uses_its_reference_statement(tmp_path):
    """Without answer_md5 AgentBench computes the expected table from sql.query; label[0] otherwise."""
    (by_query, by_label) = _load(tmp_path, [_row("INSERT", ["x"], query=INSERT), _row("INSERT", [INSERT])])
    assert by_query["query"] == by_label["query"]
    assert _rewards(by_query, [by_query["query"]]) == _rewards(by_label, [by_label["query"]]) == 1.0


@pytest.mark.parametrize(
    "columns,rows,reason",
    [
        (
            [{"name": "", "type": "TEXT"}, {"name": "Gold", "type": "TEXT"}],
            [["a", "1"]],
            "AgentBench's MySQL table cannot be created: column 1 has an empty name (MySQL error 1166, "
            "Incorrect column name '')",
        ),
        (
            [{"name": "Gold", "type": "TEXT"}, {"name": "gold", "type": "INT"}],
            [["a", "1"]],
            "AgentBench's MySQL table cannot be created: columns 1 ('Gold') and 2 ('gold') have the same name "
            "(MySQL error 1060, Duplicate column name; MySQL's column names ignore case and accents)",
        ),
        (
            [{"name": "Gold ", "type": "TEXT"}],
            [["1"]],
            "AgentBench's MySQL table cannot be created: column 1's name 'Gold ' ends with a space (MySQL error "
            "1166, Incorrect column name)",
        ),
        (
            COLUMNS,
            [],
            "AgentBench's MySQL table cannot be filled: no rows (its INSERT ... VALUES with no row is a MySQL "
            "syntax error)",
        ),
    ],
)
def test_names_mysql_refuses_are_refused_with_mysql_s_reason(tmp_path, columns, rows, reason):
    """AgentBench creates the table in MySQL (every column TEXT); a table MySQL refuses is an error there
    (no agent can score), so the row is refused naming MySQL's error."""
    with pytest.raises(InvalidRow) as err:
        _load(tmp_path, [_row(columns=columns, rows=rows)])
    assert str(err.value) == f"dbbench.jsonl row 0: field 'table.table_info': {reason}"


def test_a_row_on_agentbench_s_sqlite_file_is_refused(tmp_path):
    """A ``user_sqlite`` row (AgentBench's env_train form) runs on a SQLite file of AgentBench's data folder,
    which the row does not hold."""
    row = _row(user_sqlite=True, create={"database": "california_schools", "init": "california_schools.sqlite"})
    del row["table"]
    with pytest.raises(InvalidRow) as err:
        _load(tmp_path, [row])
    assert str(err.value) == (
        "dbbench.jsonl row 0: field 'user_sqlite': the row's database is AgentBench's SQLite file "
        "california_schools/california_schools.sqlite (its data folder), not a table in the row"
    )


def test_select_queries_in_mysql_syntax_keep_their_reference(tmp_path):
    """A SELECT row's reference query in MySQL syntax runs (a backslash escape, a double-quoted string); a
    number compares with a TEXT number by value (as MySQL compares a TEXT column with a number); a query
    that finds nothing matches a label of ``none`` (AgentBench reads an empty answer as 0, as ``none``)."""
    rows = [
        _row(label=["1"], query="SELECT Total FROM `Medal Table` WHERE Nation = 'Cote d\\'Ivoire'"),
        _row(label=["Sweden", "Norway"], query='SELECT Nation FROM `Medal Table` WHERE Gold < 4 AND Nation <> "x"'),
        _row(label=["none"], query="SELECT Nation FROM `Medal Table` WHERE Gold > 10"),
        _row(label=["Côte d'Ivoire"], query="SELECT Nation FROM `Medal Table` ORDER BY Gold DESC LIMIT 1"),
    ]
    entries = _load(tmp_path, rows)
    assert [e.get("changed") for e in entries] == [None, None, None, None]
    assert entries[0]["query"] == "SELECT Total FROM \"Medal Table\" WHERE Nation = 'Cote d''Ivoire'"


def test_translation_of_mysql_statements():
    names = ["1952_Grand_Prix", "Pos", "Driver"]
    like = "SELECT \"Driver\" FROM t WHERE Driver LIKE 'a\\%' -- ok"
    cases = {
        "INSERT INTO 1952_Grand_Prix (Pos, Driver) VALUES (22, 'Tony\\nGaze')": (
            "INSERT INTO \"1952_Grand_Prix\" (Pos, Driver) VALUES (22, 'Tony\nGaze')"
        ),
        'UPDATE t SET Driver = "Men\\\'s ""A""" WHERE `Po``s` = 1 # a comment': (
            "UPDATE t SET Driver = 'Men''s \"A\"' WHERE \"Po`s\" = 1"
        ),
        like: like,  # a name in double quotes stays one; MySQL's \\% keeps its backslash; a -- comment stays
        "SELECT 1952 FROM [t x]": "SELECT 1952 FROM [t x]",
    }
    for mysql, sqlite in cases.items():
        assert to_sqlite(mysql, names) == sqlite
    with pytest.raises(ValueError, match="unterminated"):
        to_sqlite("SELECT 'a", names)


def test_table_hash_is_agentbench_s():
    assert table_hash([("Norway", "3", "5"), ("Sweden", "2", "4.0"), ("Côte d'Ivoire", "05", "1")]) == (
        "d5d1feb3ff5b95aad22b7cb94a6f5f6d"
    )
    assert table_hash([]) == "None"  # MySQL's md5 of no rows is NULL
    assert table_hash([("a", None, "b")]) == table_hash([("a", "b")])  # CONCAT_WS skips NULL


def test_the_mysql_collation_survives_hostile_text_and_a_long_sort():
    """Compared as MySQL compares text, in Python: invalid UTF-8 is an error, numbers out of range compare,
    and a sort of a cross join stops at the time limit (the comparison is cheap past it)."""
    entry = {
        "table": "t",
        "columns": [{"name": "a", "type": "TEXT"}],
        "rows": [[str(i) if i % 2 else f"n{i}é"] for i in range(100)],
        "collation": "mysql",
    }
    db = TaskDatabase(entry, timeout_s=0.5, max_rows=5)
    try:
        odd = db.execute("SELECT a FROM t ORDER BY CAST(x'fe' AS TEXT) < a")
        assert odd.error == "the statement was stopped: a value it compares or returns is not valid UTF-8 text"
        assert db.execute("SELECT '1e999' > a, '-1e999' < a FROM t WHERE a = '7'").rows == [(1, 1)]
        assert db.execute("SELECT a FROM t WHERE a = 'N2E' OR a = '7.0' ORDER BY a").rows == [("n2é",), ("7",)]
        assert db.execute("SELECT count(*) FROM t WHERE a > 98").rows == [(1,)]  # 'n2é' reads as 0, as in MySQL
        start = time.monotonic()
        long = db.execute("SELECT x.a FROM t x, t y, t z, t w ORDER BY x.a, y.a, z.a, w.a")
        assert time.monotonic() - start < 5.0
        assert long.timed_out and not long.ok
    finally:
        db.close()


def test_coverage_reports_each_row(tmp_path):
    path = tmp_path / "dev.jsonl"
    rows = [_row("INSERT", [INSERT], MD5_INSERTED), _row(label=["Sweden"], query="SELECT nope FROM x"), _row(rows=[])]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    report = file_coverage(str(path))
    assert (report.rows, report.loaded, report.scored) == (3, 2, 2)
    assert list(report.refused) == [2] and report.refused[2].startswith("dev.jsonl row 2: field 'table.table_info'")
    assert list(report.changed) == [1]
    assert report.rewards == {0: 1.0, 1: 1.0}
