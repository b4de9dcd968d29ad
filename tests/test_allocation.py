"""RAIL allocation parts: the variance gain and the eq. 6 loss by hand, the controller on a synthetic
contextual bandit (no language model), the shadow-to-live switch, the budget cap, and an exact
checkpoint round trip."""

from __future__ import annotations

import io
import math
import random

import pytest
import torch

from mintrl.allocation import RailController, RolloutBudget, anchor_features, realized_gain, recency_huber_loss, reward_variance


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
    with pytest.raises(ValueError, match="budget_per_step must be positive"):
        RolloutBudget(0)


def _true_gain(z, action):
    """Synthetic contextual bandit: action a pays 0.5 z_a - 0.1 (reward^2 units); not branching pays 0."""
    return 0.5 * z[action] - 0.1


def _run_bandit(rounds, seed=0):
    rng = random.Random(seed)
    rail = RailController(state_dim=3, budgets=(1, 2, 4), temperatures=(1.0,), promote_after=30, window=200, rho0=0.1,
                          rho_steps=200, refit_every=10, fit_steps=40, lr=2e-2, seed=seed)
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
    restored = RailController(state_dim=3, budgets=(1, 2, 4), temperatures=(1.0,), promote_after=30, window=200, rho0=0.1,
                              rho_steps=200, refit_every=10, fit_steps=40, lr=2e-2, seed=99)
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    z = [0.3, 0.9, 0.1]
    assert torch.equal(restored.predict(z), rail.predict(z))
    assert (restored.phase, restored.recorded, restored.live_decisions) == (rail.phase, rail.recorded, rail.live_decisions)
    assert [restored.decide(z) for _ in range(20)] == [rail.decide(z) for _ in range(20)]
