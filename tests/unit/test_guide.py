"""Provenance and guides (issue 22): the typed provenance tensor and its derived masks, guide tokens
in every objective, prefix cuts, reference solutions, LUFFY's policy shaping (hand values)."""

import functools
import math

import pytest
import torch
from update_helpers import OBJECTIVES, make_objective, rollout_batch

from mintrl.core.batch import Provenance, Rollout, RolloutBatch, collate_rollouts
from mintrl.data.solutions import arithmetic_solution, code_solution, reasoning_gym_solution
from mintrl.guide.base import failed_groups
from mintrl.guide.prefix import cosine_fraction, prefix_length
from mintrl.objective import GRPO, LUFFY, anchored_log_ratio, shaped_probability, step_totals
from mintrl.rollout.stats import guide_stats
from mintrl.training.module import PolicyModule

P, IV, G, E, N = (
    int(k)
    for k in (Provenance.POLICY, Provenance.INTERVENTION, Provenance.GUIDE, Provenance.ENVIRONMENT, Provenance.NONE)
)


def _mixed_rollout():
    r = Rollout(group=0, is_control=False, prompt_ids=[5, 6])
    r.append([10, 11], [-0.5, -0.6], intervention=False, guide=True, behaviour=[0.0, 0.0])  # guide prefix
    r.append([12], [-0.7], intervention=False)  # policy
    r.append([13], [-0.8], intervention=True, behaviour=[0.0])  # intervention
    r.observe([14])  # environment
    r.append([15], [-0.9], intervention=False)
    return r


def test_collated_provenance_is_one_typed_tensor_and_masks_derive_from_it():
    control = Rollout(group=0, is_control=True, prompt_ids=[5, 6, 7])
    control.append([20], [-0.1], intervention=False)
    batch = collate_rollouts([_mixed_rollout(), control], 1, pad_token_id=0, temperature=1.0)
    assert batch.provenance.dtype == torch.int8
    assert batch.provenance.tolist() == [[N, N, G, G, P, IV, E, P], [N, N, N, P, N, N, N, N]]
    assert batch.response_mask.tolist()[0] == [False, False, False, False, True, True, False, True]
    assert batch.guide_mask.tolist()[0] == [False, False, True, True, False, False, False, False]
    assert batch.policy_mask.tolist()[0] == [False, False, False, False, True, False, False, True]
    assert batch.scored_mask.tolist()[0] == [False, False, True, True, True, True, False, True]
    assert batch.environment_mask.tolist()[0] == [False] * 6 + [True, False]
    with pytest.raises(AttributeError, match="set batch.provenance"):
        batch.response_mask = torch.zeros_like(batch.response_mask)
    sub = batch.select(torch.tensor([1]))  # trailing padding cut: provenance sliced with the rows
    assert sub.provenance.tolist() == [[N, N, N, P]] and sub.response_mask.tolist() == [[False, False, False, True]]
    assert _mixed_rollout().guide_tokens == 2
    assert guide_stats([control], [_mixed_rollout()])["guide/token_fraction"] == pytest.approx(2 / 6)


def test_a_token_with_two_provenances_is_refused():
    r = Rollout(group=0, is_control=False, prompt_ids=[1])
    with pytest.raises(ValueError, match="either intervention or guide"):
        r.append([3], [-1.0], intervention=True, guide=True)
    r.append([3], [-1.0], intervention=True)
    r.guide = [True]  # set by hand: the batch refuses it, naming the row
    with pytest.raises(ValueError, match="row 0 .* two provenances"):
        collate_rollouts([r], 1, 0, 1.0)


def test_masks_given_to_the_constructor_become_provenance():
    resp = torch.tensor([[False, True, True, True]])
    inter = torch.tensor([[False, False, True, False]])
    env = torch.tensor([[False, False, False, True]])
    batch = RolloutBatch(
        input_ids=torch.ones(1, 4, dtype=torch.long),
        attention_mask=torch.ones(1, 4, dtype=torch.long),
        response_mask=resp & ~env,
        intervention_mask=inter,
        environment_mask=env,
        rollout_logprobs=torch.zeros(1, 4),
        rewards=torch.tensor([1.0]),
        group_index=torch.tensor([0]),
        is_control=torch.tensor([True]),
        num_groups=1,
    )
    assert batch.provenance.tolist() == [[N, P, IV, E]]


@pytest.mark.parametrize(("n", "p", "expected"), [(10, 0.3, 3), (7, 0.5, 3), (7, 1.0, 7), (7, 0.0, 0), (3, 0.99, 2)])
def test_prefix_length_is_the_floor_of_p_times_n(n, p, expected):
    assert prefix_length(n, p) == expected


