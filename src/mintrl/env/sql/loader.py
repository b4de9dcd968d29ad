"""Tasks from a local AgentBench DB-bench file (``data/dbbench/*.jsonl`` of THUDM/AgentBench).

A row holds ``description`` (the question), ``table`` (``{"table_name", "table_info": {"columns":
[{"name", "type"}], "rows": [[...]]}}``; a list of exactly one such table is accepted: joins are
not supported yet), ``type`` (``["INSERT"]``, ``["UPDATE"]``, ``["DELETE"]``, anything else is a
SELECT: ``["other"]``, ``["counting"]``, ...), ``label`` (the answer values of a SELECT) and an
optional ``sql`` (``{"query": ...}``, the reference statement). Other fields are ignored.

Differences from AgentBench, which runs MySQL with every column ``TEXT``:

- columns keep their declared types (so ``Total > 5`` compares numbers); ``STRING`` becomes
  ``TEXT`` (SQLite would give it numeric affinity);
- a change (INSERT, UPDATE, DELETE) is scored on the table its ``sql.query`` makes from the initial
  table (AgentBench's ``answer_md5`` is a MySQL checksum, not reproducible here), so such a row
  needs ``sql.query``, and it must run on SQLite;
- a SELECT row keeps its ``sql.query`` (the intervention's reference action) only when the query
  runs on SQLite and its result values match the label's values (AgentBench's rule,
  :func:`~mintrl.env.sql.protocol.file_values_match`); otherwise the reference action is the label
  in ``<answer>`` tags;
- the label's text (``entry["label"]``: what the reference action and the judge's correction
  write) is its values joined by ``", "``, or a list literal (``['Washington, D.C.', 'Paris']``)
  when the joined text would not match the values (a value holding a comma, a bracket, ...).

:func:`load_dbbench` returns, with the entries, every row it changed (a dropped reference query)
and every invalid row it dropped (with ``RowFilter(skip=True)``), by row index with the reason,
and logs both.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from mintrl.data.base import InvalidRow, RowFilter, read_json_rows
from mintrl.env.sql.database import render_value
from mintrl.env.sql.protocol import answers_match, file_values_match
from mintrl.env.sql.tasks import check_entry, expected_table, reference_action, reference_values

MUTATIONS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
_FIELDS = {
    "'table'": "'table.table_name'",
    "'columns'": "'table.table_info.columns'",
    "'rows'": "'table.table_info.rows'",
}
_TYPES = {"STRING": "TEXT"}


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
    table = row.get("table")
    if isinstance(table, list):
        if len(table) != 1:
            raise ValueError(f"field 'table': {len(table)} tables (only one table per task is supported, joins later)")
        table = table[0]
    if not isinstance(table, dict) or not isinstance(table.get("table_info"), dict):
        raise ValueError("field 'table': missing, or without 'table_info'")
    info = table["table_info"]
    columns = info.get("columns")
    if isinstance(columns, list):
        columns = [
            dict(c, type=_TYPES.get(str(c.get("type", "")).upper(), c.get("type"))) if isinstance(c, dict) else c
            for c in columns
        ]
    return {"table": table.get("table_name"), "columns": columns, "rows": info.get("rows")}


def dbbench_entry(row: dict[str, Any], i: int, name: str) -> dict[str, Any]:
    """One DB-bench row as a task entry (:mod:`mintrl.env.sql.tasks`).

    Args:
        row: the row as read from the file; ``i``: its index; ``name``: the file name (for messages).

    Raises:
        InvalidRow: a missing or empty ``description``, a bad ``table`` (the message names the
            field: ``table.table_name``, ``table.table_info.columns``, ``table.table_info.rows``),
            a ``type`` that is not a list of one string, a SELECT without a ``label`` list, or a
            change without a ``sql.query`` that runs on SQLite.
    """
    where = f"{name} row {i}"
    try:
        question = row.get("description")
        if not isinstance(question, str) or not question.strip():
            raise ValueError("field 'description': missing, empty or not a string")
        types = row.get("type")
        types = [types] if isinstance(types, str) else types
        if not isinstance(types, list) or len(types) != 1 or not isinstance(types[0], str):
            raise ValueError(f"field 'type': {row.get('type')!r} is not a list of one string")
        kind = MUTATIONS.get(types[0].strip().upper(), "select")
        sql = row.get("sql")
        query = sql.get("query") if isinstance(sql, dict) else None
        if query is not None and not isinstance(query, str):
            raise ValueError("field 'sql.query': not a string")
        entry = _table(row) | {"question": question.strip(), "query": (query or "").strip(), "kind": kind}
        entry |= {"label": "", "source": name, "index": i}
        if kind == "select":
            label = row.get("label")
            if not isinstance(label, list):
                raise ValueError("field 'label': missing or not a list of answer values")
            entry["label_values"] = [render_value(v) for v in label]
            entry["label"] = label_text(entry["label_values"])
        try:
            check_entry(entry)
        except ValueError as err:
            message = str(err)
            for old, new in _FIELDS.items():
                message = message.replace(f"field {old}", f"field {new}", 1)
            raise ValueError(message) from None
        if kind == "select" and entry["query"]:
            try:
                values = reference_values(entry)
                if not file_values_match(values, entry["label_values"]):
                    entry["changed"] = (
                        f"reference query dropped: its result {values} differs from the label {entry['label_values']}"
                    )
            except ValueError as err:
                entry["changed"] = f"reference query dropped: it fails on SQLite ({err})"
            if "changed" in entry:
                entry["query"] = ""  # the reference action is then the label itself
        elif kind != "select":
            try:
                expected_table(entry)
            except ValueError as err:
                raise ValueError(str(err).replace("field 'query'", "field 'sql.query'")) from None
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
