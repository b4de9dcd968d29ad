"""Hand-computed values of the MInTRL objective (eqs. 7, 10, 11)."""

import math

import pytest
import torch

from mintrl.core.batch import RolloutBatch
from mintrl.objective import (
    AdvantageRegression,
    anchor_logprobs,
    anchored_log_ratio,
    control_advantages,
    control_baseline,
    regression_loss,
)
from mintrl.objective.aggregation import step_totals


def test_control_baseline_uses_only_control_rollouts():
    # group 0: control rewards 1, 0 (mean 0.5); semi rewards 1, 1 must not count
    # group 1: control rewards 0, 0, 1 (mean 1/3); semi 0
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    control = torch.tensor([True, True, False, False, True, True, True, False])
    baseline, defined = control_baseline(rewards, group, control, 2)
    assert torch.allclose(baseline, torch.tensor([0.5, 1 / 3])) and defined.all()
    adv, signal = control_advantages(rewards, group, control, 2)
    assert signal.all()
    expected = torch.tensor([0.5, -0.5, 0.5, 0.5, -1 / 3, -1 / 3, 2 / 3, -1 / 3])
    assert torch.allclose(adv, expected)


def test_all_equal_group_has_zero_advantage_not_nan():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    control = torch.tensor([True, True, False, True, True, False])
    adv, _ = control_advantages(rewards, group, control, 2)
    assert torch.equal(adv, torch.zeros(6))
    assert not torch.isnan(adv).any()


def test_group_without_valid_control_gets_no_signal():
    # group 1 has no control rollout; group 0's only control has a missing (NaN) reward -> no baseline either
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0])
    group = torch.tensor([0, 1, 2, 2])
    control = torch.tensor([True, False, True, False])
    adv, signal = control_advantages(rewards, group, control, 3)
    assert signal.tolist() == [True, False, False, False]
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0] and torch.isfinite(adv).all()


def _two_sequences():
    # 2 sequences, L = 5; positions 0-1 are prompt, 2-4 response (row 1 has padding at 4).
    logprobs = torch.tensor([[0.0, 0.0, -1.0, -2.0, -0.5], [0.0, 0.0, -0.3, -4.0, 0.0]])
    rollout = torch.tensor([[0.0, 0.0, -1.5, -2.5, -0.5], [0.0, 0.0, -0.2, -6.0, 0.0]])
    response = torch.tensor([[False, False, True, True, True], [False, False, True, True, False]])
    intervention = torch.tensor([[False, False, False, True, False], [False, False, False, True, False]])
    return logprobs, rollout, response, intervention


def test_anchor_const_replaces_only_intervention_tokens():
    _, rollout, _, intervention = _two_sequences()
    anchor = anchor_logprobs(rollout, intervention, kappa=-0.2)
    assert anchor[0].tolist() == pytest.approx([0.0, 0.0, -1.5, -0.2, -0.5])
    assert anchor[1].tolist() == pytest.approx([0.0, 0.0, -0.2, -0.2, 0.0])
    assert torch.equal(anchor_logprobs(rollout, intervention, kappa=None), rollout)


def test_anchored_log_ratio_const_and_proxy():
    logprobs, rollout, response, intervention = _two_sequences()
    # Const: row 0 = (-1 + 1.5) + (-2 + 0.2) + (-0.5 + 0.5) = -1.3 ; row 1 = (-0.3 + 0.2) + (-4 + 0.2) = -3.9
    const = anchored_log_ratio(logprobs, rollout, response, intervention, kappa=-0.2)
    assert const.tolist() == pytest.approx([-1.3, -3.9])
    # Proxy: row 0 = 0.5 + 0.5 + 0 = 1.0 ; row 1 = -0.1 + 2.0 = 1.9
    proxy = anchored_log_ratio(logprobs, rollout, response, intervention, kappa=None)
    assert proxy.tolist() == pytest.approx([1.0, 1.9])


def test_regression_loss_value_and_gradient_direction():
    log_ratio = torch.tensor([0.0, 2.0, -1.0], requires_grad=True)
    adv = torch.tensor([0.5, -0.5, 0.0])
    beta = 0.1
    loss = regression_loss(log_ratio, adv, beta)
    # ((0 - 0.5)^2 + (0.2 + 0.5)^2 + (-0.1 - 0)^2) / 3 = (0.25 + 0.49 + 0.01) / 3 = 0.25
    assert loss.item() == pytest.approx(0.25)
    loss.backward()
    # d/dlr_i = 2 beta (beta lr_i - A_i) / N
    expected = [2 * 0.1 * (-0.5) / 3, 2 * 0.1 * 0.7 / 3, 2 * 0.1 * (-0.1) / 3]
    assert log_ratio.grad.tolist() == pytest.approx(expected)
    # gradient descent raises the likelihood of the positive-advantage rollout, lowers the negative one
    assert log_ratio.grad[0] < 0 < log_ratio.grad[1]


def test_objective_component_on_a_batch():
    logprobs, rollout, response, intervention = _two_sequences()
    batch = RolloutBatch(
        input_ids=torch.zeros(2, 5, dtype=torch.long),
        attention_mask=torch.ones(2, 5, dtype=torch.long),
        response_mask=response,
        intervention_mask=intervention,
        rollout_logprobs=rollout,
        rewards=torch.tensor([1.0, 0.0]),
        group_index=torch.tensor([0, 0]),
        is_control=torch.tensor([True, False]),
        num_groups=1,
    )
    objective = AdvantageRegression(beta=0.5, kappa=-0.2)
    objective.prepare(batch, logprob_fn=None)
    out = objective(batch, logprobs, step_totals(batch.loss_mask))
    # A = [0, -1]; log-ratios [-1.3, -3.9]; loss = ((-0.65)^2 + (-1.95 + 1)^2) / 2
    assert out.loss.item() == pytest.approx((0.65**2 + 0.95**2) / 2)
    assert math.isfinite(out.metrics["objective/log_ratio"].item())


@pytest.mark.parametrize("beta,kappa,field", [(0.0, -0.2, "beta"), (0.1, 0.3, "kappa")])
def test_objective_rejects_bad_knobs(beta, kappa, field):
    with pytest.raises(ValueError, match=f"objective.{field}"):
        AdvantageRegression(beta=beta, kappa=kappa)
