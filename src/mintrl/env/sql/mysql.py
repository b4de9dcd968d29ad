"""AgentBench's DB bench runs MySQL 8; what its files need here: their statements in SQLite's syntax, the
hash by which AgentBench compares a changed table (``answer_md5``), and the tables MySQL refuses.

AgentBench (``src/server/tasks/dbbench``) creates each table as ``CREATE TABLE `name` (`col` TEXT, ...)``
and fills it with ``str(value)`` of every value; a change row is correct when
``md5(group_concat(rowhash ORDER BY rowhash))`` of the agent's table, with ``rowhash`` the first 5 hex
digits of ``md5(concat_ws(',', col, ...))`` of each row, equals the row's ``answer_md5``
(:func:`table_hash`).
"""

from __future__ import annotations

import ast
import hashlib
import re
from typing import Any, Iterable, Sequence

from mintrl.env.sql.database import mysql_text_key, quote_ident

GROUP_CONCAT_MAX_LEN = 1024  # bytes: MySQL's default group_concat_max_len, where the row hashes are cut
MAX_NAME_CHARS = 64  # characters: MySQL's longest table or column name
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}
_WORD = re.compile(r"[0-9A-Za-z_$\x80-\uffff]+")
_HEX = re.compile(r"^[0-9a-f]{32}$")


def _quoted(sql: str, start: int) -> tuple[str, int]:
    """The text of the quoted token at ``start`` (its quote ``'``, ``"`` or a backtick) as MySQL reads it
    (a doubled quote is one; in a string a backslash escapes, ``\\%`` and ``\\_`` keep theirs), and the
    index after its closing quote.

    Raises:
        ValueError: no closing quote.
    """
    quote, i, out = sql[start], start + 1, []
    while i < len(sql):
        char = sql[i]
        if char == "\\" and quote != "`" and i + 1 < len(sql):
            out.append(_ESCAPES.get(sql[i + 1], sql[i + 1]))
            i += 2
        elif char == quote and sql[i + 1 : i + 2] == quote:
            out.append(quote)
            i += 2
        elif char == quote:
            return "".join(out), i + 1
        else:
            out.append(char)
            i += 1
    raise ValueError(f"unterminated {quote} quote at character {start}")


def _bare(text: str, names: set[str]) -> str:
    """Unquoted MySQL text: a word that names the table or a column and starts with a digit (MySQL
    reads ``1952_results`` as a name, SQLite as a number) in double quotes, all else as is."""

    def name(match: re.Match) -> str:
        word = match.group(0)
        return quote_ident(word) if word[0].isdigit() and not word.isdigit() and word.lower() in names else word

    return _WORD.sub(name, text)


def to_sqlite(statement: str, names: Iterable[str]) -> str:
    """A MySQL statement of AgentBench's files in SQLite's syntax, the smallest change that keeps its meaning:

    - a string (``'...'``, or ``"..."`` that does not name the table or a column: MySQL's double quotes
      delimit strings) in single quotes, MySQL's backslash escapes read (``\\'``, ``\\n``, ...);
    - a backtick name (and a double-quoted one that names the table or a column) in double quotes;
    - a ``#`` comment removed (SQLite has ``--`` and ``/* */`` comments only);
    - an unquoted name of the table or a column that starts with a digit in double quotes;
    - everything else as written (SQLite also reads ``[name]``), the result stripped of outer spaces.

    Args:
        names: the table's and the columns' names (compared case-insensitively).

    Raises:
        ValueError: a quote that is never closed.
    """
    known = {n.lower() for n in names}
    out, i, start = [], 0, 0
    while i < len(statement):
        char = statement[i]
        if char in "'\"`[#":
            out.append(_bare(statement[start:i], known))
            if char == "[":
                end = statement.find("]", i)
                end = len(statement) if end < 0 else end + 1
                out.append(statement[i:end])
            elif char == "#":
                end = statement.find("\n", i)
                end = len(statement) if end < 0 else end
            else:
                text, end = _quoted(statement, i)
                is_name = char == "`" or (char == '"' and text.lower() in known)
                out.append(quote_ident(text) if is_name else "'" + text.replace("'", "''") + "'")
            i = start = end
        elif statement.startswith("--", i) or statement.startswith("/*", i):
            end = statement.find("\n" if char == "-" else "*/", i)
            i = len(statement) if end < 0 else end + (0 if char == "-" else 2)
        else:
            i += 1
    out.append(_bare(statement[start:], known))
    return "".join(out).strip()


