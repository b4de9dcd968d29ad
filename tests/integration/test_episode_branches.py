"""RAIL at turn anchors on the embedded model in the real python_tool environment (sandbox): replaying a
hand-written episode's actions restores the state at a turn anchor (the same observation), branches share
the parent's ids and provenance up to the anchor and play on in the environment, a replay that does not
reproduce the parent is dropped and counted, and the intervene action corrects the action at the anchor."""

from __future__ import annotations

import math

import pytest
import torch

from mintrl.allocation import turn_anchors
from mintrl.data.base import PromptItem
from mintrl.env.python_tool.environment import PythonToolEnvironment
from mintrl.env.python_tool.source import TOOL_INSTRUCTION
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.rollout.batch import BranchRecord, Rollout
from mintrl.rollout.episode_branches import EpisodeBrancher
from mintrl.rollout.episodes import EpisodeRollout, EpisodeTally
from mintrl.sampler import HFSampler
from mintrl.training.build import ModelContext

UID_BASE = 64000  # not the other tests' sandbox uids
ENTRY = {  # a hand-made reasoning-gym basic_arithmetic task
    "question": "Calculate 4 + 3.",
    "answer": "7",
    "metadata": {"source_dataset": "basic_arithmetic", "source_index": 0, "expression": "4 + 3"},
}


@pytest.fixture(scope="module")
def item(tokenizer):
    text = TOOL_INSTRUCTION.format(question=ENTRY["question"])
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    ids = tokenizer(chat, add_special_tokens=False)["input_ids"]
    return PromptItem(0, ENTRY["question"], ENTRY["answer"], list(ids), ENTRY, "basic_arithmetic")


@pytest.fixture(scope="module")
def engine(embedded, tokenizer):
    return EpisodeRollout(
        env=PythonToolEnvironment(timeout_s=2.0, workers=2, uid_base=UID_BASE),
        sampler=HFSampler(embedded.model, tokenizer),
        judge=RuleJudge(),
        intervention=RuleIntervention(ModelContext(embedded)),
        reward=None,
        tokenizer=tokenizer,
        n_control=1,
        n_semi=0,
        max_turns=3,
        max_action_tokens=16,
        continuation_len=16,
        max_response_tokens=160,
        progress=False,
    )


def hand_episode(engine, tokenizer, item, actions: list[str]) -> Rollout:
    """A control episode whose actions are the given texts (encoded, end-of-turn id appended), played in
    the engine's environment: real observation turns and turn records."""
    engine._reset([item])
    parent = Rollout(group=0, is_control=True, prompt_ids=list(item.prompt_ids))
    parent.row = 0
    for text in actions:
        start = len(parent.response_ids)
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        parent.append(ids, [-0.5] * len(ids), intervention=False)
        [over] = engine._env_turn([parent], [0], [start], EpisodeTally())
        if over:
            break
    return parent


def test_replay_restores_the_observation_at_a_turn_anchor(engine, tokenizer, item):
    parent = hand_episode(engine, tokenizer, item, ["```python\nx = 4\n```", "```python\nprint(x + 3)\n```"])
    assert [t.kind for t in parent.turns] == ["run", "run"] and "7" in parent.turns[1].observation
    anchors = turn_anchors(parent)
    assert [(t, n, s) for _, t, n, s in anchors] == [(0, 2, 0.5), (1, 2, 0.5)]
    k = anchors[1][0]
    assert k == parent.turns[0].observation_end and parent.environment[k - 1] and not parent.environment[k]
    brancher = EpisodeBrancher(engine)
    assert brancher.replay(parent, 1, 2, item)  # two fresh episodes, the first action replayed in each
    # the state at the anchor is the parent's: its second action sees x = 4 and prints the same observation
    action = tokenizer.decode(parent.response_ids[k : parent.turns[1].action_end], skip_special_tokens=True)
    result = engine._step_env([0, 1], [action, action])
    assert result.observations == [parent.turns[1].observation] * 2 and result.action_kinds == ["run", "run"]

    torch.manual_seed(0)
    children = brancher.branch(parent, k, 2, 1.3, item)
    assert len(children) == 2
    for c in children:  # token in, token out: the parent's ids and provenance up to the anchor
        assert c.response_ids[:k] == parent.response_ids[:k] and c.logprobs[:k] == parent.logprobs[:k]
        assert c.environment[:k] == parent.environment[:k] and c.behaviour[:k] == parent.behaviour[:k]
        assert c.turns[0] == parent.turns[0] and 2 <= len(c.turns) <= 3 and c.turns[1].action_start == k
        assert (c.group, c.is_control, c.branch) == (0, True, BranchRecord("resample", k, 0, 1.3))
        assert c.reward in (0.0, 1.0)
        policy = [j for j in range(k, len(c.response_ids)) if not c.environment[j]]
        assert policy and all(c.logprobs[j] != c.behaviour[j] for j in policy)  # sampled at 1.3, rescored at 1.0
        assert all(c.logprobs[j] == 0.0 for j in range(k, len(c.response_ids)) if c.environment[j])
    assert brancher.metrics() == {"allocation/replay_mismatches": 0.0}

    # a parent whose recorded observation the environment does not reproduce: no branch, counted
    parent.turns[0] = type(parent.turns[0])(**{**parent.turns[0].__dict__, "observation": "Output:\n5\n"})
    assert brancher.branch(parent, k, 2, 1.0, item) == []
    assert brancher.metrics() == {"allocation/replay_mismatches": 1.0}


def test_intervene_action_corrects_the_action_at_a_turn_anchor(engine, tokenizer, item):
    parent = hand_episode(engine, tokenizer, item, ["```python\nprint(4 + 3)\n```", "<answer>9</answer>"])
    assert [t.kind for t in parent.turns] == ["run", "answer"] and parent.reward == 0.0
    k = parent.turns[1].action_start
    brancher = EpisodeBrancher(engine)
    torch.manual_seed(0)
    [child] = brancher.intervene(parent, k, 16, item)
    assert child.response_ids[:k] == parent.response_ids[:k] and not child.is_control
    assert child.branch == BranchRecord("intervene", k, 0, 1.0)
    assert child.revisions == 1 and child.turns[1].intervened and child.turns[1].kind == "answer"
    written = [j for j, flag in enumerate(child.intervention) if flag]
    text = tokenizer.decode([child.response_ids[j] for j in written], skip_special_tokens=True)
    assert written[0] >= k and text.strip() == "<answer>7</answer>"  # the rule intervention's correction
    assert child.reward == 1.0 and all(math.isfinite(child.logprobs[j]) for j in written)
    # an action the judge keeps: no branch
    good = hand_episode(engine, tokenizer, item, ["```python\nprint(4 + 3)\n```", "<answer>7</answer>"])
    assert good.reward == 1.0 and brancher.intervene(good, good.turns[1].action_start, 16, item) == []
