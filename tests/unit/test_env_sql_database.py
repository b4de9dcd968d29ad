"""env=sql: the contained per-episode database (hostile SQL, limits, snapshots)."""

from __future__ import annotations

import re
import time

import pytest
from sql_helpers import task

from mintrl.env.sql.database import CLOCK, TaskDatabase, render_value
from mintrl.env.sql.tasks import Difficulty, generate_task

HOSTILE = [
    (
        "ATTACH DATABASE '/tmp/mintrl_sql_attack.db' AS x",
        "Error: not authorized: ATTACH, DETACH and VACUUM are refused.",
    ),
    ("VACUUM INTO '/tmp/mintrl_sql_attack.db'", "Error: not authorized: ATTACH, DETACH and VACUUM are refused."),
    ("PRAGMA table_info(people)", "Error: not authorized: PRAGMA is refused."),
    (
        "SELECT * FROM sqlite_master",
        "Error: not authorized: sqlite_master is refused (the table is shown in the instruction).",
    ),
    (
        "SELECT * FROM pragma_table_info('people')",
        "Error: not authorized: changing the schema (CREATE, DROP, ALTER, ANALYZE) is refused.",
    ),
    ("CREATE TABLE other (x)", "Error: not authorized: changing the schema (CREATE, DROP, ALTER, ANALYZE) is refused."),
    ("DROP TABLE people", "Error: not authorized: changing the schema (CREATE, DROP, ALTER, ANALYZE) is refused."),
    (
        "ALTER TABLE people ADD COLUMN z",
        "Error: not authorized: changing the schema (CREATE, DROP, ALTER, ANALYZE) is refused.",
    ),
    ("BEGIN", "Error: not authorized: transactions are refused (each statement commits itself)."),
    ("SELECT load_extension('/tmp/evil.so')", "Error: not authorized: the function load_extension() is refused."),
    ("SELECT random()", "Error: not authorized: the function random() is refused."),
    ("SELECT randomblob(1000000000)", "Error: not authorized: the function randomblob() is refused."),
    # the date functions without the clock or time zone
    ("SELECT date('now')", f"Error: not authorized: {CLOCK}."),
    ("SELECT date()", f"Error: not authorized: {CLOCK}."),
    ("SELECT strftime('%s')", f"Error: not authorized: {CLOCK}."),
    ("SELECT datetime(' NOW ')", f"Error: not authorized: {CLOCK}."),
    ("SELECT julianday('now' || char(0) || 'x')", f"Error: not authorized: {CLOCK}."),
    ("SELECT unixepoch(CAST('now' AS BLOB))", f"Error: not authorized: {CLOCK}."),
    ("SELECT time('12:00', 'localtime')", f"Error: not authorized: {CLOCK}."),
    ("SELECT date('2020-01-01', 'UTC')", f"Error: not authorized: {CLOCK}."),
    ("SELECT printf('%.*c', 1000000000, 'x')", "Error: not authorized: the function printf() is refused."),
    ("SELECT 1; DROP TABLE people", "Error: only one statement may run at a time."),
    ("SELECT * FROM nowhere", "Error: no such table: nowhere."),
    ("SELECT zeroblob(1000000000)", "Error: not authorized: the function zeroblob() is refused."),
    # functions outside the allow list, one per family: memory addresses, introspection, JSON, side channels
    ("SELECT fts3_tokenizer('simple')", "Error: not authorized: the function fts3_tokenizer() is refused."),
    ("SELECT fts3_tokenizer('simple', X'00')", "Error: not authorized: the function fts3_tokenizer() is refused."),
    ("SELECT sqlite_version()", "Error: not authorized: the function sqlite_version() is refused."),
    (
        "SELECT sqlite_compileoption_used('ENABLE_FTS3')",
        "Error: not authorized: the function sqlite_compileoption_used() is refused.",
    ),
    ("SELECT json_extract('{\"a\": 1}', '$.a')", "Error: not authorized: the function json_extract() is refused."),
    ("SELECT last_insert_rowid()", "Error: not authorized: the function last_insert_rowid() is refused."),
    ("SELECT unknown_function(1)", "Error: no such function: unknown_function."),
    (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000) INSERT INTO people SELECT 'a', x, "
        "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' FROM c",
        "Error: database or disk is full.",
    ),
]
SLOW = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c a, c b",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT * FROM c a, c b",
]


