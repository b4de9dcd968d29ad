"""Environment tokens of multi-turn episodes are out of every objective (issue 20): out of the loss,
the KL, the importance ratios, the entropy and every denominator, for each objective of the update
tests. An episode batch is the update tests' batch with some response positions turned into
environment tokens (observation turns between actions)."""

import functools

import pytest
import torch
from update_helpers import OBJECTIVES, make_objective, rollout_batch

from mintrl.core.batch import Provenance
from mintrl.objective import anchored_log_ratio, step_totals
from mintrl.training.module import PolicyModule

# (row, response offsets) that are environment tokens; none is an intervention token (rows 2, 5, 7
# have theirs at offset 1) and each row keeps agent tokens before and after them
ENV = {0: (2,), 2: (3, 4), 5: (2, 3), 7: (3,)}
PROMPT_LENS = [3, 4, 2, 5, 3, 3, 4, 2]


def episode_batch(model):
    batch = rollout_batch(model)
    env = torch.zeros_like(batch.response_mask)  # [N, L]
    for row, offsets in ENV.items():
        for k in offsets:
            env[row, PROMPT_LENS[row] + k] = True
    assert not (env & batch.intervention_mask).any() and (env & batch.response_mask).sum() == 6
    batch.provenance = batch.provenance.masked_fill(env, int(Provenance.ENVIRONMENT))
    batch.rollout_logprobs = batch.rollout_logprobs.masked_fill(env, 0.0)
    batch.behaviour_logprobs = batch.behaviour_logprobs.masked_fill(env, 0.0)
    return batch


def _setup(tiny_model, name):
    objective = make_objective(name, tiny_model)
    objective.setup(tiny_model)
    with torch.no_grad():  # away from the reference: KL terms non-zero
        for p in tiny_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    module = PolicyModule(tiny_model, objective, functools.partial(torch.optim.SGD, lr=0.1))
    batch = episode_batch(tiny_model)
    objective.prepare(batch, module.frozen_logprobs)
    return objective, module, batch


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_environment_tokens_get_no_gradient_and_no_count(tiny_model, name):
    objective, _, batch = _setup(tiny_model, name)
    env = batch.environment_mask
    assert not (batch.loss_mask & env).any()
    totals = step_totals(batch.loss_mask)
    # 33 response tokens in the update tests' batch, 6 of them now environment tokens
    rows = batch.train_rows
    assert totals.tokens.item() == int((batch.response_mask & rows[:, None]).sum())
    assert int(batch.response_mask.sum()) == 33 - 6
    g = torch.Generator().manual_seed(1)
    logprobs = (batch.rollout_logprobs + 0.2 * torch.randn(env.shape, generator=g)).requires_grad_(True)  # [N, L]
    out = objective(batch, logprobs, totals)
    out.loss.backward()
    assert logprobs.grad[env].abs().max() == 0  # no term of the loss reads an environment position
    assert logprobs.grad[batch.loss_mask].abs().sum() > 0


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_update_ignores_whatever_sits_at_environment_positions(tiny_model, name):
    objective, module, batch = _setup(tiny_model, name)
    totals = step_totals(batch.loss_mask)
    tiny_model.zero_grad(set_to_none=True)
    loss, metrics = module.accumulate(batch, totals)
    grads = torch.cat([p.grad.flatten() for p in tiny_model.parameters()])
    env = batch.environment_mask
    # garbage in every per-token field at environment positions: rollout and behaviour log-probs,
    # and the objective's own [N, L] extras (reference / teacher log-probs)
    batch.rollout_logprobs = batch.rollout_logprobs.masked_fill(env, 7.0)
    batch.behaviour_logprobs = batch.behaviour_logprobs.masked_fill(env, -9.0)
    batch.extras = {
        k: (v.masked_fill(env, 5.0) if v.dim() == 2 and v.shape == env.shape else v) for k, v in batch.extras.items()
    }
    tiny_model.zero_grad(set_to_none=True)
    loss2, metrics2 = module.accumulate(batch, totals)
    grads2 = torch.cat([p.grad.flatten() for p in tiny_model.parameters()])
    assert loss2.item() == loss.item()
    assert torch.equal(grads2, grads)
    assert metrics2 == metrics  # entropy, sampler gap, KL, ratios: the same numbers


def test_anchored_log_ratio_sums_only_agent_tokens():
    # one episode row: prompt (0-1), action (2), observation (3-4, environment), action (5, intervention)
    logprobs = torch.tensor([[0.0, 0.0, -1.0, -3.0, -3.0, -2.0]])
    rollout = torch.tensor([[0.0, 0.0, -1.5, 0.0, 0.0, -2.5]])
    agent = torch.tensor([[False, False, True, False, False, True]])
    intervention = torch.tensor([[False, False, False, False, False, True]])
    # (-1 + 1.5) + (-2 - (-0.2)) = 0.5 - 1.8 = -1.3; the observation's -6 nats never enter
    assert anchored_log_ratio(logprobs, rollout, agent, intervention, kappa=-0.2).item() == pytest.approx(-1.3)
