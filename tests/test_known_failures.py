"""Known failure cases of RL-for-LLM frameworks, tried against mintrl (issue 18).

Each test here failed on the code before its fix; the values it asserts are computed by hand (or in
float64 next to the float32 code under test).
"""

from __future__ import annotations

import pytest
import torch

from mintrl.objective import group_advantages, mentor_advantages

# --- 1. all-equal groups give exactly zero advantage -------------------------------------------------


@pytest.mark.parametrize("size", [2, 7, 8, 16, 64, 1000])
@pytest.mark.parametrize("value", [0.95, 0.01, 0.1, 1 / 3, 0.7, -0.3, 123.456])
def test_group_advantages_all_equal_group_is_exactly_zero(size, value):
    rewards = torch.full((size,), value, dtype=torch.float32)
    group = torch.zeros(size, dtype=torch.long)
    valid = torch.ones(size, dtype=torch.bool)
    for scale_std in (True, False):
        adv = group_advantages(rewards, group, 1, valid, scale_std=scale_std, eps=1e-6)
        assert torch.equal(adv, torch.zeros(size)), (size, value, scale_std, adv[:3].tolist())


def test_group_advantages_mixed_group_matches_float64():
    rewards = torch.tensor([0.0] + [0.95] * 7, dtype=torch.float32)
    adv = group_advantages(rewards, torch.zeros(8, dtype=torch.long), 1, torch.ones(8, dtype=torch.bool), eps=1e-6)
    r = rewards.double()
    expected = (r - r.mean()) / (r.std() + 1e-6)  # Bessel-corrected, as the docstring says
    # by hand: mean 0.83125, std = sqrt((0.83125^2 + 7 * 0.11875^2) / 7) = 0.3359...; a_0 = -2.4749
    assert torch.isfinite(adv).all()
    assert adv.double().tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert adv[0].item() == pytest.approx(-0.83125 / ((0.83125**2 + 7 * 0.11875**2) / 7) ** 0.5, abs=1e-5)


def test_group_advantages_equal_groups_next_to_a_mixed_group_and_invalid_rows():
    # group 0: eight 0.95 and one invalid NaN row; group 1: 0.01 x 5; group 2: 0 and 1
    rewards = torch.tensor([0.95] * 8 + [float("nan")] + [0.01] * 5 + [0.0, 1.0], dtype=torch.float32)
    group = torch.tensor([0] * 9 + [1] * 5 + [2, 2])
    valid = torch.isfinite(rewards)
    adv = group_advantages(rewards, group, 3, valid, eps=1e-6)
    assert torch.equal(adv[:14], torch.zeros(14))
    s = 0.5**0.5  # std of {0, 1}
    assert adv[14:].tolist() == pytest.approx([-0.5 / (s + 1e-6), 0.5 / (s + 1e-6)])


def test_mentor_advantages_equal_control_rewards_are_exactly_zero():
    # 16 controls all 0.95 and 4 guided rows (0.95 -> 0 above baseline, 1.0 -> alpha * 0.05)
    rewards = torch.tensor([0.95] * 16 + [0.95, 1.0, 0.0, 0.95], dtype=torch.float32)
    control = torch.tensor([True] * 16 + [False] * 4)
    adv = mentor_advantages(
        rewards, torch.zeros(20, dtype=torch.long), control, 1, torch.ones(20, dtype=torch.bool), alpha=0.5
    )
    assert torch.equal(adv[:16], torch.zeros(16))
    assert adv[16].item() == 0.0 and adv[18].item() == 0.0 and adv[19].item() == 0.0
    assert adv[17].item() == pytest.approx(0.5 * 0.05, abs=1e-7)
