"""RAIL at turn anchors on the embedded model in the real python_tool environment (sandbox): replaying a
hand-written episode's actions restores the state at a turn anchor (the same observation), branches share
the parent's ids and provenance up to the anchor and play on in the environment, a replay that does not
reproduce the parent is dropped and counted, and the intervene action corrects the action at the anchor."""

from __future__ import annotations

import math

import pytest
import torch

from mintrl.allocation import turn_anchors
from mintrl.build.components import ModelContext
from mintrl.core.batch import BranchRecord, Rollout
from mintrl.data.base import PromptItem
from mintrl.env.python_tool.environment import PythonToolEnvironment
from mintrl.env.python_tool.source import TOOL_INSTRUCTION
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.rollout.episode_branches import EpisodeBrancher
from mintrl.rollout.episodes import EpisodeRollout, EpisodeTally
from mintrl.sampler import HFSampler

UID_BASE = 64000  # not the other tests' sandbox uids
ENTRY = {  # a hand-made reasoning-gym basic_arithmetic task
    "question": "Calculate 4 + 3.",
    "answer": "7",
    "metadata": {"source_dataset": "basic_arithmetic", "source_index": 0, "expression": "4 + 3"},
}


@pytest.fixture(scope="module")
def item(tokenizer):
    text = TOOL_INSTRUCTION.format(question=ENTRY["question"])
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
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


@pytest.mark.slow  # 31 s alone on 2 cores (10-15 minutes while other jobs shared them); the default tier is at its time budget
@pytest.mark.timeout(1800)
def test_two_step_python_tool_rail_run(tmp_path):
    """``method=rail preset=cpu_python_tool``, 2 steps of 1 task x 4 episodes and a budget of 8:
    step 0's shadow trial branches from a turn anchor and promotes the controller (after 1 trace); the
    rollout counts, replay mismatches and the controller's stats are logged; branch records name a
    control parent, one of its turn starts, and share its turns up to there."""
    from hydra import compose, initialize_config_dir

    from mintrl.analysis.rollouts import read_records, record_files
    from mintrl.analysis.tensorboard import load_scalars
    from mintrl.build.config import CONFIG_DIR
    from mintrl.build.run import run

    overrides = [
        "method=rail",
        "preset=cpu_python_tool",
        "trainer.max_steps=2",
        "callbacks=sweep",
        "callbacks.hf_export=null",
        f"paths.output_dir={tmp_path}",
        "data.prompts_per_step=1",  # budget_per_step = 1 x 8
        "data.prompts.val_size=1",
        "data.val_samples_per_prompt=1",
        "rollout.max_turns=2",
        "rollout.max_action_tokens=16",
        "rollout.max_response_tokens=128",
        "rollout.progress=false",
        f"env.uid_base={UID_BASE}",
        "env.workers=2",
        "allocation.promote_after=1",
        "allocation.refit_every=1",
        "allocation.fit_steps=5",
        "seed=0",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    assert cfg.allocation.budget_per_step == 8
    assert run(cfg)["steps"] == 2
    values = {tag: [v for _, v in points] for tag, points in load_scalars(tmp_path).items()}
    assert values["allocation/live"] == [1.0, 1.0] and values["allocation/traces"][0] == 1.0  # live after 1 trace
    assert values["allocation/branches"][0] >= 1 and values["allocation/replay_mismatches"] == [0.0, 0.0]
    assert all(4 <= u <= 8 for u in values["allocation/budget_used"])  # 4 initial episodes, the cap 8
    assert values["allocation/generated_per_prompt"] == values["allocation/budget_used"]  # 1 prompt
    assert all(4 <= p <= u for p, u in zip(values["allocation/rollouts_per_prompt"], values["allocation/budget_used"]))
    assert 0.0 <= values["allocation/gate_pass_rate"][0] <= 1.0 and len(values["allocation/gate_pass_rate"]) == 1
    assert len(values["allocation/realized_gain"]) >= 1 and len(values["train/loss"]) == 2
    for step, path in record_files(tmp_path, "train"):
        records = read_records(path)
        kept = values["allocation/rollouts_per_prompt"][step]
        assert len(records) == kept and all(r["control"] for r in records)
        for r in records[4:]:  # the branches, after the 4 initial episodes
            parent = records[r["branch"]["parent"]]
            assert r["branch"]["kind"] == "resample" and r["branch"]["parent"] < 4 and parent["branch"] is None
            starts = [0] + [t["action_tokens"] + t["observation_tokens"] for t in parent["turns"][:1]]
            assert r["branch"]["anchor"] in starts[: len(parent["turns"])]  # a turn start of the parent
            if r["branch"]["anchor"] > 0:  # branched at turn 1: the replayed first turn is the parent's
                assert r["turns"][0] == parent["turns"][0]
