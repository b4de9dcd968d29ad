"""env=sql: episodes, rewards of each statement kind, invalid actions, errors, replay, metrics."""

from __future__ import annotations

import math
import time

import pytest
from sql_helpers import item, sql, task

from mintrl.env.base import replay
from mintrl.env.sql.environment import SqlEnvironment
from mintrl.env.sql.protocol import NO_ACTION, result_observation, too_long

INSERT = task("insert", "INSERT INTO people VALUES ('Dan', 50, 'Rome')")
UPDATE = task("update", "UPDATE people SET age = 35 WHERE name = 'Ann'")
DELETE = task("delete", "DELETE FROM people WHERE age = 34")


def run(entry, actions, **kwargs):
    """Rewards, done flags and kinds of one episode acting ``actions`` in turn."""
    env = SqlEnvironment(**kwargs)
    assert env.reset([item(entry)]) == [""]
    out = [env.step([0], [a]) for a in actions]
    return env, out


@pytest.mark.parametrize(
    "entry,actions,reward",
    [
        (task(), ["<answer>34</answer>"], 1.0),
        (task(), ["<answer> 34.0 </answer>"], 1.0),
        (task(), ["<answer>21</answer>"], 0.0),
        (task(query="SELECT name FROM people WHERE age = 34", label="Ann, Cara"), ["<answer>cara, ann</answer>"], 1.0),
        (task(query="SELECT name FROM people WHERE age = 34", label="Ann, Cara"), ["<answer>Ann</answer>"], 0.0),
        (
            INSERT,
            [sql("INSERT INTO people (name, age, city) VALUES ('Dan', 50, 'Rome')"), "<answer>done</answer>"],
            1.0,
        ),
        (INSERT, [sql("INSERT INTO people VALUES ('Dan', 51, 'Rome')"), "<answer>done</answer>"], 0.0),
        (INSERT, ["<answer>done</answer>"], 0.0),
        # order-insensitive: delete and re-insert Ann, so she is now the last row
        (
            UPDATE,
            [
                sql("DELETE FROM people WHERE name = 'Ann'"),
                sql("INSERT INTO people VALUES ('Ann', 35, 'Rome')"),
                "<answer>x</answer>",
            ],
            1.0,
        ),
        (UPDATE, [sql("UPDATE people SET age = 35")], None),
        (DELETE, [sql("DELETE FROM people WHERE name <> 'Ben'"), "<answer>done</answer>"], 1.0),
        (DELETE, [sql("DELETE FROM people WHERE name = 'Ann'"), "<answer>done</answer>"], 0.0),
    ],
)
def test_rewards(entry, actions, reward):
    env, out = run(entry, actions)
    if reward is None:  # still open: the turn limit scores the table
        assert out[-1].done == [False]
        assert env.score_final([0]) == [0.0]
        return
    assert [r.done[0] for r in out] == [False] * (len(actions) - 1) + [True]
    assert out[-1].rewards == [reward] and out[-1].action_kinds == ["answer"]


def test_a_query_shows_its_result_and_the_episode_goes_on():
    _, out = run(task(), [sql("SELECT name, age FROM people WHERE city = 'Rome'"), sql("SELECT nope FROM people")])
    assert out[0].observations == [
        "Result:\nname | age\nAnn | 34\nIf this answers the question, write the answer inside <answer></answer> tags; "
        "if not, run another statement."
    ]
    assert out[0].action_kinds == ["query"]
    assert out[1].observations == ["Error: no such column: nope."] and out[1].action_kinds == ["query_error"]
    assert out[1].done == [False] and out[1].invalid == [False] and out[1].rewards == [0.0]


@pytest.mark.parametrize(
    "statement,text",
    [
        (
            "ATTACH DATABASE '/tmp/mintrl_sql_attack.db' AS x",
            "Error: not authorized: ATTACH, DETACH and VACUUM are refused.",
        ),
        ("PRAGMA table_info(people)", "Error: not authorized: PRAGMA is refused."),
        ("SELECT * FROM secret", "Error: no such table: secret."),
        ("SELECT 1; SELECT 2", "Error: only one statement may run at a time."),
        ("SELECT load_extension('/tmp/evil.so')", "Error: not authorized: the function load_extension() is refused."),
        (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c a, c b",
            "Error: the statement ran longer than 0.5 s and was stopped.",
        ),
        (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
            "Error: the statement ran longer than 0.5 s and was stopped.",
        ),
    ],
)
def test_hostile_sql_gets_a_clear_observation_in_time(statement, text):
    start = time.monotonic()
    env, out = run(task(), [sql(statement), "<answer>34</answer>"], query_timeout_s=0.5)
    assert time.monotonic() - start < 3
    assert out[0].observations == [text] and out[0].action_kinds == ["query_error"] and out[0].done == [False]
    assert out[1].rewards == [1.0]  # the episode went on
    metrics = env.metrics()
    assert metrics["env/query_errors"] == 1.0 and metrics["env/timeouts"] == float("stopped" in text)


