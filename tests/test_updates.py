"""Optimizer updates: the loss and gradient of one update do not depend on micro-batching or
data-parallel splitting; several updates per rollout batch through the Lightning Trainer."""

import copy
import functools

import lightning.pytorch as L
import pytest
import torch
from torch.utils.data import DataLoader

from mintrl.model.logprobs import token_logprobs
from mintrl.objective import GRPO, AdvantageRegression, InterventionGRPO, SupervisedNLL, step_totals
from mintrl.rollout.batch import RolloutBatch
from mintrl.training.module import PolicyModule, minibatch_rows


def _rollout_batch(model, n=8, seed=0, temperature=0.8):
    """8 rollouts of 2 prompts with different prompt and response lengths, an intervention token in
    some guided rows, and rollout-time log-probs a little off the current policy (ratios != 1)."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = [3, 4, 2, 5, 3, 3, 4, 2][:n]
    resp_lens = [5, 2, 7, 1, 4, 6, 3, 5][:n]
    width = max(p + r for p, r in zip(prompt_lens, resp_lens))
    ids = torch.zeros(n, width, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.long)
    resp = torch.zeros(n, width, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens)):
        ids[i, : p + r] = torch.randint(3, 128, (p + r,), generator=g)
        attn[i, : p + r] = 1
        resp[i, p : p + r] = True
    inter = torch.zeros_like(resp)
    for i in (2, 5, 7):
        inter[i, prompt_lens[i] + 1] = True
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, attn, resp, temperature)
    rollout_lp = (lp + 0.3 * torch.randn(lp.shape, generator=g)) * resp
    behaviour = torch.where(inter, torch.zeros_like(rollout_lp), rollout_lp)
    return RolloutBatch(
        input_ids=ids,
        attention_mask=attn,
        response_mask=resp,
        intervention_mask=inter,
        rollout_logprobs=rollout_lp,
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0][:n]),
        group_index=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1][:n]),
        is_control=torch.tensor([True, True, False, False] * 2)[:n],
        num_groups=2,
        finished=torch.tensor([True, True, True, False, True, True, True, True][:n]),
        behaviour_logprobs=behaviour,
        temperature=temperature,
        step=3,
    )


OBJECTIVES = {
    "grpo-token-mean-kl-k3": lambda: GRPO(kl_coef=0.1, kl_estimator="k3", mask_truncated=True),
    "dr-grpo-seq-mean-token-sum": lambda: GRPO(
        scale_std=False, aggregation="seq-mean-token-sum", kl_coef=0.05, kl_estimator="k2"
    ),
    "grpo-seq-mean-token-mean-k1": lambda: GRPO(
        aggregation="seq-mean-token-mean", kl_coef=0.05, kl_estimator="k1", dual_clip=3.0
    ),
    "mintrl-const": lambda: AdvantageRegression(beta=0.1, kappa=-0.2),
    "mintrl-proxy": lambda: AdvantageRegression(beta=0.1, kappa=None),
    "intervention-grpo": lambda: InterventionGRPO(importance="behaviour", semi_advantage="group"),
    "mentor": lambda: InterventionGRPO(importance="rollout", semi_advantage="mentor", clip_high=0.28, dual_clip=3.0),
    "sft": lambda: SupervisedNLL(),
}


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_update_is_invariant_to_micro_batches_and_data_parallel_ranks(tiny_model, name):
    objective = OBJECTIVES[name]()
    objective.setup(tiny_model)  # snapshots the KL reference
    with torch.no_grad():  # move the policy away from the reference so that KL terms are non-zero
        for p in tiny_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    module = PolicyModule(tiny_model, objective, functools.partial(torch.optim.SGD, lr=0.1))
    batch = _rollout_batch(tiny_model)
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
    batch = _rollout_batch(tiny_model, temperature=0.5)
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
    batch = _rollout_batch(tiny_model)
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


class _FixedBatches(L.LightningDataModule):
    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def train_dataloader(self):
        return DataLoader([self.batch] * 100, batch_size=None, collate_fn=lambda x: x)


@pytest.mark.parametrize("objective_name", ["grpo-token-mean-kl-k3", "mintrl-const"])
def test_several_updates_per_rollout_batch_through_the_trainer(tiny_model, tmp_path, objective_name):
    objective = OBJECTIVES[objective_name]()
    batch = _rollout_batch(tiny_model)
    anchor = batch.rollout_logprobs.clone()
    before = copy.deepcopy(tiny_model.state_dict())
    module = PolicyModule(
        tiny_model,
        objective,
        functools.partial(torch.optim.AdamW, lr=1e-3),
        epochs=2,
        minibatches=2,
        micro_batch_rows=3,
        max_grad_norm=0.5,
    )
    trainer = L.Trainer(
        max_steps=8,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=_FixedBatches(batch))
    assert trainer.global_step == 8  # optimizer updates
    assert trainer.fit_loop.epoch_loop.batch_progress.total.completed == 2  # rollout batches (2 x 2 updates each)
    assert len(module.history) == 2 and all("train/grad_norm" in h and "train/loss" in h for h in module.history)
    assert torch.equal(batch.rollout_logprobs, anchor), "the anchor stays pi_t from rollout time across updates"
    changed = [k for k, v in tiny_model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "weights must move"


class _RankBatches(L.LightningDataModule):
    """Rank r trains on rows [4r, 4r + 4) of the same 8-row batch."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def train_dataloader(self):
        rank = self.trainer.global_rank
        part = self.batch.select(torch.arange(4 * rank, 4 * rank + 4))
        return DataLoader([part] * 10, batch_size=None, collate_fn=lambda x: x)


class _SaveWeights(L.Callback):
    def __init__(self, path):
        self.path = path

    def on_train_end(self, trainer, module):
        if trainer.is_global_zero:
            torch.save({k: v.detach().clone() for k, v in module.policy.state_dict().items()}, self.path)


def test_real_ddp_update_equals_the_single_process_update(tiny_model, tmp_path):
    """Two gloo ranks with 4 rows each (different token counts) make the same SGD update as one
    process on all 8 rows: counts are all-reduced and the loss scaled by the world size."""
    batch = _rollout_batch(tiny_model)
    start = copy.deepcopy(tiny_model.state_dict())

    def module():
        model = copy.deepcopy(tiny_model)
        model.load_state_dict(start)
        return PolicyModule(
            model, GRPO(), functools.partial(torch.optim.SGD, lr=1.0), micro_batch_rows=3, max_grad_norm=None
        )

    single = module()
    trainer = L.Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(single, datamodule=_FixedBatches(batch))
    ddp = L.Trainer(
        max_steps=1,
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[_SaveWeights(tmp_path / "ddp.pt")],
    )
    ddp.fit(module(), datamodule=_RankBatches(batch))
    ddp_weights = torch.load(tmp_path / "ddp.pt")
    moved = 0
    for k, v in single.policy.state_dict().items():
        assert torch.allclose(ddp_weights[k], v, atol=1e-6), k
        moved += not torch.equal(v, start[k])
    assert moved > 0
