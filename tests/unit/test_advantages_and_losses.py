"""Hand-computed advantages, aggregation, PPO-clip, KL estimators and importance-weight statistics."""

import math

import pytest
import torch

from mintrl.core.batch import Provenance, RolloutBatch
from mintrl.objective import (
    GRPO,
    AdvantageRegression,
    InterventionGRPO,
    StepTotals,
    aggregate,
    clipped_surrogate,
    group_advantages,
    importance_weight_stats,
    kl_penalty,
    mentor_advantages,
    step_totals,
    valid_rows,
)
from mintrl.objective.intervention_grpo import cosine_decay
from mintrl.reward import score_rewards

NAN = float("nan")


def test_group_advantages_hand_values_with_missing_reward_and_empty_response():
    # group 0: rewards 1, 0, NaN (missing), 1 and a row with reward 1 but no response tokens
    # valid rewards 1, 0, 1: mean 2/3, deviations 1/3, -2/3, 1/3, unbiased var (1/9 + 4/9 + 1/9) / 2 = 1/3
    rewards = torch.tensor([1.0, 0.0, NAN, 1.0, 1.0])
    response = torch.tensor([[True, True], [True, False], [True, True], [True, True], [False, False]])
    valid = valid_rows(rewards, response)
    assert valid.tolist() == [True, True, False, True, False]
    adv = group_advantages(rewards, torch.zeros(5, dtype=torch.long), 1, valid, eps=0.0)
    s = math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([1 / 3 / s, -2 / 3 / s, 0.0, 1 / 3 / s, 0.0])
    assert torch.isfinite(adv).all()
    dr = group_advantages(rewards, torch.zeros(5, dtype=torch.long), 1, valid, scale_std=False)
    assert dr.tolist() == pytest.approx([1 / 3, -2 / 3, 0.0, 1 / 3, 0.0])


def test_group_advantages_all_equal_and_singleton_groups_are_zero():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.7])
    group = torch.tensor([0, 0, 0, 1, 2])  # group 0 all equal; groups 1 and 2 singletons
    adv = group_advantages(rewards, group, 3, torch.ones(5, dtype=torch.bool))
    assert torch.equal(adv, torch.zeros(5))


def test_mentor_advantages_hand_values():
    # one group: controls 1, 0 (mean .5, std .7071), guided rollouts 1 and 0
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    control = torch.tensor([True, True, False, False])
    adv = mentor_advantages(
        rewards, torch.zeros(4, dtype=torch.long), control, 1, torch.ones(4, dtype=torch.bool), alpha=0.5, eps=0.0
    )
    assert adv.tolist() == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), 0.25, 0.0])
    assert cosine_decay(0, 120) == 1.0 and cosine_decay(60, 120) == pytest.approx(0.5) and cosine_decay(500, 120) == 0.0


def test_aggregation_modes_hand_values():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, NAN, 7.0]])  # NaN / values off the mask are ignored
    mask = torch.tensor([[True, True, True], [True, False, False]])
    totals = step_totals(mask)
    assert (totals.tokens.item(), totals.sequences.item()) == (4.0, 2.0)
    assert aggregate(loss, mask, "token-mean", totals).item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, "seq-mean-token-sum", totals).item() == pytest.approx((6 + 4) / 2)
    assert aggregate(loss, mask, "seq-mean-token-mean", totals).item() == pytest.approx((2 + 4) / 2)
    with pytest.raises(ValueError, match="objective.aggregation"):
        aggregate(loss, mask, "sum", totals)


def test_fully_masked_step_gives_zero_loss_and_zero_gradient():
    x = torch.ones(2, 3, requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        out = aggregate(x * 5, mask, mode, step_totals(mask))
        assert out.item() == 0.0
        out.backward()
        assert torch.equal(x.grad, torch.zeros(2, 3))
        x.grad = None


def test_clipped_surrogate_hand_values():
    old = torch.zeros(1, 5)
    ratios = torch.tensor([[1.5, 0.5, 0.5, 5.0, 1.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 2.0]])
    loss, clipped, ratio = clipped_surrogate(ratios.log(), old, adv, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    # 1.5, A=1: max(-1.5, -1.2) = -1.2 (clipped); 0.5, A=1: max(-.5, -.8) = -.5;
    # 0.5, A=-1: max(.5, .8) = .8 (clipped); 5, A=-1: max(5, 1.2) = 5 -> dual clip min(5, 3) = 3; 1, A=2: -2
    assert loss.tolist()[0] == pytest.approx([-1.2, -0.5, 0.8, 3.0, -2.0])
    assert clipped.tolist()[0] == [True, False, True, False, False]
    assert ratio.tolist()[0] == pytest.approx(ratios.tolist()[0])
    # clip-higher: the upper bound moves, the lower one does not
    loss_hi, _, _ = clipped_surrogate(ratios.log(), old, adv, clip_low=0.2, clip_high=0.28)
    assert loss_hi[0, 0].item() == pytest.approx(-1.28)


def test_kl_estimators_hand_values():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # d = ref - logp = -1
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-1) + 1 - 1)
    assert kl_penalty(ref, ref, "k3").item() == 0.0
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty(logp, ref, "k4")


