"""Optimizer updates on a tiny model: the loss and gradient of one update do not depend on
micro-batching or data-parallel splitting (every objective, OPD included); temperature in the training
log-probs; gradient checkpointing; minibatch partitions."""

import copy
import functools

import pytest
import torch
from update_helpers import OBJECTIVES, make_objective, rollout_batch

from mintrl.objective import SupervisedNLL, step_totals
from mintrl.training.module import PolicyModule, minibatch_rows


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_update_is_invariant_to_micro_batches_and_data_parallel_ranks(tiny_model, name):
    objective = make_objective(name, tiny_model)
    objective.setup(tiny_model)  # snapshots the KL reference
    with torch.no_grad():  # move the policy away from the reference so that KL terms are non-zero
        for p in tiny_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    module = PolicyModule(tiny_model, objective, functools.partial(torch.optim.SGD, lr=0.1))
    batch = rollout_batch(tiny_model)
    objective.prepare(batch, module.frozen_logprobs)
    totals = step_totals(batch.loss_mask)
    results = {}
    for rows in (8, 4, 1):  # 1 x 8, 2 x 4, 8 x 1
        module.micro_batch_rows = rows
        tiny_model.zero_grad(set_to_none=True)
        loss, _ = module.accumulate(batch, totals)
        results[rows] = (loss.item(), _grads(tiny_model))
    # two data-parallel ranks of 4 rows: global counts, loss x world size, gradients averaged (DDP)
    module.micro_batch_rows = 2
    rank_grads, rank_losses = [], []
    for rank_rows in (torch.arange(0, 4), torch.arange(4, 8)):
        tiny_model.zero_grad(set_to_none=True)
        loss, _ = module.accumulate(batch.select(rank_rows), totals, world_size=2)
        rank_losses.append(loss.item())
        rank_grads.append(_grads(tiny_model) / 2)
    results["ddp"] = (sum(rank_losses), rank_grads[0] + rank_grads[1])
    ref_loss, ref_grad = results[8]
    assert ref_grad.abs().sum() > 0, "the update must have a gradient for the comparison to mean anything"
    for key, (loss, grad) in results.items():
        assert loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7), key
        assert torch.allclose(grad, ref_grad, rtol=1e-4, atol=1e-7), f"{key}: max diff {(grad - ref_grad).abs().max()}"


def test_training_logprobs_use_the_sampling_temperature(tiny_model):
    # SFT loss = mean NLL of log_softmax(logits / T): must change with the batch's temperature
    batch = rollout_batch(tiny_model, temperature=0.5)
    objective = SupervisedNLL()
    module = PolicyModule(tiny_model, objective, functools.partial(torch.optim.SGD, lr=0.1))
    objective.prepare(batch, module.frozen_logprobs)
    with torch.no_grad():
        loss, _ = module.accumulate(batch, step_totals(batch.loss_mask), backward=lambda loss: None)
        logits = tiny_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
        logp = torch.log_softmax(logits[:, :-1] / 0.5, -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        mask = batch.response_mask[:, 1:]
        expected = -(logp * mask).sum() / mask.sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_gradient_checkpointing_recomputes_layers_and_keeps_the_gradient(tiny_model):
    objective = OBJECTIVES["mintrl-const"]()
    batch = rollout_batch(tiny_model)
    reference = copy.deepcopy(tiny_model)
    results = {}
    for name, model, checkpointing in (("plain", reference, False), ("checkpointed", tiny_model, True)):
        module = PolicyModule(
            model, objective, functools.partial(torch.optim.SGD, lr=0.1), gradient_checkpointing=checkpointing
        )
        prepared = batch
        objective.prepare(prepared, module.frozen_logprobs)
        calls = []
        hooks = [layer.mlp.register_forward_pre_hook(lambda *a: calls.append(1)) for layer in model.model.layers]
        model.zero_grad(set_to_none=True)
        loss, _ = module.accumulate(prepared, step_totals(prepared.loss_mask))
        for h in hooks:
            h.remove()
        results[name] = (loss.item(), _grads(model), len(calls))
    # 2 decoder layers: one MLP call each, plus one recomputation each in the backward when checkpointed
    # (a pre-hook: torch stops a recomputation early, before forward hooks of its last module fire)
    assert results["plain"][2] == 2 and results["checkpointed"][2] == 4
    assert results["checkpointed"][0] == pytest.approx(results["plain"][0], rel=1e-6)
    assert results["plain"][1].abs().sum() > 0
    assert torch.allclose(results["checkpointed"][1], results["plain"][1], rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="module.gradient_checkpointing=true, but Linear"):
        PolicyModule(
            torch.nn.Linear(2, 2), objective, functools.partial(torch.optim.SGD, lr=0.1), gradient_checkpointing=True
        )


def test_minibatch_rows_partition_the_batch():
    parts = minibatch_rows(10, 3, torch.Generator().manual_seed(0))
    assert sorted(torch.cat(parts).tolist()) == list(range(10)) and [len(p) for p in parts] == [4, 3, 3]
    assert [p.tolist() for p in minibatch_rows(4, 2, None)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="module.minibatches=5"):
        minibatch_rows(4, 5, None)