def test_cosine_fraction_decays_to_zero():
    assert cosine_fraction(0.8, 0, 10) == pytest.approx(0.8)
    assert cosine_fraction(0.8, 5, 10) == pytest.approx(0.4)
    assert cosine_fraction(0.8, 10, 10) == pytest.approx(0.0) and cosine_fraction(0.8, 30, 10) == pytest.approx(0.0)


def test_failed_groups_are_those_without_a_control_success():
    rows = []
    for group, reward, control in [
        (0, 0.0, True),
        (0, 1.0, False),
        (1, 0.0, True),
        (1, 1.0, True),
        (2, math.nan, True),
    ]:
        r = Rollout(group=group, is_control=control, prompt_ids=[1])
        r.reward = reward
        rows.append(r)
    # group 0: its only success is a semi-on-policy row; group 2: no reward counts as a failure
    assert failed_groups(rows, 3, success_reward=1.0) == [True, False, True]


def test_worked_arithmetic_solutions_are_exact():
    assert arithmetic_solution("4 + 1 + 7", "12") == "4 + 1 = 5\n5 + 7 = 12\n<answer>12</answer>"
    assert arithmetic_solution("9 - 4 + 2", "7") == "9 - 4 = 5\n5 + 2 = 7\n<answer>7</answer>"
    assert arithmetic_solution("4 * 1 + 7", "11") is None  # precedence: not a left-to-right chain
    assert arithmetic_solution("4 + 1", "6") is None  # a wrong reference gets no solution
    entry = {"answer": "8", "metadata": {"expression": "1 + 5 + 2"}}
    assert reasoning_gym_solution(entry) == "1 + 5 = 6\n6 + 2 = 8\n<answer>8</answer>"
    assert reasoning_gym_solution({"answer": "3", "metadata": {"answer_cot": "1 and 2 make 3."}}) == (
        "1 and 2 make 3.\n<answer>3</answer>"
    )
    assert reasoning_gym_solution({"answer": "3", "metadata": {}}) is None
    assert code_solution("def f():\n    return 1\n") == "```python\ndef f():\n    return 1\n```"


def _luffy_batch():
    # one group: two on-policy rows (rewards 1, 0), one demonstration (reward 1, every token guide)
    prov = torch.tensor([[N, P, P], [N, P, P], [N, G, G]], dtype=torch.int8)
    rollout_lp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -1.5, -0.5], [0.0, -3.0, -3.0]])
    return RolloutBatch(
        input_ids=torch.ones(3, 3, dtype=torch.long),
        attention_mask=torch.ones(3, 3, dtype=torch.long),
        provenance=prov,
        rollout_logprobs=rollout_lp,
        rewards=torch.tensor([1.0, 0.0, 1.0]),
        group_index=torch.zeros(3, dtype=torch.long),
        is_control=torch.tensor([True, True, False]),
        num_groups=1,
    )


def test_shaping_and_its_gradient_by_hand():
    lp = torch.tensor([math.log(0.1), math.log(0.9), math.log(0.01)], requires_grad=True)
    f = shaped_probability(lp, gamma=0.1)
    assert f.tolist() == pytest.approx([0.5, 0.9, 0.01 / 0.11])
    f.sum().backward()
    # d f / d log p = p gamma / (p + gamma)^2 = f (1 - f)
    assert lp.grad.tolist() == pytest.approx([0.25, 0.09, 0.01 * 0.1 / 0.11**2])


def test_luffy_loss_and_gradient_by_hand():
    batch = _luffy_batch()
    objective = LUFFY(gamma=0.1, eps=0.0)
    objective.prepare(batch, logprob_fn=None)
    # group advantages over on- and off-policy members: rewards [1, 0, 1], mean 2/3, std sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert batch.extras["advantages"].tolist() == pytest.approx([(1 / 3) / s, (-2 / 3) / s, (1 / 3) / s])
    a0, a1, a2 = batch.extras["advantages"].tolist()
    assert batch.loss_mask.tolist() == [[False, True, True]] * 3
    # on-policy tokens at their rollout log-probs (ratio 1); demonstration tokens at p = 0.1 and 0.9
    logprobs = batch.rollout_logprobs.clone()
    logprobs[2, 1:] = torch.tensor([math.log(0.1), math.log(0.9)])
    logprobs.requires_grad_(True)
    out = objective(batch, logprobs, step_totals(batch.loss_mask))
    expected = (-2 * a0 - 2 * a1 - a2 * (0.5 + 0.9)) / 6  # token mean over 6 tokens
    assert out.loss.item() == pytest.approx(expected)
    out.loss.backward()
    # demonstration tokens: -A f (1 - f) / 6, also at p = 0.9 (ratio 9 against pi_t: no clipping)
    assert logprobs.grad[2, 1:].tolist() == pytest.approx([-a2 * 0.25 / 6, -a2 * 0.09 / 6])
    assert logprobs.grad[0, 1:].tolist() == pytest.approx([-a0 / 6] * 2)
    assert out.metrics["objective/offpolicy_prob"].item() == pytest.approx(0.5)
    assert out.metrics["objective/shaping"].item() == pytest.approx(0.7)