def test_importance_weight_stats_hand_values():
    stats = importance_weight_stats(torch.tensor([0.0, math.log(3.0), 9.0]), torch.tensor([True, True, False]), "is")
    # w = 1, 3: mean 2, max 3, ESS = 16 / (2 * 10) = 0.8
    assert stats["is/mean"].item() == pytest.approx(2.0)
    assert stats["is/max"].item() == pytest.approx(3.0)
    assert stats["is/ess"].item() == pytest.approx(0.8)
    assert importance_weight_stats(torch.zeros(2), torch.zeros(2, dtype=torch.bool), "is") == {}


def _batch(rewards, finished=None, lengths=(3, 3, 3, 3), behaviour=None):
    n, width = len(rewards), 2 + max(lengths)
    response = torch.zeros(n, width, dtype=torch.bool)
    for i, t in enumerate(lengths):
        response[i, 2 : 2 + t] = True
    rollout_lp = torch.full((n, width), -1.0) * response
    return RolloutBatch(
        input_ids=torch.ones(n, width, dtype=torch.long),
        attention_mask=torch.ones(n, width, dtype=torch.long),
        response_mask=response,
        intervention_mask=torch.zeros(n, width, dtype=torch.bool),
        rollout_logprobs=rollout_lp,
        rewards=torch.tensor(rewards),
        group_index=torch.zeros(n, dtype=torch.long),
        is_control=torch.ones(n, dtype=torch.bool),
        num_groups=1,
        finished=torch.tensor(finished) if finished is not None else None,
        behaviour_logprobs=behaviour,
    )


def test_grpo_loss_at_rollout_policy_is_minus_mean_advantage_and_masks_truncated_rows():
    # rewards 1, 0, 1, 0: A = +-0.5 / std(=0.5774) ; row 3 truncated; lengths 3, 1, 2, 3
    batch = _batch([1.0, 0.0, 1.0, 0.0], finished=[True, True, True, False], lengths=(3, 1, 2, 3))
    objective = GRPO(mask_truncated=True, eps=0.0)
    stats = objective.prepare(batch, logprob_fn=None)
    mask = batch.loss_mask
    assert mask.sum(-1).tolist() == [3, 1, 2, 0]
    assert stats["objective/truncated_masked"] == 1.0
    a = 0.5 / math.sqrt(1 / 3)
    # at theta = pi_t every ratio is 1: token loss = -A; token-mean over the 6 unmasked tokens
    out = objective(batch, batch.rollout_logprobs.clone(), step_totals(mask))
    assert out.loss.item() == pytest.approx(-(3 * a - 1 * a + 2 * a) / 6)
    # without masking, the truncated row's 3 tokens join numerator and denominator
    batch2 = _batch([1.0, 0.0, 1.0, 0.0], finished=[True, True, True, False], lengths=(3, 1, 2, 3))
    plain = GRPO(eps=0.0)
    plain.prepare(batch2, logprob_fn=None)
    out2 = plain(batch2, batch2.rollout_logprobs.clone(), step_totals(batch2.loss_mask))
    assert out2.loss.item() == pytest.approx(-(3 * a - 1 * a + 2 * a - 3 * a) / 9)


def test_all_truncated_batch_trains_on_nothing():
    batch = _batch([1.0, 0.0, 1.0, 0.0], finished=[False] * 4)
    for objective in (GRPO(mask_truncated=True), AdvantageRegression(beta=0.1, mask_truncated=True)):
        objective.prepare(batch, logprob_fn=None)
        lp = batch.rollout_logprobs.clone().requires_grad_(True)
        out = objective(batch, lp, step_totals(batch.loss_mask))
        assert out.loss.item() == 0.0
        out.loss.backward()
        assert torch.equal(lp.grad, torch.zeros_like(lp))


