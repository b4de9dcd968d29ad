"""RAIL, entropy and random-anchor allocation on the embedded model: branches share the prefix and are
rescored at the training temperature, the budget holds, random anchors follow their seeded order, the
intervene action reviews the chunk at the anchor, and ``allocation=rail`` goes live in a run whose controller state survives a checkpoint."""

from __future__ import annotations

import math
import random

import pytest
import torch
from conftest import ARITHMETIC
from hydra import compose, initialize_config_dir

from mintrl.allocation import (
    Brancher,
    EntropyAllocation,
    RailAllocation,
    RandomAnchorAllocation,
    anchors,
)
from mintrl.build.components import ModelContext
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.always_keep import AlwaysKeepJudge
from mintrl.reward import ReasoningGymReward
from mintrl.rollout.single_turn import SingleTurnRollout
from mintrl.sampler import HFSampler

DELIMITERS = ("blank_line", "code_fence")


@pytest.fixture(scope="module")
def items(tokenizer):
    return ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=8, val_size=2).build("train", tokenizer)


def _engine(embedded, tokenizer, allocation, max_tokens=48):
    return SingleTurnRollout(
        HFSampler(embedded.model, tokenizer),
        AlwaysKeepJudge(),
        RuleIntervention(ModelContext(embedded)),
        ReasoningGymReward(),
        tokenizer,
        n_control=4,
        n_semi=0,
        max_response_tokens=max_tokens,
        progress=False,
        allocation=allocation,
    )


def test_branches_share_the_prefix_and_are_rescored_at_the_training_temperature(embedded, tokenizer, items):
    from mintrl.core.batch import Rollout

    torch.manual_seed(0)
    engine = _engine(embedded, tokenizer, None)

    parent = Rollout(group=0, is_control=True, prompt_ids=list(items[0].prompt_ids))
    text = tokenizer.encode("First, add the numbers.\n\nThe sum is", add_special_tokens=False)
    parent.append(text, [-0.5] * len(text), intervention=False)
    found = anchors(parent, tokenizer, DELIMITERS)
    assert len(found) == 1 and found[0][1:3] == (1, 2) and found[0][3] == pytest.approx(0.5)
    k = found[0][0]
    assert tokenizer.decode(parent.response_ids[k:]).startswith("The sum")
    brancher = Brancher(
        engine.sampler, tokenizer, ReasoningGymReward(), temperature=1.0, top_p=1.0, max_response_tokens=24
    )
    children = brancher.branch(parent, k, 3, 1.5, items[0])
    assert len(children) == 3
    for c in children:
        assert c.response_ids[:k] == parent.response_ids[:k] and c.logprobs[:k] == parent.logprobs[:k]
        assert (c.group, c.is_control) == (0, True) and len(c.response_ids) <= 24 and not math.isnan(c.reward)
        assert c.logprobs[k:] != c.behaviour[k:]  # sampled at T=1.5, trained at T=1: rescored


def test_spend_all_generates_exactly_the_budget_with_fresh_rollouts_spread_over_prompts(embedded, tokenizer, items):
    torch.manual_seed(0)
    # a percentile no anchor reaches: the allocation branches nothing, the top-up spends all 6 left
    allocation = EntropyAllocation(budget_per_step=14, percentile=0.999, branch_budget=1, spend_all=True)
    batch = _engine(embedded, tokenizer, allocation).generate(items[:2], step=0)
    branched = batch.stats["allocation/branches"]
    assert batch.stats["allocation/budget_used"] == 14 == len(batch)
    assert batch.stats["allocation/top_up"] == 14 - 8 - branched
    counts = torch.bincount(batch.group_index, minlength=2).tolist()
    assert sum(counts) == 14 and abs(counts[0] - counts[1]) <= max(int(branched), 1)