@pytest.fixture()
def db():
    database = TaskDatabase(task(), timeout_s=0.5, max_rows=20, max_chars=500)
    yield database
    database.close()


@pytest.mark.parametrize("sql,text", HOSTILE)
def test_hostile_statements_are_refused_and_the_table_survives(db, sql, text):
    start = time.monotonic()
    result = db.execute(sql)
    assert time.monotonic() - start < 3
    assert (result.ok, result.text) == (False, text)
    assert db.snapshot() == [("Ann", 34, "Rome"), ("Ben", 21, "Oslo"), ("Cara", 34, "Lima")]
    assert db.execute("SELECT count(*) FROM people").text == "count(*)\n3"  # the database still answers


@pytest.mark.parametrize("sql", SLOW)
def test_endless_statements_stop_at_the_time_limit(db, sql):
    start = time.monotonic()
    result = db.execute(sql)
    assert 0.5 <= time.monotonic() - start < 3
    assert result.timed_out and result.text == "Error: the statement ran longer than 0.5 s and was stopped."


def test_a_result_is_cut_at_the_row_and_character_caps():
    db = TaskDatabase(task(), max_rows=2, max_chars=500)
    endless = db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c")
    assert endless.ok and endless.truncated and endless.rows == [(1,), (2,)]
    assert endless.text == "x\n1\n2\n... (only the first 2 rows are shown)"
    db.close()
    db = TaskDatabase(task(), max_rows=20, max_chars=10)
    wide = db.execute("SELECT name, city FROM people")
    assert wide.text == "name | cit\n... (result cut at 10 characters)" and wide.truncated
    db.close()


def test_rows_changes_and_snapshot(db):
    assert db.execute("SELECT name, age FROM people WHERE age = 34").text == "name | age\nAnn | 34\nCara | 34"
    assert db.execute("SELECT name FROM people WHERE age > 99").text == "name\n(no rows)"
    assert db.execute("UPDATE people SET age = 35 WHERE age = 34").text == "OK, 2 rows changed."
    assert db.execute("INSERT INTO people VALUES ('Abe', 1, 'Rome')").text == "OK, 1 rows changed."
    assert db.snapshot() == [("Abe", 1, "Rome"), ("Ann", 35, "Rome"), ("Ben", 21, "Oslo"), ("Cara", 35, "Lima")]
    assert db.execute("SELECT ROUND(AVG(age), 2) FROM people").rows == [(23.0,)]


def test_render_value():
    assert [render_value(v) for v in (None, 34, 12.0, 2.5, 1 / 3, "Rome", b"\x01")] == [
        "NULL",
        "34",
        "12",
        "2.5",
        "0.333333333333333",
        "Rome",
        "x'01'",
    ]


