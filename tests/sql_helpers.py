"""Hand-made SQL tasks for the env=sql tests (tests/unit/test_env_sql_*.py)."""

from __future__ import annotations

from mintrl.data.base import PromptItem
from mintrl.env.sql.tasks import reference_action

PEOPLE = [["Ann", 34, "Rome"], ["Ben", 21, "Oslo"], ["Cara", 34, "Lima"]]


def task(kind: str = "select", query: str = "SELECT age FROM people WHERE name = 'Ann'", label: str = "34", **extra):
    """A task entry on the 3-row table ``people(name, age, city)`` (rows :data:`PEOPLE`)."""
    entry = {
        "table": "people",
        "columns": [
            {"name": "name", "type": "TEXT"},
            {"name": "age", "type": "INTEGER"},
            {"name": "city", "type": "TEXT"},
        ],
        "rows": [list(r) for r in PEOPLE],
        "question": "What is the age of Ann?",
        "query": query,
        "label": label if kind == "select" else "",
        "kind": kind,
        "source": "hand",
        "index": 0,
    }
    entry.update(extra)
    entry.setdefault("reference_action", reference_action(entry))
    return entry


def item(entry, index: int = 0) -> PromptItem:
    """A prompt item carrying ``entry`` (no token ids: the environment does not read them)."""
    return PromptItem(
        index, "q", entry.get("reference_action", "") if isinstance(entry, dict) else "", [], entry, "sql"
    )


def sql(statement: str) -> str:
    """An action running ``statement``."""
    return f"Let me look.\n```sql\n{statement}\n```"