@pytest.mark.slow  # 17 s on 2 cores; tests/unit/test_allocation.py checks the budget, test_determinism.py runs entropy branching
def test_entropy_allocation_never_exceeds_the_budget(embedded, tokenizer, items):
    torch.manual_seed(3)  # draws with anchors (a blank line) in 48 tokens: 2 branches of 2 rollouts (seed 1 had none)
    allocation = EntropyAllocation(budget_per_step=12, percentile=0.5, branch_budget=3)
    engine = _engine(embedded, tokenizer, allocation)
    batch = engine.generate(items[:2], step=0)  # 2 prompts x 4 initial rollouts + at most 4 from branching
    assert 8 <= len(batch) <= 12 and batch.stats["allocation/budget_used"] == len(batch)
    branches = batch.stats["allocation/branches"]
    assert (branches > 0) == (len(batch) > 8) and len(batch) - 8 <= 3 * branches
    # one decision per branch: its rollouts, its realised gain (the mean is the logged stat), no prediction
    decisions = allocation.take_decisions()
    assert len(decisions) == branches > 0 and allocation.take_decisions() == []
    assert sum(d.budget for d in decisions) == len(batch) - 8
    assert {(d.kind, d.action, d.predicted, d.kept) for d in decisions} == {("entropy", "m3_t1", None, True)}
    assert sum(d.realized for d in decisions) / len(decisions) == pytest.approx(batch.stats["allocation/realized_gain"])
    # the batch's traces say which rows are branches, of which control row and from which token
    assert all(t.branch is None for t in batch.traces[:8]) and len(batch) > 8
    for row, trace in enumerate(batch.traces[8:], start=8):
        branch = trace.branch
        assert branch.kind == "resample" and 0 <= branch.parent < 8 and bool(batch.is_control[branch.parent])
        assert int(batch.group_index[row]) == int(batch.group_index[branch.parent]) and branch.anchor > 0
        shared = [batch.input_ids[i][batch.response_mask[i]][: branch.anchor] for i in (row, branch.parent)]
        assert torch.equal(*shared)
    with pytest.raises(ValueError, match="budget_per_step=6 is below this step's 8 initial rollouts"):
        _engine(embedded, tokenizer, EntropyAllocation(budget_per_step=6)).generate(items[:2], step=0)


def _rollout(batch, row: int):
    """Row ``row`` of a batch of plain on-policy rollouts as a Rollout (response tokens, log-probs unused)."""
    from mintrl.core.batch import Rollout

    response = batch.input_ids[row][batch.response_mask[row]].tolist()
    rollout = Rollout(group=int(batch.group_index[row]), is_control=True, prompt_ids=[])
    rollout.append(response, [0.0] * len(response), intervention=False)
    return rollout


def test_random_anchor_allocation_branches_where_its_seed_says_and_its_state_resumes(embedded, tokenizer, items):
    allocation = RandomAnchorAllocation(budget_per_step=12, branch_budget=2, seed=1)
    state = allocation.state_dict()
    torch.manual_seed(3)  # the entropy test's draws: anchors in 48 tokens
    batch = _engine(embedded, tokenizer, allocation).generate(items[:2], step=0)
    decisions = allocation.take_decisions()
    assert len(decisions) == batch.stats["allocation/branches"] > 0 and len(batch) == 8 + 2 * len(decisions)
    assert {(d.kind, d.action, d.predicted, d.kept) for d in decisions} == {("random", "m2_t1", None, True)}
    assert sum(d.realized for d in decisions) / len(decisions) == pytest.approx(batch.stats["allocation/realized_gain"])
    # the anchors are the seeded shuffle of the step's pool (control rollouts' anchors, in rollout order)
    pool = [(r, a) for r, t in enumerate(batch.traces[:8]) for a in anchors(_rollout(batch, r), tokenizer, DELIMITERS)]
    order = list(range(len(pool)))
    random.Random(1).shuffle(order)  # seed 1 never puts anchor 0 first in pools of 2-11 anchors
    want = [(pool[i][0], pool[i][1][0]) for i in order[: len(decisions)]]
    assert order[: len(decisions)] != list(range(len(decisions)))  # not the pool's own order
    got = [(t.branch.parent, t.branch.anchor) for t in batch.traces[8::2]]
    assert got == want
    # a resumed allocation draws the order an uninterrupted one would
    again = RandomAnchorAllocation(budget_per_step=12, branch_budget=2, seed=99)
    again.load_state_dict(state)
    assert again.rng.random() == random.Random(1).random()
    with pytest.raises(ValueError, match="need positive budget_per_step"):
        RandomAnchorAllocation(budget_per_step=12, branch_budget=0)


