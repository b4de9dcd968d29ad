"""RAIL at turn anchors, by hand on a hand-made pool of episodes (no model, no environment): the turn
anchors, the state features of RAIL's table for episodes (round and round fraction, tool-sequence
diversity, pool entropy over policy tokens only), and the agent allocation rows' configs."""

from __future__ import annotations

import math

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from mintrl.allocation import (
    EntropyAllocation,
    RailAllocation,
    anchor_features,
    kind_sequence,
    pool_entropy,
    tool_sequence_diversity,
    turn_anchors,
    turn_at,
)
from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.core.batch import Rollout, TurnRecord


def episode(kinds: list[str], action_lps: list[list[float]], reward: float, obs_len: int = 3) -> Rollout:
    """An episode of ``len(kinds)`` action turns with the given policy log-probs, an observation turn
    of ``obs_len`` tokens after every action but the last, and its turn records."""
    r = Rollout(group=0, is_control=True, prompt_ids=[1, 2])
    for t, (kind, lps) in enumerate(zip(kinds, action_lps)):
        start = len(r.response_ids)
        r.append([10 + t] * len(lps), lps, intervention=False)
        end = len(r.response_ids)
        if t < len(kinds) - 1:
            r.observe([99] * obs_len)
        r.turns.append(TurnRecord(start, end, len(r.response_ids), kind))
    r.reward = reward
    return r


def pool() -> list[Rollout]:
    """Four episodes of one task: action-kind sequences (run, answer) twice, (answer), (run, run, answer)."""
    return [
        episode(["run", "answer"], [[-1.0, -2.0], [-0.5]], 1.0),
        episode(["run", "answer"], [[-3.0], [-1.0, -1.0]], 0.0),
        episode(["answer"], [[-0.2, -0.2, -0.2]], 0.0),
        episode(["run", "run", "answer"], [[-2.0], [-4.0], [-1.0]], math.nan),  # ended by an env error
    ]


def test_turn_anchors_are_the_action_starts_with_their_round_and_surprisal():
    a, _, _, d = pool()
    # a: action 0 = tokens 0-1, observation 2-4, action 1 = token 5
    assert turn_anchors(a) == [(0, 0, 2, 1.0), (5, 1, 2, 0.5)]
    assert turn_anchors(d) == [(0, 0, 3, 2.0), (4, 1, 3, 4.0), (8, 2, 3, 1.0)]
    assert turn_at(d, 8) == 2
    with pytest.raises(ValueError, match="response token 3 is not a turn anchor"):
        turn_at(d, 3)
    # an action whose first token the intervention wrote is no anchor
    fixed = episode(["run", "answer"], [[-1.0], [-1.0]], 1.0)
    fixed.intervention[4] = True  # the second action's first token
    assert turn_anchors(fixed) == [(0, 0, 2, 1.0)]


def test_tool_sequence_diversity_and_pool_entropy_of_a_hand_made_pool():
    episodes = pool()
    assert [kind_sequence(r) for r in episodes] == [
        ("run", "answer"),
        ("run", "answer"),
        ("answer",),
        ("run", "run", "answer"),
    ]
    assert tool_sequence_diversity([kind_sequence(r) for r in episodes]) == pytest.approx(3 / 4)
    assert tool_sequence_diversity([]) == 0.0
    # policy tokens only (the observation tokens' 0.0 log-probs are left out): 12 tokens
    surprisals = [1.0, 2.0, 0.5, 3.0, 1.0, 1.0, 0.2, 0.2, 0.2, 2.0, 4.0, 1.0]
    assert pool_entropy(episodes) == pytest.approx(sum(surprisals) / len(surprisals))
    corrected = episode(["answer"], [[-1.0, -3.0]], 1.0)
    corrected.append([7], [math.nan], intervention=True)  # an intervention token: not the policy's
    assert pool_entropy([corrected]) == pytest.approx(2.0)


def test_turn_anchor_features_of_a_hand_made_pool():
    episodes = pool()
    k, t, n, surprisal = turn_anchors(episodes[3])[1]  # round 1 of a 3-turn episode
    z = anchor_features(
        surprisal,
        t,
        n,
        budget_used_fraction=16 / 32,
        group_rewards=[r.reward for r in episodes],
        failed_anchors=2,
        pool_entropy=pool_entropy(episodes),
        diversity=tool_sequence_diversity([kind_sequence(r) for r in episodes]),
    )
    mean = 1 / 3  # rewards 1, 0, 0 (the NaN left out)
    expected = [4.0, 1.0, 1 / 3, 0.5, mean, math.sqrt(2 / 9), 1 / 6, 2.0, 16.1 / 12, 0.75]
    assert z == pytest.approx(expected)


@pytest.mark.parametrize(
    "row,kind,budget",
    [
        ("method=rail preset=cpu_python_tool", RailAllocation, 64),
        ("method=entropy preset=cpu_python_tool", EntropyAllocation, 64),
        ("method=rail preset=cpu_shell", RailAllocation, 64),
        ("method=entropy preset=cpu_shell", EntropyAllocation, 64),
        ("method=rail preset=cpu_sql", RailAllocation, 64),
        ("method=entropy preset=cpu_sql", EntropyAllocation, 64),
        ("experiment=paper/agent_rail", RailAllocation, 512),
        ("experiment=paper/agent_entropy", EntropyAllocation, 512),
    ],
)
def test_agent_allocation_rows_compose_and_instantiate(row, kind, budget):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *row.split()])
    check_config(cfg)
    assert cfg.rollout._target_ == "mintrl.rollout.episodes.EpisodeRollout"
    assert cfg.task_name == row.split()[0].split("=")[1].replace("/", "_")  # rail, paper_agent_rail, ...
    allocation = instantiate(cfg.allocation)
    # 8 (cpu) or 32 (paper) prompts x 8 or 16 rollouts per prompt
    assert type(allocation) is kind and allocation.budget_per_step == budget
    assert cfg.rollout.n_semi == 0 and cfg.objective._target_.endswith("GRPO")


@pytest.mark.parametrize("n", [8, 16, 32])
def test_uniform_grpo_rows_of_rails_table(n):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        overrides = ["paths.output_dir=/tmp/mintrl-test", "method=grpo", "preset=paper_sql", f"rollout.n_control={n}"]
        cfg = compose("train", overrides=overrides)
    check_config(cfg)
    assert (cfg.rollout.n_control, cfg.rollout.n_semi) == (n, 0) and cfg.allocation._target_.endswith(
        "Uniform" + "Allocation"
    )
