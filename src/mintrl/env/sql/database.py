"""One private, contained in-memory SQLite database per episode (stdlib :mod:`sqlite3`).

The agent's SQL is untrusted. :class:`TaskDatabase` holds one table built from a task entry and
runs one statement at a time inside these limits:

- **one statement**: ``sqlite3`` refuses a second statement after the first ``;``;
- **time**: a progress handler (called every 1,000 SQLite VM steps) stops a statement that runs
  longer than ``timeout_s`` seconds (an endless recursive CTE, a huge cross join);
- **result size**: at most ``max_rows`` rows are fetched (a statement that would return more is
  not run to its end) and the rendered text is cut at ``max_chars`` characters;
- **authorizer** (an allow-list): writes of the task's table only, reads of it and of CTEs (no
  other table exists: the database holds the task's table alone and creating or attaching one is
  refused), ``SELECT``, recursive CTEs and the functions of :data:`ALLOWED_FUNCTIONS` (the date and
  time functions of :data:`DATE_FUNCTIONS` without the clock: ``'now'``, no time value and the
  ``localtime``/``utc`` modifiers are refused); everything else is refused: ``ATTACH``/``DETACH``
  (also ``VACUUM``, which attaches), ``PRAGMA`` (also the ``pragma_*`` table functions), reads
  of ``sqlite_master``/``sqlite_schema`` (the instruction already shows the table), any other
  table, ``CREATE``/``DROP``/``ALTER`` of anything, ``ANALYZE``, transactions and savepoints
  (each statement commits itself), and every function not allowed (``fts3_tokenizer``, which leaks a
  memory address; ``load_extension``; introspection; the non-deterministic ones (``random``, the
  clock), so that replaying an episode's actions gives the same observations; ``printf``/``format``,
  whose huge width runs in one VM step, past the time limit);
- **size**: ``SQLITE_LIMIT_LENGTH`` caps one value at :data:`MAX_VALUE_BYTES` bytes, ``PRAGMA
  max_page_count`` the database at :data:`MAX_PAGES` pages of 4 KiB (a statement that would grow
  it further fails with "database or disk is full" and is undone), no database can be attached
  (``SQLITE_LIMIT_ATTACHED`` = 0). Sorts of very many rows spill to SQLite's own unnamed temporary
  files, bounded by the time limit.

A task entry may ask for MySQL's text comparison (``"collation": "mysql"``, the AgentBench DB-bench
rows of :mod:`mintrl.env.sql.loader`): every column then compares with the collation
:data:`MYSQL_COLLATION` (:func:`mysql_order_key`): values first by their leading numbers (as MySQL
compares a TEXT column with a number: ``'47,818' > 146445`` is false), then case- and
accent-insensitively, as MySQL's ``utf8mb4_0900_ai_ci`` compares text. It runs in Python; past a
statement's time limit it answers "equal" at once, so that a sort of very many rows reaches the next
time check quickly. A value Python cannot read as UTF-8 stops the statement with an error.

A statement stopped at the time limit depends on the machine's speed; all else is deterministic.
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

MAX_VALUE_BYTES = 10_000  # bytes: the longest string or blob a statement may build
MAX_PAGES = 256  # pages of 4 KiB: the largest database (1 MiB)
PROGRESS_STEPS = 1_000  # SQLite VM steps between two checks of the time limit

# The only functions a statement may call (the authorizer sees each call by name): deterministic,
# bounded in one VM step, and enough for the tasks' questions (text, numbers, NULL handling, dates,
# aggregates, window functions). Everything else is refused: memory addresses (fts3_tokenizer),
# extensions (load_extension), introspection (sqlite_version, sqlite_compileoption_*), JSON, side
# channels (last_insert_rowid, changes), non-deterministic functions (random, randomblob; the date
# functions' clock, see DATE_FUNCTIONS: replaying an episode's actions must repeat its observations)
# and the one-step-unbounded ones (printf/format with a huge width, zeroblob). char() takes at most
# SQLITE_LIMIT_FUNCTION_ARG (127) codes.
ALLOWED_FUNCTIONS = frozenset(
    {
        # text
        "length", "octet_length", "lower", "upper", "substr", "substring", "instr", "replace", "trim",
        "ltrim", "rtrim", "like", "glob", "hex", "quote", "unicode", "char", "typeof",
        # numbers
        "abs", "round", "sign", "ceil", "ceiling", "floor", "trunc", "mod", "pow", "power", "sqrt", "exp",
        "ln", "log", "log2", "log10", "pi",
        # NULL handling and conditions
        "coalesce", "ifnull", "nullif", "iif", "likely", "unlikely", "likelihood",
        # dates and times (DATE_FUNCTIONS)
        "date", "time", "datetime", "julianday", "unixepoch", "strftime",
        # aggregates (max and min are also the scalar functions)
        "count", "sum", "total", "avg", "min", "max", "group_concat", "string_agg",
        # window functions
        "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
        "first_value", "last_value", "nth_value",
    }
)  # fmt: skip
# SQLite's date and time functions, name -> position of the time value (the arguments after it are
# modifiers). Each runs as SQLite's own function on a private connection, refused when it could read
# the machine's clock or time zone: no time value, or a time value or modifier holding 'now',
# 'local' or 'utc' (see _reads_clock).
DATE_FUNCTIONS = {"date": 0, "time": 0, "datetime": 0, "julianday": 0, "unixepoch": 0, "strftime": 1}
CLOCK = "the clock and time zone are refused (date functions need a time value; no 'now', 'localtime' or 'utc')"
NOT_UTF8 = "the statement was stopped: a value it compares or returns is not valid UTF-8 text"
SCHEMA_CHANGE = "changing the schema (CREATE, DROP, ALTER, ANALYZE) is refused"
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})
_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]{0,30}(\(\s*\d+\s*(,\s*\d+\s*)?\))?$")
MYSQL_COLLATION = "mysql"  # the collation name of a "collation": "mysql" entry's columns
COLLATIONS = (MYSQL_COLLATION,)
_DECIMAL = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_LEADING_NUMBER = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass
class QueryResult:
    """The outcome of one statement.

    Attributes:
        ok: True when the statement ran to its end (or to the row cap).
        text: what the agent sees: the rendered rows, the change count, or ``"Error: ..."``.
        rows: the fetched rows (at most ``max_rows``; empty on error or for a change).
        error: the error message (None when ``ok``).
        timed_out: True when the time limit stopped the statement.
        truncated: True when more than ``max_rows`` rows (or ``max_chars`` characters) were cut.
    """

    ok: bool
    text: str
    rows: list[tuple] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    truncated: bool = False


def quote_ident(name: str) -> str:
    """``name`` as an SQL identifier in double quotes (inner quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def render_value(value: Any) -> str:
    """One value as the agent and the labels read it: ``NULL``, integers as digits, floats without a
    trailing ``.0`` when integral (``12.0`` -> ``12``; else up to 15 significant digits), text as is,
    blobs as ``x'..'`` hex."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else format(value, ".15g")
    if isinstance(value, bytes):
        return "x'" + value.hex() + "'"
    return str(value)


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A header line ``a | b`` then one line per row; ``(no rows)`` when there are none."""
    lines = [" | ".join(columns)]
    lines += [" | ".join(render_value(v) for v in row) for row in rows]
    return "\n".join(lines) if rows else " | ".join(columns) + "\n(no rows)"


def mysql_text_key(text: str) -> str:
    """``text`` as MySQL's ``utf8mb4_0900_ai_ci`` compares it, approximately: case-folded, compatibility
    decomposed (NFKD) and without combining marks (``Côte`` and ``cote`` are one key; trailing
    spaces count, as in that NO PAD collation)."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in folded if not unicodedata.combining(c))


def mysql_number(text: str) -> float:
    """The number MySQL reads ``text`` as when it compares it with a number: its leading decimal number
    (spaces before it skipped; ``47,818`` is 47, ``1e3 m`` is 1000), 0 when it has none."""
    match = _LEADING_NUMBER.match(text)
    number = float(match.group(0)) if match else 0.0
    return 0.0 if math.isnan(number) else number


def mysql_order_key(text: str) -> tuple:
    """The order of :data:`MYSQL_COLLATION`: by :func:`mysql_number` first (so that a TEXT column compares
    with a number as MySQL compares them: ``Population > 146445`` is false for ``47,818``); of equal
    numbers a plain decimal number (``5``, ``05``, ``5.0``: all equal) first, then other text by
    :func:`mysql_text_key` (``Paris`` equals ``paris``). A total order, unlike MySQL's own mix of
    string and number comparisons; two texts that hold no number compare as MySQL's collation."""
    if _DECIMAL.match(text):
        return (float(text), 0, "")
    return (mysql_number(text), 1, mysql_text_key(text))


def check_table(entry: Mapping[str, Any]) -> None:
    """Check the table fields of a task entry (``table``, ``columns``, ``rows``, ``collation``).

    Raises:
        ValueError: a missing or empty table name, no columns, a column without a name or with a
            type that is not a plain SQL type name (``TEXT``, ``INTEGER``, ``VARCHAR(20)``), two
            columns of one name, rows that are not lists of the column count, a value that is
            not a string, number or null, or a ``collation`` other than absent, None or
            ``"mysql"`` (the message names the field).
    """
    if entry.get("collation") not in (None, *COLLATIONS):
        raise ValueError(f"field 'collation': {entry.get('collation')!r} is not one of {COLLATIONS} or null")
    table = entry.get("table")
    if not isinstance(table, str) or not table.strip():
        raise ValueError("field 'table': missing, empty or not a string")
    columns = entry.get("columns")
    if not isinstance(columns, list) or not columns:
        raise ValueError("field 'columns': missing or empty")
    names = []
    for k, col in enumerate(columns):
        if not isinstance(col, Mapping) or not isinstance(col.get("name"), str) or not col["name"].strip():
            raise ValueError(f"field 'columns' [{k}]: needs a non-empty 'name'")
        if not isinstance(col.get("type"), str) or not _TYPE.match(col["type"]):
            raise ValueError(f"field 'columns' [{k}]: type {col.get('type')!r} is not a plain SQL type name")
        names.append(col["name"].lower())
    if len(set(names)) != len(names):
        raise ValueError(f"field 'columns': duplicate column names {names}")
    rows = entry.get("rows")
    if not isinstance(rows, list):
        raise ValueError("field 'rows': missing or not a list")
    for k, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(columns):
            raise ValueError(f"field 'rows' [{k}]: not a list of {len(columns)} values")
        for value in row:
            if value is not None and not isinstance(value, (str, int, float)):
                raise ValueError(f"field 'rows' [{k}]: value {value!r} is not a string, number or null")


class TaskDatabase:
    """The task's table in a private in-memory database, behind the limits of the module docstring.

    Args:
        entry: a task entry with ``table`` (name), ``columns`` (``[{"name", "type"}]``, SQLite
            type names) and ``rows`` (lists of values in column order).
        timeout_s: time limit of one statement (seconds, > 0).
        max_rows: most rows fetched and shown (rows, >= 1).
        max_chars: most characters of the rendered result (characters, >= 1).

    Raises:
        ValueError: a bad table in ``entry`` (see :func:`check_table`) or a row SQLite refuses.
    """

    def __init__(self, entry: Mapping[str, Any], timeout_s: float = 1.0, max_rows: int = 20, max_chars: int = 500):
        check_table(entry)
        self.table = entry["table"]
        self.timeout_s, self.max_rows, self.max_chars = timeout_s, max_rows, max_chars
        self._denied: str | None = None
        self._deadline = math.inf  # the running statement's time limit (time.monotonic() seconds)
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        try:
            self._build(entry)
        except Exception:
            self.conn.close()
            raise
        self._dates = sqlite3.connect(":memory:", check_same_thread=False)  # runs the date functions
        self._dates.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        for name, at in DATE_FUNCTIONS.items():
            self.conn.create_function(name, -1, self._date_function(name, at), deterministic=True)
        self.conn.set_authorizer(self._authorize)

    def _date_function(self, name: str, at: int):
        """SQLite's date function ``name`` (time value at argument ``at``) without the clock."""
        sql = f"SELECT {name}({{}})"

        def call(*args):
            if len(args) <= at or any(_reads_clock(a) for a in args[at:]):
                self._deny(CLOCK)
                raise ValueError(CLOCK)
            return self._dates.execute(sql.format(", ".join("?" * len(args))), args).fetchone()[0]

        return call

    def _build(self, entry: Mapping[str, Any]) -> None:
        conn = self.conn
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.execute(f"PRAGMA max_page_count = {MAX_PAGES}")
        collate = ""
        if entry.get("collation") == MYSQL_COLLATION:
            conn.create_collation(MYSQL_COLLATION, self._mysql_compare)
            collate = f" COLLATE {MYSQL_COLLATION}"
        cols = ", ".join(f"{quote_ident(c['name'])} {c['type']}{collate}" for c in entry["columns"])
        conn.execute(f"CREATE TABLE {quote_ident(self.table)} ({cols})")
        marks = ", ".join("?" * len(entry["columns"]))
        try:
            conn.executemany(f"INSERT INTO {quote_ident(self.table)} VALUES ({marks})", entry["rows"])
        except sqlite3.Error as err:
            raise ValueError(f"field 'rows': SQLite refused a row ({err})") from None

    def _mysql_compare(self, a: str, b: str) -> int:
        """:data:`MYSQL_COLLATION` (:func:`mysql_order_key`); 0 at once past the time limit."""
        if time.monotonic() > self._deadline:
            return 0
        x, y = mysql_order_key(a), mysql_order_key(b)
        return (x > y) - (x < y)

    def _authorize(self, action: int, arg1, arg2, db_name, trigger) -> int:
        """The allow-list of the module docstring; remembers why it refused (for the message)."""
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() not in ALLOWED_FUNCTIONS:
                return self._deny(f"the function {arg2}() is refused")
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_READ, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE):
            name = (arg1 or "").lower()
            if name == self.table.lower() and db_name in (None, "main"):
                return sqlite3.SQLITE_OK
            if action == sqlite3.SQLITE_READ and not name.startswith("sqlite_"):
                return sqlite3.SQLITE_OK  # a CTE: no other table exists here (CREATE and ATTACH are refused)
            if name in _SCHEMA_TABLES:
                if action == sqlite3.SQLITE_READ:
                    return self._deny(f"{arg1} is refused (the table is shown in the instruction)")
                return self._deny(SCHEMA_CHANGE)
            return self._deny(f"only the table {self.table} may be used, not {arg1}")
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return self._deny("ATTACH, DETACH and VACUUM are refused")
        if action == sqlite3.SQLITE_PRAGMA:
            return self._deny("PRAGMA is refused")
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            return self._deny("transactions are refused (each statement commits itself)")
        return self._deny(SCHEMA_CHANGE)

    def _deny(self, reason: str) -> int:
        if self._denied is None:
            self._denied = reason
        return sqlite3.SQLITE_DENY

    def execute(self, sql: str) -> QueryResult:
        """Run one statement within the limits (never raises on the statement's text).

        Returns:
            A :class:`QueryResult`: for rows, the header and up to ``max_rows`` rows (a last line
            says when more were cut); for a change, ``OK, n rows changed.``; on failure
            ``Error: ...`` naming the refused operation, the time limit or SQLite's message.
        """
        self._denied = None
        deadline = self._deadline = time.monotonic() + self.timeout_s
        self.conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
        timed_out = False
        try:
            cursor = self.conn.execute(sql)
            try:
                if cursor.description is None:
                    text = f"OK, {max(cursor.rowcount, 0)} rows changed."
                    return QueryResult(True, text)
                rows = cursor.fetchmany(self.max_rows + 1)
                columns = [d[0] for d in cursor.description]
            finally:
                cursor.close()
        except (sqlite3.ProgrammingError, sqlite3.Warning) as err:
            message = "only one statement may run at a time" if "one statement" in str(err) else str(err)
            return QueryResult(False, f"Error: {message}.", error=message)
        except (sqlite3.Error, ValueError, OverflowError, MemoryError) as err:
            timed_out = str(err) == "interrupted" and time.monotonic() > deadline
            if timed_out:
                message = f"the statement ran longer than {self.timeout_s:g} s and was stopped"
            elif self._denied is not None:
                message = f"not authorized: {self._denied}"
            elif isinstance(err, UnicodeDecodeError) or str(err) == "interrupted":
                message = NOT_UTF8  # Python could not read a value it was to compare or return
            else:
                message = str(err)
            return QueryResult(False, f"Error: {message}.", error=message, timed_out=timed_out)
        finally:
            self.conn.set_progress_handler(None, 0)
            self._deadline = math.inf
        truncated = len(rows) > self.max_rows
        rows = rows[: self.max_rows]
        text = render_rows(columns, rows)
        if truncated:
            text += f"\n... (only the first {self.max_rows} rows are shown)"
        if len(text) > self.max_chars:
            text, truncated = text[: self.max_chars] + f"\n... (result cut at {self.max_chars} characters)", True
        return QueryResult(True, text, rows=rows, truncated=truncated)

    def snapshot(self) -> list[tuple]:
        """The table's rows as a sorted list of tuples (an order-insensitive picture of the table)."""
        rows = self.conn.execute(f"SELECT * FROM {quote_ident(self.table)}").fetchall()
        return sorted(rows, key=lambda row: tuple(sort_key(v) for v in row))

    def close(self) -> None:
        """Free the database."""
        self.conn.close()
        self._dates.close()


def _reads_clock(value: Any) -> bool:
    """Whether a date function's time value or modifier may read the clock or time zone: text (or a
    blob, read as text) holding ``now``, ``local`` or ``utc`` anywhere, in any case (SQLite reads
    text only up to a NUL byte; such text is otherwise no valid time value or modifier)."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return isinstance(value, str) and any(word in value.lower() for word in ("now", "local", "utc"))


def sort_key(value: Any) -> tuple:
    """An order over mixed SQLite values: NULL < numbers < text < blobs."""
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    return (3, bytes(value))


def result_multiset(rows: Sequence[Sequence[Any]]) -> list[tuple]:
    """Rows sorted (see :func:`sort_key`): two results are equal as multisets when these are equal."""
    return sorted((tuple(r) for r in rows), key=lambda row: tuple(sort_key(v) for v in row))
