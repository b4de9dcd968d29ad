"""The RAIL controller on a synthetic contextual bandit (no language model): it beats a fixed
heuristic with sublinear regret, and a checkpoint round trip restores exact predictions and decisions
(thousands of controller updates: seconds to minutes, hence this tier)."""

from __future__ import annotations

import io
import random

import torch

from mintrl.allocation import (
    RailController,
)


def _true_gain(z, action):
    """Synthetic contextual bandit: action a pays 0.5 z_a - 0.1 (reward^2 units); not branching pays 0."""
    return 0.5 * z[action] - 0.1


def _controller(seed: int) -> RailController:
    """The controller of these tests: 3 features, budgets 1/2/4 at one temperature."""
    return RailController(
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


def _run_bandit(rounds, seed=0):
    rng = random.Random(seed)
    rail = _controller(seed)
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


def test_checkpoint_round_trip_restores_exact_predictions_and_decisions():
    rail, _, _ = _run_bandit(80, seed=1)
    buffer = io.BytesIO()
    torch.save(rail.state_dict(), buffer)
    buffer.seek(0)
    restored = _controller(seed=99)
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    z = [0.3, 0.9, 0.1]
    assert torch.equal(restored.predict(z), rail.predict(z))
    assert (restored.phase, restored.recorded, restored.live_decisions) == (
        rail.phase,
        rail.recorded,
        rail.live_decisions,
    )
    assert [restored.decide(z) for _ in range(20)] == [rail.decide(z) for _ in range(20)]
