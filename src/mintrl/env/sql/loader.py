"""Tasks from a local AgentBench DB-bench file (``data/dbbench/*.jsonl`` of THUDM/AgentBench), built and
scored as AgentBench builds and scores them (``src/server/tasks/dbbench``: MySQL 8).

A row holds ``description`` (the question; a non-empty ``evidence`` is added after it, as AgentBench
shows it), ``table`` (``{"table_name", "table_info": {"columns": [{"name", "type"}], "rows": [[...]]}}``;
a list of exactly one such table is accepted: joins are not supported yet), ``type`` (``["INSERT"]``,
``["UPDATE"]``, ``["DELETE"]``, anything else is a SELECT: ``["other"]``, ``["counting"]``, ...),
``label`` (a SELECT's answer values; a change's reference statement as ``label[0]``), for a change
``answer_md5`` (AgentBench's hash of the expected table, :func:`~mintrl.env.sql.mysql.table_hash`) and
an optional ``sql`` (``{"query": ...}``, a reference statement). Other fields are ignored.

- The table is AgentBench's: every column ``TEXT`` (the declared types are ignored, as AgentBench
  ignores them), every value ``str(value)`` (``4.0`` is the text ``4.0``), text compared as MySQL
  compares it (case- and accent-insensitively; a number with a TEXT number by value:
  :data:`~mintrl.env.sql.database.MYSQL_COLLATION`). A table MySQL refuses (an empty, over-long or
  space-ended name, two columns MySQL takes for one, no rows) is an error in AgentBench, where no
  agent scores, and the row is refused naming MySQL's error. A ``user_sqlite`` row (its database
  is a SQLite file of AgentBench's data folder) is refused.
- Reference statements are MySQL; they run here translated to SQLite's syntax
  (:func:`~mintrl.env.sql.mysql.to_sqlite`: backslash escapes, double-quoted strings, ``#``
  comments, names that start with a digit).
- A change (INSERT, UPDATE, DELETE) is scored on the table the agent leaves: 1.0 when it equals,
  as a multiset of rows of text values, the table the reference statement makes from the initial
  one. With ``answer_md5``, the reference is ``sql.query`` or ``label[0]``, whichever makes a table
  of that hash (AgentBench scores by the hash alone: a row where neither does is refused, since
  no agent doing what the reference does scores there); without it, ``sql.query`` (what AgentBench
  runs then) or else ``label[0]``.
- A SELECT row keeps its ``sql.query`` (the intervention's reference action) only when the query
  runs and its result values match the label's values by AgentBench's rule
  (:func:`~mintrl.env.sql.protocol.file_values_match`; a result without rows is the empty answer,
  which AgentBench reads as ``0``, as it reads ``none``); otherwise the reference action is the
  label in ``<answer>`` tags. The label's text (``entry["label"]``: what the reference action and
  the judge's correction write) is its values joined by ``", "``, or a list literal
  (``['Washington, D.C.', 'Paris']``) when the joined text would not match the values.

:func:`load_dbbench` returns, with the entries, every row it changed (a dropped reference query)
and every invalid row it dropped (with ``RowFilter(skip=True)``), by row index with the reason,
and logs both. :mod:`mintrl.env.sql.coverage` reports what a file loads and whether each reference
scores 1.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from mintrl.data.base import InvalidRow, RowFilter, read_json_rows
from mintrl.env.sql.database import MYSQL_COLLATION, render_value
from mintrl.env.sql.mysql import answer_md5, table_hash, table_problem, to_sqlite
from mintrl.env.sql.protocol import answers_match, file_values_match
from mintrl.env.sql.tasks import check_entry, expected_table, reference_action, reference_values

MUTATIONS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
_STATEMENT = re.compile(r"\s*(?:INSERT|UPDATE|DELETE|REPLACE|WITH)\b", re.I)  # label[0] as a statement
_FIELDS = {
    "'table'": "'table.table_name'",
    "'columns'": "'table.table_info.columns'",
    "'rows'": "'table.table_info.rows'",
}


log = logging.getLogger(__name__)


class LoadedTasks(list):
    """The task entries of a file (a list, in file order) and what the loader did to its rows.

    Attributes:
        changed: row index -> why the row's task was changed (``reference query dropped: ...``);
            the entry also holds it as ``entry["changed"]``.
        dropped: row index -> the message of the invalid row that was skipped.
    """

    def __init__(self, entries=(), changed: dict[int, str] | None = None, dropped: dict[int, str] | None = None):
        super().__init__(entries)
        self.changed: dict[int, str] = dict(changed or {})
        self.dropped: dict[int, str] = dict(dropped or {})


def label_text(values: list[str]) -> str:
    """The label as an answer text that matches ``values`` (rendered label values): the values
    joined by ``", "``, or, when that text would not match them, their list literal."""
    joined = ", ".join(values)
    return joined if answers_match(joined, joined, values) else repr(list(values))


def _table(row: dict[str, Any]) -> dict[str, Any]:
    """The row's table as AgentBench makes it: its name, every column ``TEXT``, every value of a list
    row ``str(value)``, compared as MySQL compares text."""
    table = row.get("table")
    if isinstance(table, list):
        if len(table) != 1:
            raise ValueError(f"field 'table': {len(table)} tables (only one table per task is supported, joins later)")
        table = table[0]
    if not isinstance(table, dict) or not isinstance(table.get("table_info"), dict):
        raise ValueError("field 'table': missing, or without 'table_info'")
    info = table["table_info"]
    columns, rows = info.get("columns"), info.get("rows")
    if isinstance(columns, list):
        columns = [dict(c, type="TEXT") if isinstance(c, Mapping) else c for c in columns]
    if isinstance(rows, list):
        rows = [[str(v) for v in r] if isinstance(r, list) else r for r in rows]
    return {"table": table.get("table_name"), "columns": columns, "rows": rows, "collation": MYSQL_COLLATION}


def _mysql_problem(entry: dict[str, Any]) -> str | None:
    """Why AgentBench's MySQL refuses the entry's table (:func:`~mintrl.env.sql.mysql.table_problem`), or
    None (also when the fields are malformed: :func:`check_entry` names those)."""
    columns, rows, table = entry["columns"], entry["rows"], entry["table"]
    if not isinstance(columns, list) or not columns or not all(isinstance(c, Mapping) for c in columns):
        return None
    names = [c.get("name") for c in columns]
    if not all(isinstance(n, str) for n in names) or not isinstance(table, str) or not table.strip():
        return None
    return table_problem(table, names, rows) if isinstance(rows, list) else None


def _check(entry: dict[str, Any]) -> None:
    """:func:`check_entry`, its fields named as the file names them (``table.table_info.rows``, ...)."""
    try:
        check_entry(entry)
    except ValueError as err:
        message = str(err)
        for old, new in _FIELDS.items():
            message = message.replace(f"field {old}", f"field {new}", 1)
        raise ValueError(message) from None


def _names(entry: dict[str, Any]) -> list[str]:
    return [entry["table"]] + [c["name"] for c in entry["columns"]]


def change_reference(row: dict[str, Any], entry: dict[str, Any]) -> str:
    """The reference statement of a change row, in SQLite's syntax (see the module docstring).

    Raises:
        ValueError: no statement (``label[0]`` or ``sql.query``), one that fails here (the field
            named), or an ``answer_md5`` that no candidate's table has.
    """
    digest = answer_md5(row.get("answer_md5"))
    candidates = []
    query = (row.get("sql") or {}).get("query") if isinstance(row.get("sql"), dict) else None
    if isinstance(query, str) and query.strip():
        candidates.append(("sql.query", query))
    label = row.get("label")
    if isinstance(label, list) and label and isinstance(label[0], str) and _STATEMENT.match(label[0]):
        candidates.append(("label[0]", label[0]))
    if not candidates:
        raise ValueError(f"field 'label': a {entry['kind']} row needs its reference statement (label[0] or sql.query)")
    if digest is None:
        candidates = candidates[:1]
    made, failures = [], []
    for field, statement in candidates:
        try:
            translated, table = _reference_table(entry, field, statement)
        except ValueError as err:
            failures.append(str(err))
            continue
        if digest is None or table_hash(table) == digest:
            return translated
        made.append(table_hash(table) if len(candidates) == 1 else f"{field}: {table_hash(table)}")
    if not made:
        raise ValueError("; ".join(failures))
    fields = " or ".join(field for field, _ in candidates)
    raise ValueError(
        f"field 'answer_md5': {digest} is not the table the reference statement ({fields}) makes "
        f"({'; '.join(made + failures)})"
    )


def _reference_table(entry: dict[str, Any], field: str, statement: str) -> tuple[str, list[tuple]]:
    """A change's candidate reference statement in SQLite's syntax and the table it makes.

    Raises:
        ValueError: the statement cannot be read or fails (``field`` named).
    """
    try:
        translated = to_sqlite(statement, _names(entry))
    except ValueError as err:
        raise ValueError(f"field {field!r}: the reference statement cannot be read ({err})") from None
    try:
        return translated, expected_table(entry | {"query": translated})
    except ValueError as err:
        raise ValueError(str(err).replace("field 'query'", f"field {field!r}")) from None


def _select_reference(entry: dict[str, Any], query: str) -> None:
    """Keep a SELECT row's reference query, translated, when it runs and its result matches the label;
    else drop it (``entry["query"]`` empty) and say why in ``entry["changed"]``."""
    try:
        entry["query"] = to_sqlite(query, _names(entry))
        values = reference_values(entry)
        if not file_values_match(values or [""], entry["label_values"]):
            entry["changed"] = (
                f"reference query dropped: its result {values} differs from the label {entry['label_values']}"
            )
    except ValueError as err:
        entry["changed"] = f"reference query dropped: it fails on SQLite ({err})"
    if "changed" in entry:
        entry["query"] = ""  # the reference action is then the label itself


def _question(row: dict[str, Any]) -> str:
    question = row.get("description")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("field 'description': missing, empty or not a string")
    evidence = row.get("evidence")
    if isinstance(evidence, str) and evidence.strip():
        return f"{question.strip()}\nEvidence about the question: {evidence.strip()}"
    return question.strip()


def dbbench_entry(row: dict[str, Any], i: int, name: str) -> dict[str, Any]:
    """One DB-bench row as a task entry (:mod:`mintrl.env.sql.tasks`), as the module docstring says.

    Args:
        row: the row as read from the file; ``i``: its index; ``name``: the file name (for messages).

    Raises:
        InvalidRow: a ``user_sqlite`` row, a missing or empty ``description``, a bad ``table`` (the
            message names the field: ``table.table_name``, ``table.table_info.columns``,
            ``table.table_info.rows``; ``table.table_info`` for a table MySQL refuses), a ``type``
            that is not a list of one string, a SELECT without a ``label`` list, or a change
            without a reference statement that runs here and makes the ``answer_md5`` table.
    """
    where = f"{name} row {i}"
    try:
        if row.get("user_sqlite"):
            create = row.get("create") if isinstance(row.get("create"), dict) else {}
            raise ValueError(
                f"field 'user_sqlite': the row's database is AgentBench's SQLite file {create.get('database')}/"
                f"{create.get('init')} (its data folder), not a table in the row"
            )
        question = _question(row)
        types = row.get("type")
        types = [types] if isinstance(types, str) else types
        if not isinstance(types, list) or len(types) != 1 or not isinstance(types[0], str):
            raise ValueError(f"field 'type': {row.get('type')!r} is not a list of one string")
        kind = MUTATIONS.get(types[0].strip().upper(), "select")
        sql = row.get("sql")
        query = sql.get("query") if isinstance(sql, dict) else None
        if query is not None and not isinstance(query, str):
            raise ValueError("field 'sql.query': not a string")
        entry = _table(row) | {"question": question, "query": "", "kind": kind}
        entry |= {"label": "", "source": name, "index": i}
        problem = _mysql_problem(entry)
        if problem:
            raise ValueError(f"field 'table.table_info': AgentBench's MySQL table {problem}")
        if kind == "select":
            label = row.get("label")
            if not isinstance(label, list):
                raise ValueError("field 'label': missing or not a list of answer values")
            entry["label_values"] = [render_value(v) for v in label]
            entry["label"] = label_text(entry["label_values"])
            _check(entry)
            if query and query.strip():
                _select_reference(entry, query.strip())
        else:
            _check(entry | {"query": "-"})  # the table first; the statement is checked by running it
            entry["query"] = change_reference(row, entry)
    except ValueError as err:
        raise InvalidRow(f"{where}: {err}") from None
    entry["reference_action"] = reference_action(entry)
    return entry


def load_dbbench(path: str, rows: RowFilter | None = None) -> LoadedTasks:
    """The task entries of a local DB-bench ``.jsonl`` / ``.json`` file, in file order, with the
    rows changed and dropped (:class:`LoadedTasks`; each kind logged as one warning).

    Args:
        rows: what to do with invalid rows (default: raise :class:`InvalidRow`).

    Raises:
        InvalidRow: a bad row (see :func:`dbbench_entry`) unless ``rows`` skips it.
        FileNotFoundError: no such file.
    """
    rows = rows or RowFilter()
    name = os.path.basename(path)
    file_rows = read_json_rows(path)
    tasks = LoadedTasks()
    for i, row in enumerate(file_rows):
        entry = rows(lambda i=i, row=row: dbbench_entry(row, i, name))
        if entry is None:
            tasks.dropped[i] = rows.skipped[-1]
            continue
        tasks.append(entry)
        if entry.get("changed"):
            tasks.changed[i] = entry["changed"]
    for what, found in (("changed", tasks.changed), ("dropped", tasks.dropped)):
        if found:
            reasons = sorted({m.split(":")[0] for m in found.values()}) if what == "changed" else list(found.values())
            log.warning(
                "%s: %d of %d rows %s (rows %s): %s",
                name,
                len(found),
                len(file_rows),
                what,
                ", ".join(map(str, found)),
                "; ".join(reasons[:3]),
            )
    return tasks