def test_grpo_leaves_the_demonstration_out_of_group_and_loss():
    batch = _luffy_batch()
    GRPO(eps=0.0).prepare(batch, logprob_fn=None)
    # the guide-only row has no token GRPO trains: no usable sample, out of the group's statistics
    assert batch.train_rows.tolist() == [True, True, False]
    assert batch.extras["advantages"].tolist() == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5), 0.0])
    assert not (batch.loss_mask & batch.guide_mask).any()


def test_regression_anchors_guide_tokens_like_interventions():
    # prompt, guide (-1.0 now), policy (-2.0 now, -2.5 at rollout), intervention (-3.0 now)
    prov = torch.tensor([[N, G, P, IV]], dtype=torch.int8)
    batch = RolloutBatch(
        input_ids=torch.ones(1, 4, dtype=torch.long),
        attention_mask=torch.ones(1, 4, dtype=torch.long),
        provenance=prov,
        rollout_logprobs=torch.tensor([[0.0, -4.0, -2.5, -4.0]]),
        rewards=torch.tensor([1.0]),
        group_index=torch.tensor([0]),
        is_control=torch.tensor([True]),
        num_groups=1,
    )
    logprobs = torch.tensor([[0.0, -1.0, -2.0, -3.0]])
    off = batch.intervention_mask | batch.guide_mask
    # (-1 + 0.2) + (-2 + 2.5) + (-3 + 0.2) = -0.8 + 0.5 - 2.8 = -3.1
    ratio = anchored_log_ratio(logprobs, batch.rollout_logprobs, batch.scored_mask, off, kappa=-0.2)
    assert ratio.item() == pytest.approx(-3.1)


GUIDE = {1: (0, 1), 4: (0,), 6: (1, 2)}  # (row, response offsets) turned into guide tokens (not interventions)
PROMPT_LENS = [3, 4, 2, 5, 3, 3, 4, 2]
TRAINS_GUIDE = {"mintrl-const", "mintrl-proxy", "sft", "luffy"}


def guide_batch(model):
    batch = rollout_batch(model)
    guide = torch.zeros_like(batch.response_mask)
    for row, offsets in GUIDE.items():
        for k in offsets:
            guide[row, PROMPT_LENS[row] + k] = True
    assert not (guide & batch.intervention_mask).any() and (guide & batch.response_mask).sum() == 5
    batch.provenance = batch.provenance.masked_fill(guide, int(Provenance.GUIDE))
    return batch


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_guide_tokens_enter_an_objective_only_when_it_says_so(tiny_model, name):
    objective = make_objective(name, tiny_model)
    objective.setup(tiny_model)
    assert objective.trains_guide_tokens == (name in TRAINS_GUIDE)
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    module = PolicyModule(tiny_model, objective, functools.partial(torch.optim.SGD, lr=0.1))
    batch = guide_batch(tiny_model)
    objective.prepare(batch, module.frozen_logprobs)
    guide = batch.guide_mask
    assert bool((batch.loss_mask & guide).any()) == objective.trains_guide_tokens
    totals = step_totals(batch.loss_mask)
    g = torch.Generator().manual_seed(1)
    logprobs = (batch.rollout_logprobs + 0.2 * torch.randn(guide.shape, generator=g)).requires_grad_(True)
    objective(batch, logprobs, totals).loss.backward()
    reached = bool(logprobs.grad[guide].abs().max() > 0)
    assert reached == objective.trains_guide_tokens  # a guide token is in the loss only where the objective says so
    if not objective.trains_guide_tokens:
        # nothing at a guide position moves the update: not its ratio, KL, entropy or a denominator
        tiny_model.zero_grad(set_to_none=True)
        loss, metrics = module.accumulate(batch, totals)
        grads = torch.cat([p.grad.flatten() for p in tiny_model.parameters()])
        batch.rollout_logprobs = batch.rollout_logprobs.masked_fill(guide, 7.0)
        batch.behaviour_logprobs = batch.behaviour_logprobs.masked_fill(guide, -9.0)
        batch.extras = {
            k: (v.masked_fill(guide, 5.0) if v.dim() == 2 and v.shape == guide.shape else v)
            for k, v in batch.extras.items()
        }
        tiny_model.zero_grad(set_to_none=True)
        loss2, metrics2 = module.accumulate(batch, totals)
        assert loss2.item() == loss.item() and metrics2 == metrics
        assert torch.equal(torch.cat([p.grad.flatten() for p in tiny_model.parameters()]), grads)
