"""RAIL allocation parts: the variance gain and the eq. 6 loss by hand, the controller on a synthetic
contextual bandit (no language model), the shadow-to-live switch, the budget cap, and an exact
checkpoint round trip."""

from __future__ import annotations

import io
import math
import random

import pytest
import torch

from mintrl.allocation import (
    RailController,
    RolloutBudget,
    anchor_features,
    realized_gain,
    recency_huber_loss,
    reward_variance,
)


def test_reward_variance_and_realized_gain_by_hand():
    assert reward_variance([1, 0, 0, 0]) == pytest.approx(0.1875)  # mean 1/4: (9/16 + 3/16) / 4
    assert reward_variance([1, math.nan, 0]) == pytest.approx(0.25) and reward_variance([]) == 0.0
    assert realized_gain([0, 0, 0, 0], [1, 1]) == pytest.approx(2 / 9)  # an all-fail group gains contrast
    assert realized_gain([1, 0], [1]) == pytest.approx(2 / 9 - 1 / 4)  # = -1/36: the branch lowers variance


def test_recency_huber_loss_by_hand():
    predicted, realized = torch.tensor([0.0, 0.5, 0.2]), torch.tensor([0.1, 0.0, 0.2])
    # weights 0.5^2, 0.5^1, 0.5^0 (oldest first); Huber(delta=0.2): 0.5*0.1^2, 0.2*(0.5-0.1), 0
    expected = (0.25 * 0.005 + 0.5 * 0.08 + 1.0 * 0.0) / 1.75
    assert float(recency_huber_loss(predicted, realized, decay=0.5, delta=0.2)) == pytest.approx(expected)


def test_anchor_features():
    z = anchor_features(1.5, 2, 8, 0.25, [1.0, 0.0, math.nan, 0.0], 1, 0.9, ["7", "7", None, "3"])
    assert z == pytest.approx([1.5, 2.0, 0.25, 0.25, 1 / 3, math.sqrt(2 / 9), 1 / 6, 1.0, 0.9, 0.75])


def test_budget_is_never_exceeded():
    budget = RolloutBudget(10)
    assert [budget.take(4), budget.take(8), budget.take(1)] == [4, 6, 0]
    assert budget.used == 10 and budget.remaining == 0 and budget.used_fraction == 1.0
    with pytest.raises(ValueError, match="allocation.budget_per_step must be an integer >= 1"):
        RolloutBudget(0)


def _true_gain(z, action):
    """Synthetic contextual bandit: action a pays 0.5 z_a - 0.1 (reward^2 units); not branching pays 0."""
    return 0.5 * z[action] - 0.1


def _run_bandit(rounds, seed=0):
    rng = random.Random(seed)
    rail = RailController(
        state_dim=3,
        budgets=(1, 2, 4),
        temperatures=(1.0,),
        promote_after=30,
        window=200,
        rho0=0.1,
        rho_steps=200,
        refit_every=10,
        fit_steps=40,
        lr=2e-2,
        seed=seed,
    )
    torch.manual_seed(seed)
    regret, fixed_regret, curve = 0.0, 0.0, []
    for t in range(rounds):
        z = [rng.random() for _ in range(3)]
        best = max(0.0, max(_true_gain(z, a) for a in range(3)))
        if rail.phase == "shadow":
            action = rng.randrange(3)
            rail.record(z, action, _true_gain(z, action) + rng.gauss(0, 0.05))
            continue
        action, _ = rail.decide(z)
        got = 0.0 if action is None else _true_gain(z, action)
        if action is not None:
            rail.record(z, action, got + rng.gauss(0, 0.05))
        regret += best - got
        fixed_regret += best - _true_gain(z, 2)  # the fixed heuristic: always the largest budget
        curve.append(regret)
    return rail, curve, fixed_regret


def test_controller_beats_a_fixed_heuristic_with_sublinear_regret():
    rail, curve, fixed_regret = _run_bandit(630)
    assert rail.phase == "live" and len(curve) == 600
    per_round = [curve[t - 1] / t for t in (150, 300, 600)]
    assert per_round[0] > per_round[1] > per_round[2], per_round  # regret(T)/T falls
    assert curve[-1] < 0.5 * fixed_regret, (curve[-1], fixed_regret)


def test_shadow_phase_ends_at_the_configured_trace_count():
    rail = RailController(state_dim=2, promote_after=5, refit_every=100, fit_steps=1)
    for k in range(4):
        rail.record([0.1, 0.2], 0, 0.01)
        assert rail.phase == "shadow"
    rail.record([0.1, 0.2], 1, 0.02)
    assert rail.phase == "live" and rail.recorded == 5
    assert rail.shadow_plan(hard=True) == [2, 5, 8]  # the hottest temperature, budgets 2, 4, 8 in order
    assert [rail.actions[i].budget for i in rail.shadow_plan(hard=False)] == [2, 4, 8]


