"""Procedural SQL tasks in the style of AgentBench's DB bench: one table, a question, a reference
statement, and the instruction the agent sees.

A task is a JSON-serialisable dict (the prompt item's ``entry``):

- ``table`` (name), ``columns`` (``[{"name", "type"}]``, SQLite type names), ``rows`` (lists of
  values in column order): the table the episode starts from;
- ``question``: the natural-language question; ``kind``: ``select``, ``insert``, ``update`` or
  ``delete``;
- ``query``: the reference statement ("" when a loaded row has none);
- ``label``: for ``select``, the reference query's result on the table as text (one value: ``34``;
  several: comma-separated in row order); ``""`` for a change, which is scored on the resulting
  table instead;
- ``reference_action``: the action text an intervention writes (:func:`reference_action`);
- ``source``, ``index``: where the task came from (``generated`` and the generator index, or the
  file name and row).

Generated tasks use one table (joins: later), names from a fixed list and small integers, and are
deterministic given ``(seed, index)``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

from mintrl.core.checks import check_int, check_range
from mintrl.env.source import check_spans
from mintrl.env.sql.database import TaskDatabase, check_table, quote_ident, render_rows, render_value

KINDS = ("select", "insert", "update", "delete")
PROTOCOL = (
    "To run SQL, write one statement in a ```sql block; its result is shown to you. When you know the answer, "
    "write it inside <answer></answer> tags (for a change to the table, run the statement, then write "
    "<answer>done</answer>)."
)
NAMES = (
    "Ann", "Ben", "Cara", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivan", "Jade", "Kim", "Leo",
    "Mia", "Ned", "Olga", "Pam", "Quin", "Rosa", "Sam", "Tina", "Uma", "Vic", "Wes", "Zoe",
)  # fmt: skip
TABLES = ("people", "players", "staff", "members", "students")
INT_COLUMNS = ("age", "score", "points", "level")
TEXT_VALUES = {
    "city": ("Paris", "Rome", "Oslo", "Lima", "Cairo"),
    "team": ("red", "blue", "green"),
    "color": ("black", "white", "gray", "pink"),
}
COLUMN_POOL = tuple((c, "INTEGER") for c in INT_COLUMNS) + tuple((c, "TEXT") for c in TEXT_VALUES)
INT_LOW, INT_HIGH = 1, 60  # generated integers lie in this range
AGGREGATES = ("COUNT", "SUM", "MAX", "MIN", "AVG")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRIES = 50  # draws before a generator gives up finding a task whose answer is non-empty / that changes the table


@dataclass(frozen=True)
class Difficulty:
    """The generator's knobs (checked on construction; ``field`` prefix names them in errors).

    Attributes:
        min_columns, max_columns: columns per table, the first always ``name`` (2..6).
        min_rows, max_rows: rows per table (1..20).
        max_conditions: conditions per WHERE (0..2): a lookup, update or delete draws 1..max (none
            when 0), an aggregate 0..max; several are joined with AND.
        comparison_prob: probability that a condition on an integer column is ``<`` or ``>``
            rather than ``=`` (probability in [0, 1]).
        aggregate_prob: probability that a SELECT task is an aggregate (COUNT, SUM, MAX, MIN, AVG
            rounded to 2 decimals) rather than a lookup (probability in [0, 1]).
        mutation_fraction: probability that a task is an INSERT, UPDATE or DELETE (one third each)
            rather than a SELECT (probability in [0, 1]).
        field: config prefix of the knobs in error messages.

    Raises:
        ValueError: a knob out of its range, or a minimum above its maximum (field named).
    """

    min_columns: int = 2
    max_columns: int = 3
    min_rows: int = 3
    max_rows: int = 3
    max_conditions: int = 1
    comparison_prob: float = 0.0
    aggregate_prob: float = 0.0
    mutation_fraction: float = 0.0
    field: str = "data.prompts"

    def __post_init__(self):
        f = self.field
        check_spans(self, f, (("columns", 2, 6), ("rows", 1, 20)))
        check_int(f"{f}.max_conditions", self.max_conditions, 0)
        check_range(f"{f}.max_conditions", self.max_conditions, 0, 2)
        for name in ("comparison_prob", "aggregate_prob", "mutation_fraction"):
            check_range(f"{f}.{name}", getattr(self, name), 0.0, 1.0)


def check_entry(entry: Any) -> None:
    """Check that ``entry`` is a task dict the environment can run (see the module docstring).

    Raises:
        ValueError: not a dict, a bad table (:func:`check_table`), ``kind`` not one of
            :data:`KINDS`, ``question``/``query``/``label`` not strings, or a change without a
            reference statement (the message names the field).
    """
    if not isinstance(entry, Mapping):
        raise ValueError(f"the task entry is a {type(entry).__name__}, not a dict")
    check_table(entry)
    if entry.get("kind") not in KINDS:
        raise ValueError(f"field 'kind': {entry.get('kind')!r} is not one of {KINDS}")
    for key in ("question", "query", "label"):
        if not isinstance(entry.get(key), str):
            raise ValueError(f"field {key!r}: missing or not a string")
    if entry["kind"] != "select" and not entry["query"].strip():
        raise ValueError(f"field 'query': a {entry['kind']} task needs its reference statement")


def sql_name(name: str) -> str:
    """An identifier as written in SQL: bare when it is a plain word, else in double quotes."""
    return name if _IDENT.match(name) else quote_ident(name)


def literal(value: Any) -> str:
    """A generated value as an SQL literal (``'Rome'``, ``34``)."""
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else str(value)


def reference_action(entry: Mapping[str, Any]) -> str:
    """The action an intervention writes for a task: the reference statement in a ```sql block
    (for a SELECT too, so that the agent sees the result and then answers), or
    ``<answer>label</answer>`` for a loaded SELECT row without a reference statement."""
    query = (entry.get("query") or "").strip()
    return f"```sql\n{query}\n```" if query else f"<answer>{entry.get('label', '')}</answer>"


def render_instruction(entry: Mapping[str, Any], show_rows: bool = True) -> str:
    """The first user message: the table's name and columns, all its rows (``show_rows``; else
    only how many rows there are, so that the answer needs a query), the question and the action
    protocol (:data:`PROTOCOL`)."""
    columns = entry["columns"]
    schema = ", ".join(f"{sql_name(c['name'])} {c['type']}" for c in columns)
    if show_rows:
        table = render_rows([c["name"] for c in columns], entry["rows"])
    else:
        table = f"({len(entry['rows'])} rows, not shown: query the table to see them)"
    return f"Table {sql_name(entry['table'])} ({schema}):\n{table}\nQuestion: {entry['question']}\n{PROTOCOL}"


EXAMPLE_TASK = {
    "table": "pets",
    "columns": [{"name": "name", "type": "TEXT"}, {"name": "age", "type": "INTEGER"}],
    "rows": [["Rex", 4], ["Bo", 7]],
    "question": "What is the age of Bo?",
}


def example_messages(show_rows: bool = True) -> list[dict[str, str]]:
    """A worked example episode as chat messages (about 150 tokens), put before a task's prompt by
    ``SqlTasks(example=True)``: the instruction of :data:`EXAMPLE_TASK` (its rows shown or not, as
    the tasks'), a query, the environment's observation of its result
    (:func:`~mintrl.env.sql.protocol.result_observation`), the answer."""
    from mintrl.env.sql.protocol import result_observation

    return [
        {"role": "user", "content": render_instruction(EXAMPLE_TASK, show_rows)},
        {"role": "assistant", "content": "```sql\nSELECT age FROM pets WHERE name = 'Bo';\n```"},
        {"role": "user", "content": result_observation("age\n7")},
        {"role": "assistant", "content": "<answer>7</answer>"},
    ]


def run_reference(entry: Mapping[str, Any]) -> TaskDatabase:
    """A fresh database of the task after its reference statement (the caller closes it).

    Raises:
        ValueError: the table is bad or the reference statement fails (SQLite's message).
    """
    db = TaskDatabase(entry, timeout_s=5.0, max_rows=10_000, max_chars=10**9)
    result = db.execute(entry["query"])
    if not result.ok:
        db.close()
        raise ValueError(f"field 'query': the reference statement fails: {result.error}")
    return db


def initial_table(entry: Mapping[str, Any]) -> list[tuple]:
    """The task's table before any statement, as :meth:`TaskDatabase.snapshot` gives it.

    Raises:
        ValueError: the table is bad.
    """
    db = TaskDatabase(entry)
    try:
        return db.snapshot()
    finally:
        db.close()


def expected_table(entry: Mapping[str, Any]) -> list[tuple]:
    """The table after the reference statement (what a change task is scored against), as
    :meth:`TaskDatabase.snapshot` gives it.

    Raises:
        ValueError: the table is bad or the reference statement fails.
    """
    db = run_reference(entry)
    try:
        return db.snapshot()
    finally:
        db.close()


def reference_values(entry: Mapping[str, Any]) -> list[str]:
    """The reference query's result values (each row's values in row order), rendered.

    Raises:
        ValueError: the reference statement fails.
    """
    db = TaskDatabase(entry, timeout_s=5.0, max_rows=10_000, max_chars=10**9)
    try:
        result = db.execute(entry["query"])
    finally:
        db.close()
    if not result.ok:
        raise ValueError(f"field 'query': the reference statement fails: {result.error}")
    return [render_value(v) for row in result.rows for v in row]


def select_label(entry: Mapping[str, Any]) -> str:
    """The reference query's result as text: the values of each row in row order, comma-separated
    (``"34"``, ``"Ann, Ben"``; :func:`reference_values`).

    Raises:
        ValueError: the reference statement fails.
    """
    return ", ".join(reference_values(entry))


def _value(rng: random.Random, column: str) -> Any:
    return rng.randint(INT_LOW, INT_HIGH) if column in INT_COLUMNS else rng.choice(TEXT_VALUES[column])


def _conditions(rng, names, row, count, comparison_prob, exclude=()) -> list[tuple[str, str, Any]]:
    """``count`` conditions ``(column, op, value)`` on distinct columns, all true of ``row``."""
    pool = [c for c in names if c not in exclude]
    out = []
    for column in rng.sample(pool, min(count, len(pool))):
        value = row[names.index(column)]
        if column in INT_COLUMNS and rng.random() < comparison_prob:
            op = rng.choice((">", "<"))
            out.append((column, op, value - rng.randint(1, 5) if op == ">" else value + rng.randint(1, 5)))
        else:
            out.append((column, "=", value))
    return out


def _where(conds) -> tuple[str, str]:
    """The SQL ``WHERE`` clause and its English wording."""
    if not conds:
        return "", ""
    words = {"=": "is", ">": "is greater than", "<": "is less than"}
    sql = " WHERE " + " AND ".join(f"{c} {op} {literal(v)}" for c, op, v in conds)
    text = " and ".join(f"{c} {words[op]} {v}" for c, op, v in conds)
    return sql, text


def _by_name(conds) -> str | None:
    """The name when the only condition is ``name = X``."""
    return conds[0][2] if len(conds) == 1 and conds[0][:2] == ("name", "=") else None


def _select(rng, d: Difficulty, table, names, rows) -> tuple[str, str]:
    anchor = rng.choice(rows)
    numeric = [c for c in names if c in INT_COLUMNS]
    if rng.random() < d.aggregate_prob:
        func = rng.choice(AGGREGATES) if numeric else "COUNT"
        column = rng.choice(numeric) if func != "COUNT" else None
        conds = _conditions(rng, names, anchor, rng.randint(0, d.max_conditions), d.comparison_prob, (column,))
        sql, text = _where(conds)
        scope = f" of the rows where {text}" if conds else " of all rows"
        if func == "COUNT":
            question = f"How many rows are there where {text}?" if conds else "How many rows does the table have?"
            return f"SELECT COUNT(*) FROM {table}{sql}", question
        if func == "AVG":
            return f"SELECT ROUND(AVG({column}), 2) FROM {table}{sql}", (
                f"What is the average {column}{scope}, rounded to 2 decimals?"
            )
        word = {"SUM": "total", "MAX": "largest", "MIN": "smallest"}[func]
        return f"SELECT {func}({column}) FROM {table}{sql}", f"What is the {word} {column}{scope}?"
    target = rng.choice(names)
    count = rng.randint(min(1, d.max_conditions), d.max_conditions)
    conds = _conditions(rng, names, anchor, count, d.comparison_prob, (target,))
    sql, text = _where(conds)
    statement = f"SELECT {target} FROM {table}{sql}"
    if not conds:
        return statement, f"List the {target} of every row."
    if _by_name(conds) is not None:
        return statement, f"What is the {target} of {_by_name(conds)}?"
    matches = sum(all(_holds(row[names.index(c)], op, v) for c, op, v in conds) for row in rows)
    if matches == 1:
        return statement, f"What is the {target} of the row where {text}?"
    return statement, f"What is the {target} of each row where {text}?"


def _holds(x, op, v) -> bool:
    return x == v if op == "=" else (x > v if op == ">" else x < v)


def _mutation(rng, d: Difficulty, kind, table, names, rows) -> tuple[str, str]:
    if kind == "insert":
        new = [rng.choice([n for n in NAMES if n not in {r[0] for r in rows}])]
        new += [_value(rng, c) for c in names[1:]]
        cols = ", ".join(names)
        spoken = ", ".join(f"{c} {v}" for c, v in zip(names, new))
        return f"INSERT INTO {table} ({cols}) VALUES ({', '.join(literal(v) for v in new)})", (
            f"Add a row with {spoken}."
        )
    anchor = rng.choice(rows)
    count = rng.randint(min(1, d.max_conditions), d.max_conditions)
    if kind == "update":
        column = rng.choice(names[1:])
        value = anchor[names.index(column)]
        while value == anchor[names.index(column)]:  # the anchor row changes, so the table does
            value = _value(rng, column)
        conds = _conditions(rng, names, anchor, count, d.comparison_prob, (column,))
        sql, text = _where(conds)
        statement = f"UPDATE {table} SET {column} = {literal(value)}{sql}"
        if _by_name(conds) is not None:
            return statement, f"Set the {column} of {_by_name(conds)} to {value}."
        return statement, f"Set the {column} to {value} for the rows where {text}." if conds else (
            f"Set the {column} of every row to {value}."
        )
    conds = _conditions(rng, names, anchor, count, d.comparison_prob)
    sql, text = _where(conds)
    statement = f"DELETE FROM {table}{sql}"
    if _by_name(conds) is not None:
        return statement, f"Delete the row of {_by_name(conds)}."
    return statement, f"Delete the rows where {text}." if conds else "Delete every row."


def generate_task(seed: int, index: int, difficulty: Difficulty | None = None) -> dict[str, Any]:
    """Task ``index`` of the generator seeded with ``seed`` (see the module docstring).

    The same ``(seed, index, difficulty)`` always gives the same task. A SELECT's answer is never
    empty (conditions are drawn true of one row) and a change always changes the table.

    Raises:
        RuntimeError: no valid task in :data:`_TRIES` draws (cannot happen with the shipped pools).
    """
    d = difficulty or Difficulty()
    rng = random.Random(f"mintrl-sql:{seed}:{index}")
    for _ in range(_TRIES):
        columns = [("name", "TEXT")] + rng.sample(COLUMN_POOL, rng.randint(d.min_columns, d.max_columns) - 1)
        names = [c for c, _ in columns]
        rows = [
            [n] + [_value(rng, c) for c in names[1:]] for n in rng.sample(NAMES, rng.randint(d.min_rows, d.max_rows))
        ]
        table = rng.choice(TABLES)
        kind = rng.choice(KINDS[1:]) if rng.random() < d.mutation_fraction else "select"
        if kind == "select":
            query, question = _select(rng, d, table, names, rows)
        else:
            query, question = _mutation(rng, d, kind, table, names, rows)
        entry = {
            "table": table,
            "columns": [{"name": c, "type": t} for c, t in columns],
            "rows": rows,
            "question": question,
            "query": query,
            "label": "",
            "kind": kind,
            "source": "generated",
            "index": index,
        }
        if kind == "select":
            entry["label"] = select_label(entry)
            if not entry["label"] or entry["label"] == "NULL":
                continue
        else:
            if expected_table(entry) == initial_table(entry):
                continue
        entry["reference_action"] = reference_action(entry)
        return entry
    raise RuntimeError(f"SQL task generator: no valid task for seed {seed} index {index} in {_TRIES} draws")
