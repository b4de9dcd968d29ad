"""RAIL allocation parts by hand, without a language model: the variance gain and the eq. 6 loss, the
anchor features, the budget cap, the shadow-to-live switch and the intervene actions' grid (the controller
learning: integration/test_rail_controller.py; on the embedded model: integration/test_allocation_rollouts.py)."""

from __future__ import annotations

import math

import pytest
import torch

from mintrl.allocation import (
    RailController,
    RolloutBudget,
    anchor_features,
    answer_diversity,
    realized_gain,
    recency_huber_loss,
    reward_variance,
)
from mintrl.allocation.base import Allocation
from mintrl.allocation.decisions import BranchDecision, DecisionLog
from mintrl.allocation.rail import RailAllocation


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
    diversity = answer_diversity(["7", "7", None, "3"])  # 3 distinct answers (None is one) in 4
    z = anchor_features(1.5, 2, 8, 0.25, [1.0, 0.0, math.nan, 0.0], 1, 0.9, diversity)
    assert z == pytest.approx([1.5, 2.0, 0.25, 0.25, 1 / 3, math.sqrt(2 / 9), 1 / 6, 1.0, 0.9, 0.75])


def test_budget_is_never_exceeded():
    budget = RolloutBudget(10)
    assert [budget.take(4), budget.take(8), budget.take(1)] == [4, 6, 0]
    assert budget.used == 10 and budget.remaining == 0 and budget.used_fraction == 1.0
    with pytest.raises(ValueError, match="allocation.budget_per_step must be an integer >= 1"):
        RolloutBudget(0)


def test_shadow_phase_ends_at_the_configured_trace_count():
    rail = RailController(state_dim=2, promote_after=5, refit_every=100, fit_steps=1)
    for k in range(4):
        rail.record([0.1, 0.2], 0, 0.01)
        assert rail.phase == "shadow"
    rail.record([0.1, 0.2], 1, 0.02)
    assert rail.phase == "live" and rail.recorded == 5
    assert rail.shadow_plan(hard=True) == [2, 5, 8]  # the hottest temperature, budgets 2, 4, 8 in order
    assert [rail.actions[i].budget for i in rail.shadow_plan(hard=False)] == [2, 4, 8]


def test_live_decisions_say_whether_they_explored_and_actions_have_their_metric_names():
    rail = RailController(state_dim=2, budgets=(2, 4), temperatures=(0.8, 1.2), rho0=1.0, rho_steps=2, seed=0)
    assert [a.name for a in rail.actions] == ["m2_t0.8", "m2_t1.2", "m4_t0.8", "m4_t1.2"]
    rail.decide([0.1, 0.2])  # rho_0 = 1: a random action
    assert rail.last_explored
    rail.decide([0.1, 0.2])  # rho_1 = 0.5
    rail.decide([0.1, 0.2])  # rho_2 = 0: the best action (or none under the gate)
    assert not rail.last_explored and rail.live_decisions == 3


def test_decision_log_hands_each_decision_out_once():
    log = DecisionLog(RailAllocation.decision_kinds)
    first = BranchDecision("live", 1, "m2_t0.8", 2, 0.05, 0.0625, True, 1.5)
    log.add(first)
    assert log.take() == [first] and log.take() == []
    assert first.as_record(3) == {
        "step": 3, "kind": "live", "group": 1, "action": "m2_t0.8", "budget": 2, "predicted": 0.05,
        "realized": 0.0625, "kept": True, "anchor_surprisal": 1.5,
    }  # fmt: skip
    with pytest.raises(ValueError, match="decision kind 'entropy' is not declared by the allocation"):
        log.add(BranchDecision("entropy", 1, "m2_t1", 2, None, 0.0, True, 1.5))


def test_each_allocation_declares_its_decision_kinds_on_its_class():
    names = {cls.__name__: [k.name for k in cls.decision_kinds] for cls in Allocation.__subclasses__()}
    assert {
        n: names[n] for n in ("RailAllocation", "EntropyAllocation", "RandomAnchorAllocation", "UniformAllocation")
    } == {
        "RailAllocation": ["shadow", "live", "explore"],
        "EntropyAllocation": ["entropy"],
        "RandomAnchorAllocation": ["random"],
        "UniformAllocation": [],
    }
    assert all(k.meaning for cls in Allocation.__subclasses__() for k in cls.decision_kinds)


def test_intervene_actions_extend_the_grid_and_get_shadow_anchors():
    rail = RailController(state_dim=2, budgets=(2, 4), temperatures=(1.0,), intervene_lengths=(8,), seed=0)
    assert [(a.budget, a.temperature, a.intervene) for a in rail.actions] == [(2, 1.0, 0), (4, 1.0, 0), (1, 1.0, 8)]
    plans = [tuple(rail.shadow_plan(hard=False)) for _ in range(200)]
    assert set(plans) == {(2,), (0, 1)} and 60 < plans.count((2,)) < 140  # about half the anchors
