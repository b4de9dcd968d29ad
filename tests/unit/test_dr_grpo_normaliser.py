"""Dr. GRPO's normaliser is a constant, ``rows of the update x max response length``: a dropped row (no
reward, no loss token) leaves the other rows' weight in the loss unchanged, and the configs that say
Dr. GRPO run it."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from mintrl.build.config import CONFIG_DIR
from mintrl.core.batch import RolloutBatch
from mintrl.objective.aggregation import aggregate, step_totals
from mintrl.objective.grpo import GRPO

NAN = float("nan")


def test_a_dropped_row_leaves_the_others_weight_unchanged():
    token_loss = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [5.0, 5.0, 5.0]])  # [3 rows, 3 tokens]
    all_rows = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
    dropped = all_rows.clone()
    dropped[2] = False  # the third rollout got no reward: none of its tokens is trained
    full = aggregate(token_loss, all_rows, "seq-mean-token-sum", step_totals(all_rows))
    without = aggregate(token_loss, dropped, "seq-mean-token-sum", step_totals(dropped))
    assert full.item() == (3.0 + 3.0 + 15.0) / 3
    assert without.item() == (3.0 + 3.0) / 3  # still / 3 rows, not / 2: rows 1 and 2 weigh what they did
    # the other modes keep their own denominators: tokens, and rows with a loss token
    assert aggregate(token_loss, dropped, "token-mean", step_totals(dropped)).item() == 6.0 / 3
    assert aggregate(token_loss, dropped, "seq-mean-token-mean", step_totals(dropped)).item() == (1.5 + 3.0) / 2


def test_the_token_sum_is_divided_by_the_maximum_length():
    token_loss = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    totals = step_totals(mask)
    assert aggregate(token_loss, mask, "seq-mean-token-sum", totals, token_sum_norm=4.0).item() == 6.0 / (2 * 4)
    # the other modes have no use for it
    assert aggregate(token_loss, mask, "token-mean", totals, token_sum_norm=4.0).item() == 6.0 / 3


def _batch(rewards: list[float]) -> RolloutBatch:
    """Two groups of two rows, 1 prompt token + up to 2 response tokens; rows 0 and 1: 2 and 1 tokens."""
    response = torch.tensor([[False, True, True], [False, True, False], [False, True, False], [False, True, False]])
    return RolloutBatch(
        input_ids=torch.tensor([[5, 6, 7], [5, 8, 0], [9, 6, 0], [9, 7, 0]]),
        attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0]]),
        rollout_logprobs=torch.where(response, -0.5, 0.0),
        rewards=torch.tensor(rewards),
        group_index=torch.tensor([0, 0, 1, 1]),
        is_control=torch.ones(4, dtype=torch.bool),
        num_groups=2,
        response_mask=response,
    )


def test_dr_grpo_row_weight_does_not_change_when_another_row_loses_its_reward():
    """Group 0 (rewards 1, 0; Dr. GRPO advantages +0.5, -0.5) trains the same whether group 1's first
    rollout has its reward or not: each token's loss is ``-A`` at ratio 1, over the constant
    ``4 rows x 4 tokens``: (-0.5 * 2 + 0.5 * 1) / 16 = -1/32; group 1 adds 0 (advantages +-0.5 on one
    token each, or a lone row: advantage 0)."""
    objective = GRPO(scale_std=False, aggregation="seq-mean-token-sum", token_sum_norm=4.0)
    grads = []
    for rewards in ([1.0, 0.0, 1.0, 0.0], [1.0, 0.0, NAN, 0.0]):
        batch = _batch(rewards)
        objective.prepare(batch, logprob_fn=None)
        logprobs = batch.rollout_logprobs.clone().requires_grad_(True)
        out = objective(batch, logprobs, step_totals(batch.loss_mask))
        assert out.loss.item() == -1.0 / 32
        out.loss.backward()
        grads.append(logprobs.grad)
    assert grads[0][:2].tolist() == [[0.0, -1.0 / 32, -1.0 / 32], [0.0, 1.0 / 32, 0.0]]
    assert torch.equal(grads[0][:2], grads[1][:2])  # rows 0 and 1: the same gradient
    assert grads[1][2].tolist() == [0.0, 0.0, 0.0]  # the dropped row trains nothing


def test_token_sum_norm_is_checked():
    with pytest.raises(ValueError, match="objective.token_sum_norm"):
        GRPO(token_sum_norm=0)


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def test_configs_run_what_they_say():
    # objective=dr_grpo: no std scaling, token sums over rows x rollout.max_response_tokens
    dr = instantiate(_compose("objective=dr_grpo").objective, context=None)
    assert (dr.scale_std, dr.aggregation, dr.token_sum_norm) == (False, "seq-mean-token-sum", 64)
    # objective=grpo: std scaling and DAPO's token-mean, GRPO paper's aggregation one override away
    grpo = instantiate(_compose("objective=grpo").objective, context=None)
    assert (grpo.scale_std, grpo.aggregation) == (True, "token-mean")
    # method=prefix_rft: the luffy objective's defaults (std-scaled, token-mean), as its comment says
    cpu = _compose("method=prefix_rft").objective
    assert (cpu._target_, cpu.scale_std, cpu.aggregation) == ("mintrl.objective.luffy.LUFFY", True, "token-mean")
    # experiment=paper/prefix_rft: Dr. GRPO's loss on the luffy objective's shaping
    paper = instantiate(_compose("experiment=paper/prefix_rft").objective, context=None)
    assert (paper.scale_std, paper.aggregation, paper.token_sum_norm) == (False, "seq-mean-token-sum", 16384)
    # LUFFY: std-scaled by default; its released script's grpo_use_std=False at paper scale
    assert _compose("method=luffy").objective.scale_std is True
    assert _compose("experiment=paper/luffy").objective.scale_std is False
