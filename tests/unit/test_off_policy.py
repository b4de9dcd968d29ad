"""Off-policy correction of the ratio-based objectives (mintrl.objective.off_policy): the weights by
hand, which tokens carry them, and ``tis`` / ``mis`` equal to ``none`` bit for bit when no proximal
recompute happened (staleness 0, an exact sampler)."""

import copy
import functools
import math

import pytest
import torch
from update_helpers import make_objective, rollout_batch

from mintrl.core.batch import Provenance, RolloutBatch
from mintrl.objective import GRPO, LUFFY, AdvantageRegression, InterventionGRPO, step_totals
from mintrl.objective.off_policy import (
    PROXIMAL_LOGPROBS,
    OffPolicyCorrection,
    behaviour_log_ratio,
    proximal_logprobs,
    sequence_ratio_mask,
    truncated_importance_weights,
)
from mintrl.training.module import PolicyModule

P, IV, G, N = int(Provenance.POLICY), int(Provenance.INTERVENTION), int(Provenance.GUIDE), int(Provenance.NONE)


def test_behaviour_log_ratio_is_proximal_minus_behaviour_on_the_mask_only():
    proximal = torch.tensor([[-1.0, -2.0, -0.5, -30.0]])
    behaviour = torch.tensor([[-1.5, -1.0, -4.0, -1.0]])
    mask = torch.tensor([[True, True, False, True]])
    out = behaviour_log_ratio(proximal, behaviour, mask)
    assert torch.equal(out, torch.tensor([[0.5, -1.0, 0.0, -20.0]]))  # -29 clamped to -MAX_LOG_RATIO


def test_truncated_importance_weights_by_hand():
    log_ratio = torch.tensor([[math.log(0.5), math.log(1.5), math.log(3.0), 0.0]])
    weights, truncated = truncated_importance_weights(log_ratio, cap=2.0)
    assert torch.allclose(weights, torch.tensor([[0.5, 1.5, 2.0, 1.0]]))
    assert weights[0, 3] == 1.0  # exp(0) is exactly 1: no weight where no shift
    assert truncated.tolist() == [[False, False, True, False]]


def test_sequence_ratio_mask_uses_the_product_over_the_row():
    # row 0: 2 x 1.2 = 2.4 <= 3 kept; row 1: 2 x 2 = 4 > 3 masked; row 2: 0.1 x 10 x 2 = 2 kept
    # (each token's ratio alone would exceed 3 in row 2's middle token: the row's product decides)
    log_ratio = torch.log(torch.tensor([[2.0, 1.2, 1.0], [2.0, 2.0, 1.0], [0.1, 10.0, 2.0]]))
    keep, seq = sequence_ratio_mask(log_ratio, threshold=3.0)
    assert keep.tolist() == [True, False, True]
    assert torch.allclose(seq.exp(), torch.tensor([2.4, 4.0, 2.0]))


def test_sequence_ratio_mask_compares_long_rows_in_log_space():
    log_ratio = torch.full((1, 200), 0.5)  # product exp(100): no overflow, masked
    keep, seq = sequence_ratio_mask(log_ratio, threshold=3.0)
    assert keep.tolist() == [False] and seq.item() == pytest.approx(100.0)


@pytest.mark.parametrize(
    "knobs, field",
    [
        ({"kind": "is"}, "objective.off_policy_correction"),
        ({"tis_cap": 0.0}, "objective.tis_cap"),
        ({"mis_threshold": 0.5}, "objective.mis_threshold"),
    ],
)
def test_off_policy_knobs_are_checked_with_the_field_name(knobs, field):
    with pytest.raises(ValueError, match=field):
        OffPolicyCorrection(**knobs)
    grpo = {"off_policy_correction" if k == "kind" else k: v for k, v in knobs.items()}
    with pytest.raises(ValueError, match=field):
        GRPO(**grpo)


def test_regression_takes_no_off_policy_correction():
    with pytest.raises(TypeError, match="off_policy_correction"):
        AdvantageRegression(off_policy_correction="tis")


