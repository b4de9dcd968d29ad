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
- an ``<answer>`` of a SELECT task (final turn only): compared with the label, a wrong answer is
  revised with ``<answer>label</answer>``; an answer to a change task is kept: the judge does not
  see the episode's table, the environment scores it;
- an invalid final turn: revised at its first step with the reference action.

The statement runs on the initial table, not the episode's current one (the judge does not see
the episode's state): an exploratory query is revised too. A request without an entry, or one the
judge cannot evaluate (no reference statement, a failure), is kept (and a failure counted in
``judge/sql_errors``); it never raises.
"""

from __future__ import annotations

import logging
from itertools import accumulate
from typing import Sequence

from mintrl.env.sql.database import TaskDatabase, result_multiset
from mintrl.env.sql.protocol import answers_match, find_query, parse_action
from mintrl.env.sql.tasks import check_entry, reference_action
from mintrl.judge.base import REVISE, Judge, ReviewRequest, Verdict
from mintrl.training.checks import check_int, check_range

log = logging.getLogger(__name__)


def step_at(steps: Sequence[str], offset: int) -> int:
    """Index of the step holding character ``offset`` of ``"".join(steps)`` (0 when before it, the
    last step when past it)."""
    for index, end in enumerate(accumulate(len(s) for s in steps)):
        if offset < end:
            return index
    return max(len(steps) - 1, 0)


class SqlJudge(Judge):
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

    def __init__(
        self, context=None, query_timeout_s: float = 1.0, max_action_chars: int = 1000, max_result_rows: int = 1000
    ):
        check_range("judge.query_timeout_s", query_timeout_s, 0.0, low_open=True)
        check_int("judge.max_action_chars", max_action_chars)
        check_int("judge.max_result_rows", max_result_rows)
        self.query_timeout_s, self.max_action_chars, self.max_result_rows = (
            query_timeout_s,
            max_action_chars,
            max_result_rows,
        )
        self.errors = 0

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

    def review_one(self, request: ReviewRequest) -> Verdict:
        """Verdict for one request (see module docstring); never raises."""
        entry = request.entry
        if entry is None:
            return Verdict()
        try:
            return self._review(request, entry)
        except Exception as err:  # noqa: BLE001 - a judge never raises on model output
            self.errors += 1
            log.warning("SQL judge failed: %s: %s", type(err).__name__, err)
            return Verdict()

    def _review(self, request: ReviewRequest, entry: dict) -> Verdict:
        check_entry(entry)
        prefix = request.prefix_text or ""
        text = prefix + "".join(request.steps)
        if not request.final:
            block = find_query(text, allow_open=False)
            if block is None or block.end <= len(prefix):
                return Verdict()
            action = parse_action(text, self.max_action_chars, allow_open=False)
            if action.kind != "query":
                return Verdict()  # an answer or over-long text in an unfinished turn waits for its end
        else:
            action = parse_action(text, self.max_action_chars)
        correction = entry.get("reference_action") or reference_action(entry)
        if action.kind == "invalid":
            return Verdict(kind=REVISE, step=0, correction=correction)
        if action.end <= len(prefix):
            return Verdict()  # judged with the accepted prefix
        step = step_at(request.steps, max(action.start - len(prefix), 0))
        if action.kind == "answer":
            if entry["kind"] != "select" or answers_match(action.text, entry["label"]):
                return Verdict()
            return Verdict(kind=REVISE, step=step, correction=f"<answer>{entry['label']}</answer>")
        if not entry["query"].strip() or self._same(entry, action.text):
            return Verdict()
        return Verdict(kind=REVISE, step=step, correction=correction)

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One verdict per request (never raises)."""
        return [self.review_one(r) for r in requests]

    def metrics(self) -> dict[str, float]:
        """``judge/sql_errors``: requests the judge could not evaluate (kept), since the last call."""
        out, self.errors = {"judge/sql_errors": float(self.errors)}, 0
        return out
