"""Per-step episode metrics (issue 20): every action kind the environment declares is logged every
step, 0 when absent (Lightning keeps logging a key's last value on steps that omit it: with
omitted kinds a run showed 5 query errors a step on steps that had none)."""

from collections import Counter

from mintrl.core.batch import Rollout, TurnRecord
from mintrl.env.python_tool.environment import PythonToolEnvironment
from mintrl.env.sql.environment import SqlEnvironment
from mintrl.rollout.episodes import episode_stats


def _episode(reward: float, turns: int, env_tokens: int, intervened: int = 0) -> Rollout:
    r = Rollout(group=0, is_control=True, prompt_ids=[1, 2])
    r.reward = reward
    r.turns = [TurnRecord(0, 1, 2, "answer", intervened=k < intervened) for k in range(turns)]
    r.environment = [True] * env_tokens + [False] * 3
    return r


def test_absent_kinds_are_zero_and_undeclared_kinds_still_counted():
    rollouts = [_episode(1.0, 1, 0), _episode(0.0, 3, 10, intervened=1)]
    stats = episode_stats(rollouts, Counter(answer=2, other=1), 0, 0, 0.5, SqlEnvironment.action_kinds)
    assert {k: v for k, v in stats.items() if k.startswith("episode/actions_")} == {
        "episode/actions_query": 0.0,
        "episode/actions_query_error": 0.0,
        "episode/actions_answer": 2.0,
        "episode/actions_invalid": 0.0,
        "episode/actions_error": 0.0,
        "episode/actions_other": 1.0,
    }
    assert stats["episode/success"] == 0.5 and stats["episode/turns"] == 2.0
    assert stats["episode/observation_tokens"] == 5.0 and stats["episode/env_seconds"] == 0.5
    assert stats["episode/interventions"] == 0.5


def test_environments_declare_their_action_kinds():
    assert SqlEnvironment.action_kinds == ("query", "query_error", "answer", "invalid", "error")
    assert set(PythonToolEnvironment.action_kinds) >= {"run", "run_error", "answer", "invalid"}