def test_behaviour_importance_refuses_a_second_correction():
    with pytest.raises(ValueError, match="objective.off_policy_correction=tis needs objective.importance=rollout"):
        InterventionGRPO(importance="behaviour", off_policy_correction="tis")
    InterventionGRPO(importance="rollout", off_policy_correction="tis")  # MENTOR's ratios: the proximal policy's


def _hand_batch(proximal: torch.Tensor | None) -> RolloutBatch:
    """Two rows: row 0 prompt, policy, policy, intervention, guide; row 1 prompt, policy x 3, padding.
    Behaviour (rollout-time) log-probs -1 on every scored token."""
    provenance = torch.tensor([[N, P, P, IV, G], [N, P, P, P, N]], dtype=torch.int8)
    scored = provenance != N
    rollout = torch.where(scored, torch.full((2, 5), -1.0), torch.zeros(2, 5))
    batch = RolloutBatch(
        input_ids=torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 8, 0]]),
        attention_mask=torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]),
        rollout_logprobs=rollout,
        rewards=torch.tensor([1.0, 0.0]),
        group_index=torch.tensor([0, 0]),
        is_control=torch.tensor([True, True]),
        num_groups=1,
        provenance=provenance,
        behaviour_logprobs=torch.where(provenance == IV, torch.full((2, 5), -0.1), rollout),
    )
    batch.loss_mask = scored  # LUFFY-like: guide tokens in the loss too
    if proximal is not None:
        batch.extras[PROXIMAL_LOGPROBS] = proximal
    return batch


# proximal - behaviour per token: row 0 policy tokens log 3, log 0.5 (product 1.5); the intervention
# and guide tokens shift by log 5 but carry no weight; row 1 log 2, log 2, log 1 (product 4)
_PROXIMAL = torch.tensor(
    [
        [0.0, -1.0 + math.log(3.0), -1.0 + math.log(0.5), -1.0 + math.log(5.0), -1.0 + math.log(5.0)],
        [0.0, -1.0 + math.log(2.0), -1.0 + math.log(2.0), -1.0, 0.0],
    ]
)


def test_tis_weights_policy_tokens_only_and_logs_their_statistics():
    weights, metrics = OffPolicyCorrection("tis", tis_cap=2.0).weights(_hand_batch(_PROXIMAL))
    expected = torch.tensor([[1.0, 2.0, 0.5, 1.0, 1.0], [1.0, 2.0, 2.0, 1.0, 1.0]])
    assert torch.allclose(weights, expected)
    # untruncated weights of the 5 policy tokens: 3, 0.5, 2, 2, 1
    assert metrics["objective/is_weight_mean"].item() == pytest.approx(8.5 / 5)
    assert metrics["objective/is_weight_max"].item() == pytest.approx(3.0)
    assert metrics["objective/is_truncated_frac"].item() == pytest.approx(1 / 5)  # only 3 > 2 (2 is not truncated)
    assert "objective/is_masked_frac" not in metrics


def test_mis_drops_whole_rows_whose_sequence_ratio_exceeds_the_threshold():
    weights, metrics = OffPolicyCorrection("mis", mis_threshold=3.0).weights(_hand_batch(_PROXIMAL))
    # row 0: 3 x 0.5 = 1.5 kept (the intervention's and guide's x5 shifts are not the policy's);
    # row 1: 2 x 2 x 1 = 4 dropped, every token
    assert torch.equal(weights, torch.tensor([[1.0] * 5, [0.0] * 5]))
    assert metrics["objective/is_weight_mean"].item() == pytest.approx((1.5 + 4.0) / 2)
    assert metrics["objective/is_weight_max"].item() == pytest.approx(4.0)
    assert metrics["objective/is_masked_frac"].item() == pytest.approx(0.5)