@pytest.mark.slow  # 30-36 s; tests/integration/test_rail_controller.py round-trips the controller state itself
def test_rail_allocation_goes_live_and_its_state_survives_a_checkpoint(tmp_path):
    from mintrl.build.config import CONFIG_DIR
    from mintrl.build.run import run

    overrides = [
        f"paths.output_dir={tmp_path}",
        "allocation=rail",
        "allocation.budget_per_step=16",
        "allocation.promote_after=1",
        "allocation.refit_every=1",
        "allocation.fit_steps=5",
        "trainer.max_steps=2",
        "data.prompts_per_step=2",
        "data.prompts.val_size=2",
        "data.val_samples_per_prompt=1",
        "rollout.max_response_tokens=32",
        "rollout.chunk_size=8",
        "rollout.continuation_len=8",
        "rollout.progress=false",
        "trainer.precision=32-true",  # the exact fp32 path: the draws this test was written against
        "sampler.dtype=fp32",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    summary = run(cfg)
    assert summary["steps"] == 2
    from mintrl.analysis.tensorboard import load_scalars

    scalars = load_scalars(tmp_path / "tensorboard")
    used = [v for _, v in scalars["allocation/budget_used"]]
    assert all(8 <= u <= 16 for u in used)  # 2 prompts x (2 + 2) initial, never above the cap
    per_prompt = [v for _, v in scalars["allocation/rollouts_per_prompt"]]
    assert all(
        4 <= p and 2 * p <= u for p, u in zip(per_prompt, used)
    )  # rejected shadow branches use budget, not group places
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    state = ckpt["RolloutDataModule"]["rollout"]["allocation"]["rail"]
    assert state["recorded"] == scalars["allocation/traces"][-1][1] and state["recorded"] >= 1
    assert state["phase"] == "live" and scalars["allocation/live"][-1][1] == 1.0  # promoted after its first trace
    # every trace the controller recorded is one line of the decisions file: shadow first, then live ones
    import json

    lines = (tmp_path / "allocation_decisions.jsonl").read_text().splitlines()
    decisions = [json.loads(line) for line in lines]
    assert len(decisions) == state["recorded"] and decisions[0]["kind"] == "shadow" and decisions[0]["step"] == 0
    kinds = [d["kind"] for d in decisions]
    assert kinds == sorted(kinds, key=lambda k: k != "shadow") and set(kinds) <= {"shadow", "live", "explore"}
    assert all(isinstance(d["predicted"], float) and d["budget"] in (2, 4) for d in decisions)
    assert sum(d["realized"] for d in decisions if d["step"] == 0) / sum(d["step"] == 0 for d in decisions) == (
        pytest.approx(scalars["allocation/realized_gain"][0][1])
    )
    restored = RailAllocation(budget_per_step=16, budgets=[2, 4], temperatures=[0.8, 1.2], promote_after=1)
    restored.load_state_dict(ckpt["RolloutDataModule"]["rollout"]["allocation"])
    assert restored.rail.phase == state["phase"] and len(restored.rail.traces) == len(state["traces"])


def test_intervene_action_reviews_the_chunk_at_the_anchor_and_writes_a_correction(embedded, tokenizer, items):
    from mintrl.core.batch import BranchRecord, Rollout
    from mintrl.core.verdict import REVISE
    from mintrl.judge.rule import RuleJudge

    torch.manual_seed(0)
    item = items[0]  # "Calculate a + b."
    a, b = item.entry["metadata"]["expression"].split(" + ")
    good = f"{a} + {b} = {int(a) + int(b)}"
    engine = SingleTurnRollout(
        HFSampler(embedded.model, tokenizer),
        RuleJudge(),
        RuleIntervention(ModelContext(embedded)),
        ReasoningGymReward(),
        tokenizer,
        n_control=1,
        n_semi=0,
        chunk_size=64,
        max_response_tokens=64,
        progress=False,
    )
    parent = Rollout(group=0, is_control=True, prompt_ids=list(item.prompt_ids))
    head = tokenizer.encode("Let me add.\n\n", add_special_tokens=False)
    tail = tokenizer.encode(f"First, {good}\n\nThen {a} + {b} = 99\n\nSo", add_special_tokens=False)
    parent.append(head + tail, [-0.3] * (len(head) + len(tail)), intervention=False)
    anchor = anchors(parent, tokenizer, DELIMITERS)[0][0]
    assert anchor == len(head)
    [child] = engine.intervene_at(parent, anchor, 8, item)
    assert not child.is_control and child.revisions == 1 and child.revision_steps == [1]
    written = [i for i, flag in enumerate(child.intervention) if flag]
    assert (
        written and len(written) <= 8 and written == list(range(written[0], written[-1] + 1))
    )  # one correction, <= L tokens
    n = written[0]
    assert child.response_ids[:anchor] == parent.response_ids[:anchor]
    assert tokenizer.decode(child.response_ids[:n]).rstrip() == f"Let me add.\n\nFirst, {good}"  # the wrong step is cut
    assert tokenizer.decode([child.response_ids[i] for i in written]).strip().startswith(good.split(" = ")[0])
    assert all(math.isfinite(x) for x in child.logprobs) and not math.isnan(child.reward)
    assert child.branch == BranchRecord("intervene", anchor, -1, 1.0)  # the parent has no batch row here
    [review] = child.review_records
    assert (review.round, review.kind, review.step, review.revised) == (0, REVISE, 1, True)
    assert (review.at_token, review.written) == (n, len(written))
    # a chunk the judge keeps: no rollout
    clean = Rollout(group=0, is_control=True, prompt_ids=list(item.prompt_ids))
    ok = tokenizer.encode(f"Let me add.\n\nFirst, {good}\n\nSo", add_special_tokens=False)
    clean.append(ok, [-0.3] * len(ok), intervention=False)
    assert engine.intervene_at(clean, anchor, 8, item) == []