def table_hash(rows: Iterable[Sequence[Any]]) -> str:
    """AgentBench's hash of a table (MySQL's ``md5(group_concat(...))``, see the module docstring), from
    its rows' values as MySQL's TEXT holds them (None for NULL, which ``concat_ws`` skips): the hex
    digest, or ``"None"`` for a table without rows (MySQL's NULL)."""
    digests = []
    for row in rows:
        text = ",".join(str(v) for v in row if v is not None)
        digests.append(hashlib.md5(text.encode("utf-8")).hexdigest()[:5])
    if not digests:
        return "None"
    joined = ",".join(sorted(digests)).encode("utf-8")[:GROUP_CONCAT_MAX_LEN]
    return hashlib.md5(joined).hexdigest()


def answer_md5(value: Any) -> str | None:
    """The hex digest of a row's ``answer_md5`` (MySQL's result text ``[('<hex>',)]`` as AgentBench stores
    it, or the bare digest), or None when the field is absent or empty (AgentBench then computes the
    expected table from ``sql.query``).

    Raises:
        ValueError: a value that is neither.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = value.strip() if isinstance(value, str) else ""
    if _HEX.match(text.lower()):
        return text.lower()
    try:
        parsed = ast.literal_eval(text)
        digest = parsed[0][0] if isinstance(parsed, list) else None
    except (ValueError, TypeError, SyntaxError, IndexError, KeyError, MemoryError, RecursionError):
        digest = None
    if isinstance(digest, str) and _HEX.match(digest.lower()):
        return digest.lower()
    raise ValueError(f"field 'answer_md5': {str(value)[:80]!r} is not an md5 digest or MySQL's [('<digest>',)]")


def table_problem(table: str, columns: Sequence[str], rows: Sequence[Any]) -> str | None:
    """Why MySQL refuses AgentBench's ``CREATE TABLE`` or ``INSERT`` of this table (MySQL's error named),
    or None: an empty name, one that ends with a space or is longer than :data:`MAX_NAME_CHARS`, one
    holding a backtick (AgentBench writes names in backticks unescaped), two columns whose names MySQL
    takes for one (case and accents ignored), or no rows (``INSERT ... VALUES`` with nothing after)."""
    for what, name in [("the table", table)] + [(f"column {k}", c) for k, c in enumerate(columns, 1)]:
        error = 1103 if what == "the table" else 1166
        kind = "table" if what == "the table" else "column"
        if not name:
            return f"cannot be created: {what} has an empty name (MySQL error {error}, Incorrect {kind} name '')"
        if name != name.rstrip(" "):
            return (
                f"cannot be created: {what}'s name {name!r} ends with a space (MySQL error {error}, "
                f"Incorrect {kind} name)"
            )
        if len(name) > MAX_NAME_CHARS:
            return f"cannot be created: {what}'s name is longer than {MAX_NAME_CHARS} characters (MySQL error 1059)"
        if "`" in name:
            return (
                f"cannot be created: {what}'s name {name!r} holds a backtick (a syntax error in AgentBench's "
                "CREATE TABLE)"
            )
    seen: dict[str, int] = {}
    for k, name in enumerate(columns, 1):
        key = mysql_text_key(name)
        if key in seen:
            first = seen[key]
            return (
                f"cannot be created: columns {first} ({columns[first - 1]!r}) and {k} ({name!r}) have the same name "
                f"(MySQL error 1060, Duplicate column name; MySQL's column names ignore case and accents)"
            )
        seen[key] = k
    if not rows:
        return "cannot be filled: no rows (its INSERT ... VALUES with no row is a MySQL syntax error)"
    return None