def test_invalid_and_too_long_actions():
    env, out = run(task(), ["I think it is 34.", "x" * 1001, "```sql\n```", "<answer>34</answer>"])
    assert [r.observations[0] for r in out[:3]] == [
        NO_ACTION,
        too_long(1001, 1000),
        "Your ```sql block is empty. Write one SQL statement inside it.",
    ]
    assert [r.invalid[0] for r in out] == [True, True, True, False] and out[3].rewards == [1.0]
    assert out[1].observations[0].startswith("Your message is too long (1001 characters; at most 1000 are read).")
    assert env.metrics()["env/invalid_actions"] == 3.0
    assert env.metrics()["env/invalid_actions"] == 0.0  # counters restart at each call


def test_a_bad_entry_ends_its_episode_with_nan_and_the_others_go_on():
    broken = {k: v for k, v in task().items() if k != "table"}
    env = SqlEnvironment()
    env.reset([item(broken), item(task(), 1), item(None, 2)])
    result = env.step([0, 1, 2], ["<answer>34</answer>"] * 3)
    assert result.done == [True, True, True] and result.error == [True, False, True]
    assert math.isnan(result.rewards[0]) and result.rewards[1] == 1.0 and math.isnan(result.rewards[2])
    assert result.action_kinds == ["error", "answer", "error"]
    assert env.metrics()["env/errors"] == 2.0


def test_turn_limit_and_score_final():
    env, out = run(UPDATE, [sql("UPDATE people SET age = 35 WHERE name = 'Ann'")], max_turns=1)
    assert out[0].done == [True] and out[0].rewards == [1.0]
    env = SqlEnvironment()
    env.reset([item(UPDATE), item(task(), 1), item(DELETE, 2)])
    env.step([0, 1], [sql("UPDATE people SET age = 35 WHERE name = 'Ann'"), sql("SELECT 1")])
    assert env.score_final([0, 1, 2]) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="episode 0 has finished"):
        env.score_final([0])


def test_contract_misuse_raises():
    env = SqlEnvironment()
    env.reset([item(task())])
    with pytest.raises(ValueError, match="1 episodes and 2 actions"):
        env.step([0], ["a", "b"])
    with pytest.raises(ValueError, match="episode index 3 is unknown"):
        env.step([3], ["a"])
    with pytest.raises(ValueError, match="listed twice"):
        env.step([0, 0], ["a", "b"])
    env.step([0], ["<answer>34</answer>"])
    with pytest.raises(ValueError, match="episode 0 has finished"):
        env.step([0], ["<answer>34</answer>"])


@pytest.mark.parametrize(
    "field,value",
    [
        ("query_timeout_s", 0),
        ("max_result_rows", 0),
        ("max_result_chars", -1),
        ("max_action_chars", 1.5),
        ("max_turns", 0),
    ],
)
def test_bad_fields_are_named(field, value):
    with pytest.raises(ValueError, match=f"env.{field} must be"):
        SqlEnvironment(**{field: value})


def test_replay_repeats_observations_and_reward():
    actions = [sql("SELECT * FROM people"), sql("DELETE FROM people WHERE age = 34"), "hmm", "<answer>done</answer>"]
    first = replay(SqlEnvironment(), item(DELETE), actions)
    second = replay(SqlEnvironment(), item(DELETE), actions)
    assert (
        first[0]
        == second[0]
        == [
            "",
            result_observation("name | age | city\nAnn | 34 | Rome\nBen | 21 | Oslo\nCara | 34 | Lima"),
            result_observation("OK, 2 rows changed."),
            NO_ACTION,
            "",
        ]
    )
    assert first[1].rewards == second[1].rewards == [1.0]


def test_episodes_are_private():
    env = SqlEnvironment()
    env.reset([item(task()), item(task(), 1)])
    env.step([0], [sql("DELETE FROM people")])
    result = env.step([0, 1], [sql("SELECT count(*) FROM people")] * 2)
    assert result.observations == [result_observation("count(*)\n0"), result_observation("count(*)\n3")]