def test_intervention_grpo_ratio_against_behaviour_policy():
    # rows 2, 3 are guided: one intervention token (position 3) by a deterministic writer, behaviour log-prob 0
    batch = _batch([1.0, 0.0, 1.0, 0.0])
    batch.provenance[2:, 3] = int(Provenance.INTERVENTION)
    batch.is_control = torch.tensor([True, True, False, False])
    behaviour = batch.rollout_logprobs.clone()
    behaviour[2:, 3] = 0.0
    batch.behaviour_logprobs = behaviour
    objective = InterventionGRPO(importance="behaviour", semi_advantage="group", eps=0.0)
    objective.prepare(batch, logprob_fn=None)
    out = objective(batch, batch.rollout_logprobs.clone(), step_totals(batch.loss_mask))
    # intervention tokens: w = pi_theta / mu = e^-1 each; guided rows' sequence weight is also e^-1
    assert out.metrics["is/token/mean"].item() == pytest.approx(math.exp(-1))
    assert out.metrics["is/token/ess"].item() == pytest.approx(1.0)
    assert out.metrics["is/seq/max"].item() == pytest.approx(math.exp(-1))
    # the ratio e^-1 < 1 - 0.2 is clipped for the negative-advantage guided row only
    a = 0.5 / math.sqrt(1 / 3)
    expected = (3 * -a + 3 * a + (2 * -a + -a * math.exp(-1)) + (2 * a + a * 0.8)) / 12
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)


def test_reward_with_wrong_length_or_bad_value_is_an_error():
    with pytest.raises(ValueError, match="returned 1 rewards for 2 responses"):
        score_rewards(lambda responses, items: [1.0], ["a", "b"], [None, None])
    with pytest.raises(ValueError, match="reward row 1"):
        score_rewards(lambda responses, items: [1.0, "x"], ["a", "b"], [None, None])
    values = score_rewards(lambda responses, items: [None, 0.5], ["a", "b"], [None, None])
    assert math.isnan(values[0]) and values[1] == 0.5


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(clip_low=1.0), "clip_low"),
        (dict(kl_coef=-1.0), "kl_coef"),
        (dict(kl_estimator="k9"), "kl_estimator"),
        (dict(aggregation="mean"), "aggregation"),
        (dict(dual_clip=0.5), "dual_clip"),
    ],
)
def test_grpo_rejects_bad_knobs(kwargs, field):
    with pytest.raises(ValueError, match=f"objective.{field}"):
        GRPO(**kwargs)


def test_step_totals_are_plain_counts():
    t = StepTotals(torch.tensor(0.0), torch.tensor(0.0))
    assert aggregate(torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.bool), "token-mean", t).item() == 0.0


def test_empty_responses_and_missing_rewards_stay_out_of_baselines_and_loss():
    # rewards 1, 1, 0, NaN, 0; row 1 has no response token, row 3 no reward: the group is rows 0, 2, 4
    batch = _batch([1.0, 1.0, 0.0, float("nan"), 0.0], lengths=(2, 0, 1, 3, 2))
    objective = GRPO(eps=0.0)
    objective.prepare(batch, logprob_fn=None)
    assert batch.loss_mask.sum(-1).tolist() == [2, 0, 1, 0, 2]
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased std of 1, 0, 0
    a_pos, a_neg = (2 / 3) / std, (-1 / 3) / std
    out = objective(batch, batch.rollout_logprobs.clone(), step_totals(batch.loss_mask))
    assert out.loss.item() == pytest.approx(-(2 * a_pos + 1 * a_neg + 2 * a_neg) / 5)
    assert math.isfinite(out.loss.item())


@pytest.mark.parametrize("text", ["", "   \n\t  "])
def test_empty_and_whitespace_responses_score_zero(text):
    import reasoning_gym

    from mintrl.reward import MathVerifyReward, ReasoningGymReward

    entry = reasoning_gym.create_dataset("basic_arithmetic", seed=1, size=1)[0]
    item = type("Item", (), {"entry": entry, "task": "basic_arithmetic", "reference": entry["answer"]})()
    assert ReasoningGymReward()([text], [item]) == [0.0]
    assert MathVerifyReward()([text], [item]) == [0.0]
