"""What the environments share (mintrl.env.base.EpisodicEnvironment): ``reset``, the turn limit
(``turn_outcome``), ``score_final`` and ``close``, on a hand environment with values by hand, the
action protocol (mintrl.env.protocol.TaggedProtocol), and ``score_final`` of each real environment on
hand-made episodes (no code runs: the sandbox, a shell
and a query are never started by these calls, except the one UPDATE of the SQL case)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from shell_helpers import FILES, make, sandbox_processes, task
from shell_helpers import item as shell_item
from sql_helpers import item as sql_item
from sql_helpers import sql
from sql_helpers import task as sql_task

from mintrl.data.base import PromptItem
from mintrl.env.base import Counters, EpisodicEnvironment, StepResult
from mintrl.env.protocol import Action, TaggedProtocol
from mintrl.env.python_tool import protocol as python_protocol
from mintrl.env.python_tool.environment import PythonToolEnvironment
from mintrl.env.shell import protocol as shell_protocol
from mintrl.env.sql import protocol as sql_protocol
from mintrl.env.sql.environment import SqlEnvironment


@dataclass
class _Episode:
    entry: dict
    failure: str | None = None
    done: bool = False
    turns: int = 0


class _Hand(EpisodicEnvironment):
    """Episodes whose final reward is the entry's ``final`` (raising when it is None); an entry with
    ``bad`` fails; frees are recorded."""

    name = "hand"

    def __init__(self, max_turns=None):
        self.max_turns, self.episodes, self.counters = max_turns, [], Counters(("errors", "seconds"))
        self.freed: list[dict] = []

    def _open(self, item):
        return _Episode(item.entry, failure="bad entry" if item.entry.get("bad") else None)

    def free(self, episode):
        self.freed.append(episode.entry)

    def final_reward(self, episode):
        if episode.entry["final"] is None:
            raise ArithmeticError("no final state")
        return episode.entry["final"]

    def step(self, episodes, actions):
        return StepResult([], [], [], [], [], [])


def _item(entry, index=0) -> PromptItem:
    return PromptItem(index, "q", "r", [1], entry, "hand")


def test_reset_closes_the_previous_episodes_and_counts_its_time():
    env = _Hand()
    assert env.reset([_item({"final": 0.5}), _item({"final": 1.0}, 1)]) == ["", ""]
    assert env.freed == []
    first = list(env.episodes)
    assert env.reset([_item({"final": 0.0})]) == [""]
    assert env.freed == [e.entry for e in first] and len(env.episodes) == 1
    assert env.metrics()["env/seconds"] > 0 and env.metrics()["env/seconds"] == 0.0  # taken, then reset


def test_an_action_that_does_not_answer_goes_on_until_the_turn_limit():
    env = _Hand(max_turns=2)
    env.reset([_item({"final": 0.25})])
    ep = env.episodes[0]
    ep.turns = 1
    assert env.turn_outcome(ep, "seen", "query") == ("seen", 0.0, False, "query", False)
    assert env.turn_outcome(ep, "no protocol", "invalid") == ("no protocol", 0.0, False, "invalid", True)
    ep.turns = 2  # the action used the last turn: no observation, the final reward, done
    assert env.turn_outcome(ep, "seen", "query") == ("", 0.25, True, "query", False)
    assert env.turn_outcome(ep, "no protocol", "invalid") == ("", 0.25, True, "invalid", True)
    assert _Hand().turn_outcome(ep, "seen", "run") == ("seen", 0.0, False, "run", False)  # no limit of its own


def test_score_final_scores_frees_and_counts_failures():
    env = _Hand()
    env.reset([_item({"final": 0.5}), _item({"final": 1.0, "bad": True}, 1), _item({"final": None}, 2)])
    env.metrics()
    rewards = env.score_final([2, 0, 1])
    assert rewards[1] == 0.5 and math.isnan(rewards[0]) and math.isnan(rewards[2])
    assert [e.done for e in env.episodes] == [True, True, True]
    assert [e["final"] for e in env.freed] == [None, 0.5, 1.0]  # in call order
    metrics = env.metrics()
    assert metrics["env/errors"] == 2.0 and metrics["env/seconds"] > 0
    with pytest.raises(ValueError, match="episode 0 has finished"):
        env.score_final([0])
    env.close()
    assert env.episodes == [] and len(env.freed) == 6  # close frees every episode again


# -- each environment ------------------------------------------------------------------------------

PY_ENTRY = {
    "question": "Calculate 4 + 3.",
    "answer": "7",
    "metadata": {"source_dataset": "basic_arithmetic", "source_index": 0, "expression": "4 + 3"},
}
PY_BAD = {"question": "?", "metadata": {"source_dataset": "no_such_task"}}


def test_python_tool_score_final_is_zero_or_nan_for_a_bad_entry():
    env = PythonToolEnvironment(timeout_s=2.0, workers=1, uid_base=63100)
    env.reset([_item(PY_ENTRY), _item(PY_BAD, 1)])
    rewards = env.score_final([0, 1])
    assert rewards[0] == 0.0 and math.isnan(rewards[1])
    assert [e.done for e in env.episodes] == [True, True] and env.metrics()["env/errors"] == 1.0


def test_shell_score_final_is_zero_or_nan_for_a_bad_entry(tmp_path):
    env = make(str(tmp_path))
    bad = task("q", "true", "x", check="no_such_check")
    env.reset([shell_item(FILES), shell_item(bad, 1)])
    rewards = env.score_final([0, 1])
    assert rewards[0] == 0.0 and math.isnan(rewards[1])
    assert [e.done for e in env.episodes] == [True, True] and env.metrics()["env/errors"] == 1.0
    assert env.live_shells() == 0 and sandbox_processes() == []


def test_sql_score_final_scores_a_change_task_on_its_table():
    update = sql_task("update", "UPDATE people SET age = 35 WHERE name = 'Ann'")
    delete = sql_task("delete", "DELETE FROM people WHERE age = 34")
    env = SqlEnvironment()
    env.reset([sql_item(update), sql_item(delete, 1), sql_item(sql_task(), 2), sql_item(None, 3)])
    env.step([0], [sql("UPDATE people SET age = 35 WHERE name = 'Ann'")])
    rewards = env.score_final([0, 1, 2, 3])
    assert rewards[:3] == [1.0, 0.0, 0.0] and math.isnan(rewards[3])  # done / not done / a SELECT / a bad entry
    assert all(e.done and e.db is None for e in env.episodes) and env.metrics()["env/errors"] == 1.0


# -- the action protocol ---------------------------------------------------------------------------


def test_a_tagged_protocol_reads_an_answer_then_a_block_then_says_what_was_wrong():
    def find(text, allow_open):
        start = text.find("RUN ")
        return (
            None
            if start < 0 or (not allow_open and not text.endswith(";"))
            else Action("run", text[start + 4 :].rstrip(";"), start, len(text))
        )

    protocol = TaggedProtocol("x", find, "no action", "empty")
    assert protocol.parse("RUN ls; <answer> 4 </answer> <answer>5</answer>") == Action("answer", "5", 29, 47)
    assert protocol.parse("RUN ls;") == Action("run", "ls", 0, 7)
    assert protocol.parse("RUN ls", allow_open=False) == Action("invalid", "no action")
    assert protocol.parse("RUN ;") == Action("invalid", "empty")
    assert protocol.parse("RUN " + "y" * 7, max_chars=10) == Action("invalid", protocol.too_long(11, 10))
    assert protocol.too_long(11, 10) == (
        "Your message is too long (11 characters; at most 10 are read). Write one short ```x block or an <answer></answer> tag."
    )


@pytest.mark.parametrize("module,block", [(python_protocol, "python"), (shell_protocol, "bash"), (sql_protocol, "sql")])
def test_each_environment_names_its_block(module, block):
    note = f"Your message is too long (1001 characters; at most 1000 are read). Write one short ```{block} block or an <answer></answer> tag."
    assert module.too_long(1001, 1000) == note and module.parse_action("z" * 1001) == Action("invalid", note)
    assert (
        module.PROTOCOL.block == block and block in module.PROTOCOL.no_action and block in module.PROTOCOL.empty_block
    )