@pytest.mark.parametrize(
    "change,message",
    [
        ({"table": ""}, "field 'table': missing, empty or not a string"),
        ({"columns": []}, "field 'columns': missing or empty"),
        ({"columns": [{"name": "a", "type": "TEXT); DROP TABLE x; --"}]}, "is not a plain SQL type name"),
        ({"rows": [["Ann", 34]]}, "field 'rows' [0]: not a list of 3 values"),
        ({"rows": [["Ann", 34, {"x": 1}]]}, "field 'rows' [0]: value {'x': 1} is not a string, number or null"),
    ],
)
def test_bad_tables_name_the_field(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TaskDatabase(task(**change))


def test_the_functions_tasks_use_are_allowed(db):
    sql = (
        "SELECT upper(name), lower(city), length(city), abs(-age), round(age / 3.0, 1), coalesce(NULL, age), "
        "substr(name, 1, 2), replace(city, 'o', '0'), instr(city, 'o'), trim(' ' || name), typeof(age), "
        "ifnull(NULL, 1), nullif(age, 34), iif(age > 30, 'old', 'young') FROM people WHERE name LIKE 'A%'"
    )
    assert db.execute(sql).text == (
        "upper(name) | lower(city) | length(city) | abs(-age) | round(age / 3.0, 1) | coalesce(NULL, age) | "
        "substr(name, 1, 2) | replace(city, 'o', '0') | instr(city, 'o') | trim(' ' || name) | typeof(age) | "
        "ifnull(NULL, 1) | nullif(age, 34) | iif(age > 30, 'old', 'young')\n"
        "ANN | rome | 4 | 34 | 11.3 | 34 | An | R0me | 2 | Ann | integer | 1 | NULL | old"
    )
    aggregates = "SELECT count(*), sum(age), avg(age), min(age), max(age), total(age), group_concat(name) FROM people"
    assert db.execute(aggregates).text.split("\n")[1] == "3 | 89 | 29.6666666666667 | 21 | 34 | 89 | Ann,Ben,Cara"
    window = "SELECT name, rank() OVER (ORDER BY age DESC) FROM people ORDER BY name"
    assert db.execute(window).text.split("\n")[1:] == ["Ann | 1", "Ben | 3", "Cara | 1"]


def test_the_date_functions_run_without_the_clock(db):
    sql = (
        "SELECT date('2020-02-28', '+1 day'), time('12:00', '+90 minutes'), datetime(0, 'unixepoch'), "
        "julianday('2020-01-01'), unixepoch('2020-01-01'), strftime('%Y/%m', '2020-01-31', '+1 month'), "
        "char(72, 105)"
    )
    assert db.execute(sql).text.split("\n")[1] == (
        "2020-02-29 | 13:30:00 | 1970-01-01 00:00:00 | 2458849.5 | 1577836800 | 2020/03 | Hi"
    )
    assert db.execute("SELECT count(*) FROM people WHERE date(city) IS NULL").text == "count(*)\n3"


def test_the_statements_tasks_need_run():
    """Every reference statement of generated tasks at the hardest knobs (aggregates, comparisons,
    changes) and the statement shapes of DB-bench files run within the allow-list."""
    hard = Difficulty(2, 6, 1, 20, 2, 1.0, 1.0, 0.5)
    kinds = set()
    for i in range(300):
        entry = generate_task(9, i, hard)
        kinds.add(entry["kind"])
        database = TaskDatabase(entry)
        result = database.execute(entry["query"])
        database.close()
        assert result.ok, (entry["query"], result.text)
    assert kinds == {"select", "insert", "update", "delete"}
    shapes = [
        "SELECT COUNT(DISTINCT city) FROM people WHERE age >= 30 AND city LIKE '%o%'",
        "SELECT city, AVG(age) AS a FROM people GROUP BY city HAVING COUNT(*) >= 1 ORDER BY a DESC LIMIT 2",
        "SELECT name FROM people WHERE age = (SELECT MAX(age) FROM people) ORDER BY name",
        "SELECT CAST(SUM(age) AS REAL) / COUNT(*), CASE WHEN MIN(age) < 30 THEN 'young' ELSE 'old' END FROM people",
        "SELECT name FROM people WHERE city IN ('Rome', 'Lima') AND name NOT LIKE 'C%' ORDER BY age DESC, name",
        "SELECT UPPER(SUBSTR(name, 1, 1)) || LOWER(SUBSTR(name, 2)), ROUND(age * 1.5, 1) FROM people",
        "UPDATE people SET age = age + 1 WHERE city = 'Rome'",
        "INSERT INTO people (name, age, city) VALUES ('Dan', 50, 'Oslo')",
        "DELETE FROM people WHERE age < 25",
    ]
    database = TaskDatabase(task())
    for sql in shapes:
        result = database.execute(sql)
        assert result.ok, (sql, result.text)
    database.close()
