"""``judge=sql``: a rule judge for the SQL environment (``env=sql``) that executes the action.

It reads the whole action so far (the accepted ``prefix_text`` of the turn and the new steps) as
the environment would (:func:`mintrl.env.sql.protocol.parse_action`) and uses the request's
privileged ``entry`` (the task: table, reference statement, label):

- a ```sql block: the agent's statement and the reference statement run on two fresh copies of
  the task's initial table; for a SELECT task the results are compared as multisets of rows, for
  a change task the resulting tables; a difference, or a failing statement, is revised at the step
  where the block starts, with the reference action (``entry["reference_action"]``: the
  reference statement in a ```sql block) as the correction. A block wholly in the accepted prefix
  was judged before (Keep). An unfinished turn (``final`` False) is judged only once it holds a
  complete (closed) block;
- an ``<answer>`` of a SELECT task (final turn only): compared with the label as the environment
  compares it (:func:`mintrl.env.sql.protocol.answers_match`), a wrong answer is
  revised with ``<answer>label</answer>``; an answer to a change task is kept: the judge does not
  see the episode's table, the environment scores it;
- an invalid final turn: revised at its first step with the reference action.

The statement runs on the initial table, not the episode's current one (the judge does not see
the episode's state): an exploratory query is revised too. A request without an entry, or one the
judge cannot evaluate (no reference statement, a failure), is kept (and a failure counted in
``judge/sql_errors``); it never raises.
"""

from __future__ import annotations

from typing import Any

from mintrl.core.checks import check_int, check_range
from mintrl.env.sql.database import TaskDatabase, result_multiset
from mintrl.env.sql.protocol import answers_match, find_query, parse_action
from mintrl.env.sql.tasks import check_entry, reference_action
from mintrl.judge.action import ActionJudge, step_at


class SqlJudge(ActionJudge):
    """Execution-based judge of SQL actions (see module docstring).

    Args:
        context: unused (judges receive the run's ModelContext).
        query_timeout_s: time limit of each statement it runs (seconds, > 0).
        max_action_chars: longer actions are invalid, as in the environment (characters, >= 1).
        max_result_rows: most rows compared per result (rows, >= 1); results that differ only past
            this many rows count as equal.

    Raises:
        ValueError: a field out of its range (named ``judge.<field>``).
    """

    name = "sql"
    action_kind = "query"

    def __init__(
        self, context=None, query_timeout_s: float = 1.0, max_action_chars: int = 1000, max_result_rows: int = 1000
    ):
        check_range("judge.query_timeout_s", query_timeout_s, 0.0, low_open=True)
        super().__init__(max_action_chars)
        check_int("judge.max_result_rows", max_result_rows)
        self.query_timeout_s, self.max_result_rows = query_timeout_s, max_result_rows

    def _run(self, entry: dict, sql: str) -> tuple[bool, list[tuple], list[tuple]]:
        """(ok, result rows as a multiset, table afterwards) of ``sql`` on a fresh copy of the task."""
        db = TaskDatabase(entry, self.query_timeout_s, self.max_result_rows, 10**9)
        try:
            result = db.execute(sql)
            return result.ok, result_multiset(result.rows), db.snapshot()
        finally:
            db.close()

    def _same(self, entry: dict, sql: str) -> bool:
        """True when ``sql`` does what the reference statement does (see module docstring)."""
        ok, rows, table = self._run(entry, sql)
        if not ok:
            return False
        _, ref_rows, ref_table = self._run(entry, entry["query"])
        return rows == ref_rows if entry["kind"] == "select" else table == ref_table

    def check_entry(self, entry: dict[str, Any]) -> None:
        check_entry(entry)

    def find_block(self, text: str, allow_open: bool):
        return find_query(text, allow_open=allow_open)

    def parse(self, text: str, allow_open: bool = True):
        return parse_action(text, self.max_action_chars, allow_open=allow_open)

    def reference(self, entry: dict[str, Any]) -> str:
        return reference_action(entry)

    def answer_ok(self, entry: dict[str, Any], answer: str) -> bool:
        """An answer to a change task is kept (the environment scores the table); a SELECT's must match."""
        return entry["kind"] != "select" or answers_match(answer, entry["label"], entry.get("label_values"))

    def action_ok(self, entry: dict[str, Any], action: str) -> bool:
        """Kept when the task has no reference statement, or the statement does what it does."""
        return not entry["query"].strip() or self._same(entry, action)


__all__ = ["SqlJudge", "step_at"]