def test_checkpoint_round_trip_restores_exact_predictions_and_decisions():
    rail, _, _ = _run_bandit(80, seed=1)
    buffer = io.BytesIO()
    torch.save(rail.state_dict(), buffer)
    buffer.seek(0)
    restored = RailController(
        state_dim=3,
        budgets=(1, 2, 4),
        temperatures=(1.0,),
        promote_after=30,
        window=200,
        rho0=0.1,
        rho_steps=200,
        refit_every=10,
        fit_steps=40,
        lr=2e-2,
        seed=99,
    )
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    z = [0.3, 0.9, 0.1]
    assert torch.equal(restored.predict(z), rail.predict(z))
    assert (restored.phase, restored.recorded, restored.live_decisions) == (
        rail.phase,
        rail.recorded,
        rail.live_decisions,
    )
    assert [restored.decide(z) for _ in range(20)] == [rail.decide(z) for _ in range(20)]


# ------------------------------------------------------------------ on the embedded model

from conftest import ARITHMETIC  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from mintrl.allocation import Brancher, EntropyAllocation, RailAllocation, anchors  # noqa: E402
from mintrl.data.reasoning_gym import ReasoningGymPrompts  # noqa: E402
from mintrl.intervention.rule import RuleIntervention  # noqa: E402
from mintrl.judge.none import KeepJudge  # noqa: E402
from mintrl.reward import ReasoningGymReward  # noqa: E402
from mintrl.rollout.semi_on_policy import SemiOnPolicyRollout  # noqa: E402
from mintrl.sampler import HFSampler  # noqa: E402
from mintrl.training.build import ModelContext  # noqa: E402

DELIMITERS = ("blank_line", "code_fence")


@pytest.fixture(scope="module")
def items(tokenizer):
    return ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=8, val_size=2).build("train", tokenizer)


def _engine(embedded, tokenizer, allocation, max_tokens=48):
    return SemiOnPolicyRollout(
        HFSampler(embedded.model, tokenizer),
        KeepJudge(),
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
    from mintrl.rollout.batch import Rollout

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


def test_entropy_allocation_never_exceeds_the_budget(embedded, tokenizer, items):
    torch.manual_seed(1)
    engine = _engine(embedded, tokenizer, EntropyAllocation(budget_per_step=12, percentile=0.5, branch_budget=3))
    batch = engine.generate(items[:2], step=0)  # 2 prompts x 4 initial rollouts + at most 4 from branching
    assert 8 <= len(batch) <= 12 and batch.stats["allocation/budget_used"] == len(batch)
    branches = batch.stats["allocation/branches"]
    assert (branches > 0) == (len(batch) > 8) and len(batch) - 8 <= 3 * branches
    with pytest.raises(ValueError, match="budget_per_step=6 is below this step's 8 initial rollouts"):
        _engine(embedded, tokenizer, EntropyAllocation(budget_per_step=6)).generate(items[:2], step=0)


def test_rail_allocation_goes_live_and_its_state_survives_a_checkpoint(tmp_path):
    from mintrl.training.config import CONFIG_DIR
    from mintrl.training.run import run

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
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    summary = run(cfg)
    assert summary["steps"] == 2
    from mintrl.eval.tensorboard import load_scalars

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
    restored = RailAllocation(budget_per_step=16, budgets=[2, 4], temperatures=[0.8, 1.2], promote_after=1)
    restored.load_state_dict(ckpt["RolloutDataModule"]["rollout"]["allocation"])
    assert restored.rail.phase == state["phase"] and len(restored.rail.traces) == len(state["traces"])


def test_intervene_action_reviews_the_chunk_at_the_anchor_and_writes_a_correction(embedded, tokenizer, items):
    from mintrl.judge.rule import RuleJudge
    from mintrl.rollout.batch import Rollout

    torch.manual_seed(0)
    item = items[0]  # "Calculate a + b."
    a, b = item.entry["metadata"]["expression"].split(" + ")
    good = f"{a} + {b} = {int(a) + int(b)}"
    engine = SemiOnPolicyRollout(
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
    # a chunk the judge keeps: no rollout
    clean = Rollout(group=0, is_control=True, prompt_ids=list(item.prompt_ids))
    ok = tokenizer.encode(f"Let me add.\n\nFirst, {good}\n\nSo", add_special_tokens=False)
    clean.append(ok, [-0.3] * len(ok), intervention=False)
    assert engine.intervene_at(clean, anchor, 8, item) == []


def test_intervene_actions_extend_the_grid_and_get_shadow_anchors():
    rail = RailController(state_dim=2, budgets=(2, 4), temperatures=(1.0,), intervene_lengths=(8,), seed=0)
    assert [(a.budget, a.temperature, a.intervene) for a in rail.actions] == [(2, 1.0, 0), (4, 1.0, 0), (1, 1.0, 8)]
    plans = [tuple(rail.shadow_plan(hard=False)) for _ in range(200)]
    assert set(plans) == {(2,), (0, 1)} and 60 < plans.count((2,)) < 140  # about half the anchors
