"""``env=sql``: an agent answers questions about a table, or changes it, by running SQL.

Each episode owns a private in-memory SQLite database built from its task entry
(:mod:`mintrl.env.sql.tasks`), behind the limits of :mod:`mintrl.env.sql.database`. An action
(:mod:`mintrl.env.sql.protocol`) is

- a ```sql block: the statement runs and its result (or ``Error: ...``) is the next observation;
  a failed statement is a valid action of kind ``query_error`` (the agent learns from the error),
  the episode goes on;
- an ``<answer>`` tag: the episode ends with its reward: a SELECT task 1.0 when the answer holds
  the label's values (any order, numbers by value) else 0.0; a change task (INSERT, UPDATE,
  DELETE) 1.0 when the table now equals the table the reference statement makes from the initial
  one (rows compared as a multiset), else 0.0: the answer text is ignored;
- anything else: ``invalid``; the observation states the protocol, the episode goes on.

An episode that reaches ``max_turns`` actions ends with :meth:`SqlEnvironment.score_final`'s
reward. A task entry that cannot be built fails at its first step (reward NaN, ``error``), as does
any unexpected exception inside one episode: the others go on, the run never stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mintrl.core.checks import check_int, check_range
from mintrl.data.base import PromptItem
from mintrl.env.base import Counters, SerialEnvironment
from mintrl.env.sql.database import TaskDatabase
from mintrl.env.sql.protocol import answers_match, parse_action, result_observation
from mintrl.env.sql.tasks import check_entry, expected_table

COUNTERS = ("invalid_actions", "queries", "query_errors", "timeouts", "errors", "seconds")


@dataclass
class _Episode:
    entry: Any
    db: TaskDatabase | None = None
    failure: str | None = None  # why the episode could not start (raised at its first step)
    done: bool = False
    turns: int = 0
    expected: list[tuple] | None = None  # the reference table of a change task (built once)


class SqlEnvironment(SerialEnvironment):
    """Many SQL episodes at once (see the module docstring). Thread-safe for disjoint episodes:
    each episode has its own connection (``check_same_thread=False``), the counters a lock.

    Args:
        query_timeout_s: time limit of one statement (seconds, > 0).
        max_result_rows: most rows of a result shown to the agent (rows, >= 1).
        max_result_chars: most characters of a result shown to the agent (characters, >= 1).
        max_action_chars: longer actions are invalid (characters, >= 1).
        max_turns: actions after which an episode ends and is scored by :meth:`final_reward`
            (actions, >= 1), or None for no limit of its own (the rollout's turn limit applies).

    Counters (:meth:`metrics`): ``env/invalid_actions`` (unusable actions), ``env/queries``
    (statements run), ``env/query_errors`` (statements that failed, timeouts included),
    ``env/timeouts`` (statements stopped at the time limit), ``env/errors`` (episodes ended by an
    environment error) and ``env/seconds`` (wall time in reset, step and score_final, seconds).

    Raises:
        ValueError: a field out of its range (named ``env.<field>``).
    """

    name = "SQL"
    thread_safe = True
    action_kinds = ("query", "query_error", "answer", "invalid", "error")

    def __init__(
        self,
        query_timeout_s: float = 1.0,
        max_result_rows: int = 20,
        max_result_chars: int = 500,
        max_action_chars: int = 1000,
        max_turns: int | None = None,
    ):
        check_range("env.query_timeout_s", query_timeout_s, 0.0, low_open=True)
        check_int("env.max_result_rows", max_result_rows)
        check_int("env.max_result_chars", max_result_chars)
        check_int("env.max_action_chars", max_action_chars)
        check_int("env.max_turns", max_turns, none_ok=True)
        self.query_timeout_s, self.max_result_rows = query_timeout_s, max_result_rows
        self.max_result_chars, self.max_action_chars, self.max_turns = max_result_chars, max_action_chars, max_turns
        self.episodes: list[_Episode] = []
        self.counters = Counters(COUNTERS)

    # -- episodes ---------------------------------------------------------------------------------

    def _open(self, item: PromptItem) -> _Episode:
        """One episode's state from ``item.entry`` (its database built); a bad entry is remembered,
        not raised (it fails at the first step)."""
        entry = item.entry
        try:
            check_entry(entry)
            db = TaskDatabase(entry, self.query_timeout_s, self.max_result_rows, self.max_result_chars)
        except Exception as err:  # noqa: BLE001 - an environment error never stops the run
            return _Episode(entry, failure=f"bad task entry: {err}")
        return _Episode(entry, db)

    def free(self, ep: _Episode) -> None:
        """Mark the episode done and close its database."""
        ep.done = True
        if ep.db is not None:
            ep.db.close()
            ep.db = None

    def _table_reward(self, ep: _Episode) -> float:
        """1.0 when the episode's table equals the reference table (rows as a multiset), else 0.0."""
        if ep.expected is None:
            ep.expected = expected_table(ep.entry)
        return 1.0 if ep.db.snapshot() == ep.expected else 0.0

    def final_reward(self, ep: _Episode) -> float:
        """The reward of an episode that ends without an answer: a change task is scored on its
        current table (1.0 or 0.0), a SELECT task gets 0.0."""
        return self._table_reward(ep) if ep.entry["kind"] != "select" else 0.0

    def act(self, ep: _Episode, text: str) -> tuple[str, float, bool, str, bool]:
        """One action: (observation, reward, done, kind, invalid)."""
        if ep.failure is not None:
            raise RuntimeError(ep.failure)
        ep.turns += 1
        action = parse_action(text, self.max_action_chars)
        if action.kind == "answer":
            kind = ep.entry["kind"]
            reward = (
                self._table_reward(ep)
                if kind != "select"
                else float(answers_match(action.text, ep.entry["label"], ep.entry.get("label_values")))
            )
            return "", reward, True, "answer", False
        if action.kind == "invalid":
            self.counters.add("invalid_actions", 1)
            observation, kind = action.text, "invalid"
        else:
            result = ep.db.execute(action.text)
            self.counters.add("queries", 1)
            self.counters.add("query_errors", not result.ok)
            self.counters.add("timeouts", result.timed_out)
            observation = result_observation(result.text) if result.ok else result.text
            kind = "query" if result.ok else "query_error"
        return self.turn_outcome(ep, observation, kind)