@pytest.mark.parametrize("kind", ["tis", "mis"])
def test_without_a_proximal_recompute_every_weight_is_exactly_one(kind):
    batch = _hand_batch(None)
    assert proximal_logprobs(batch) is batch.rollout_logprobs
    weights, metrics = OffPolicyCorrection(kind).weights(batch)
    assert torch.equal(weights, torch.ones(2, 5))
    assert metrics["objective/is_weight_mean"].item() == 1.0 and metrics["objective/is_weight_max"].item() == 1.0
    assert OffPolicyCorrection("none").weights(batch) == (None, {})


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _objective(name: str, model, **knobs):
    if name == "opd":
        torch.manual_seed(0)  # the same perturbed teacher for every correction
        objective = make_objective("opd", model)
        objective.off_policy = OffPolicyCorrection(**knobs) if knobs else OffPolicyCorrection()
        return objective
    cls = {
        "grpo": functools.partial(GRPO, kl_coef=0.1),
        "dr-grpo": functools.partial(GRPO, scale_std=False, aggregation="seq-mean-token-sum", token_sum_norm=8.0),
        "luffy": LUFFY,
    }[name]
    renamed = {"off_policy_correction" if k == "kind" else k: v for k, v in knobs.items()}
    return cls(**renamed)


@pytest.mark.parametrize("name", ["grpo", "dr-grpo", "luffy", "opd"])
@pytest.mark.parametrize("kind", ["tis", "mis"])
def test_correction_without_a_proximal_recompute_is_none_bit_for_bit(tiny_model, name, kind):
    """Staleness 0 with an exact sampler: no proximal recompute, ``pi_prox = mu``, and ``tis`` /
    ``mis`` give ``none``'s loss and gradient to the last bit (micro-batches of 3 rows)."""
    results = {}
    batch0 = rollout_batch(tiny_model)
    for correction in ("none", kind):
        model = copy.deepcopy(tiny_model)
        objective = _objective(name, model, **({} if correction == "none" else {"kind": correction}))
        objective.setup(model)
        module = PolicyModule(model, objective, functools.partial(torch.optim.SGD, lr=0.1), micro_batch_rows=3)
        batch = batch0.to("cpu")  # a copy: prepare writes its own extras and masks
        objective.prepare(batch, module.frozen_logprobs)
        loss, metrics = module.accumulate(batch, step_totals(batch.loss_mask))
        results[correction] = (loss, _grads(model), metrics)
    (loss_none, grad_none, _), (loss_kind, grad_kind, metrics) = results["none"], results[kind]
    assert grad_none.abs().sum() > 0
    assert torch.equal(loss_none, loss_kind) and torch.equal(grad_none, grad_kind)
    assert metrics["objective/is_weight_max"] == 1.0


def test_an_updates_largest_importance_weight_is_the_largest_of_its_micro_batches(tiny_model):
    """``objective/is_weight_max`` of an update over micro-batches of 3 rows is the largest token
    weight of all of them (4, in the third), not the mean of their maxima ((1 + 1 + 4) / 3); the mean
    weight is the mean of the micro-batches' means."""
    batch = rollout_batch(tiny_model)  # 8 rows; row 6: 3 policy tokens, row 7: 4 policy tokens and 1 intervention
    objective = GRPO(off_policy_correction="tis", tis_cap=2.0)
    objective.setup(tiny_model)
    module = PolicyModule(tiny_model, objective, functools.partial(torch.optim.SGD, lr=0.1), micro_batch_rows=3)
    objective.prepare(batch, module.frozen_logprobs)
    shift = torch.zeros_like(batch.rollout_logprobs)  # [8, L] proximal - behaviour
    shift[6] = math.log(4.0)
    batch.extras[PROXIMAL_LOGPROBS] = batch.rollout_logprobs + shift * batch.policy_mask
    _, metrics = module.accumulate(batch, step_totals(batch.loss_mask))
    assert metrics["objective/is_weight_max"] == pytest.approx(4.0)
    third = (3 * 4.0 + 4 * 1.0) / 7  # rows 6 and 7: 7 policy tokens
    assert metrics["objective/is_weight_mean"] == pytest.approx((1.0 + 1.0 + third) / 3)
    assert metrics["objective/is_truncated_frac"] == pytest.approx((0.0 + 0.0 + 3 / 7) / 3)
