"""Several updates per rollout batch through the Lightning Trainer, and a real 2-process DDP update
equal to the single-process update."""

import copy
import dataclasses
import functools

import lightning.pytorch as L
import pytest
import torch
from torch.utils.data import DataLoader
from update_helpers import RepeatedBatch, cpu_trainer, make_objective, rollout_batch

from mintrl.model.logprobs import token_logprobs
from mintrl.objective import GRPO
from mintrl.training.module import PolicyModule
from mintrl.training.rollout_logprobs import sampler_mismatch


@pytest.mark.parametrize("objective_name", ["grpo-token-mean-kl-k3", "mintrl-const"])
def test_several_updates_per_rollout_batch_through_the_trainer(tiny_model, tmp_path, objective_name):
    objective = make_objective(objective_name, tiny_model)
    batch = rollout_batch(tiny_model)
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
    trainer = cpu_trainer(tmp_path, max_steps=8)
    trainer.fit(module, datamodule=RepeatedBatch(batch))
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


def test_real_ddp_update_equals_the_single_process_update(tiny_model, tmp_path, monkeypatch):
    """Two gloo ranks with 4 rows each (different token counts) make the same SGD update as one
    process on all 8 rows: counts are all-reduced and the loss scaled by the world size."""
    # a fresh rendezvous port: an earlier in-process Lightning run of this session may have left its
    # MASTER_PORT in the environment while that port is still held (EADDRINUSE)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    batch = rollout_batch(tiny_model)
    start = copy.deepcopy(tiny_model.state_dict())

    def module():
        model = copy.deepcopy(tiny_model)
        model.load_state_dict(start)
        return PolicyModule(
            model, GRPO(), functools.partial(torch.optim.SGD, lr=1.0), micro_batch_rows=3, max_grad_norm=None
        )

    single = module()
    trainer = cpu_trainer(tmp_path, max_steps=1)
    trainer.fit(single, datamodule=RepeatedBatch(batch))
    ddp = cpu_trainer(
        tmp_path, max_steps=1, devices=2, strategy="ddp_spawn", callbacks=[_SaveWeights(tmp_path / "ddp.pt")]
    )
    ddp.fit(module(), datamodule=_RankBatches(batch))
    ddp_weights = torch.load(tmp_path / "ddp.pt")
    moved = 0
    for k, v in single.policy.state_dict().items():
        assert torch.allclose(ddp_weights[k], v, atol=1e-6), k
        moved += not torch.equal(v, start[k])
    assert moved > 0


@pytest.mark.parametrize("epochs", [1, 2])  # 1: the update's own forward recomputes; 2: a no-grad pass first
def test_inexact_rollout_logprobs_are_recomputed_by_the_trainer(tiny_model, tmp_path, epochs):
    """A batch from a sampler whose log-probs are not the trainer's (``sampler_exact`` False: a bf16
    copy, vLLM) trains exactly as the same batch carrying the trainer's own log-probs: the anchor
    and ratio denominators are recomputed before the first update, and the mismatch removed is
    logged as the mean |delta| and the k3 KL over policy tokens."""
    noisy = rollout_batch(tiny_model)  # rollout log-probs = the policy's + N(0, 0.3) noise
    noisy.sampler_exact = False
    with torch.no_grad():
        exact_lp, _ = token_logprobs(
            tiny_model, noisy.input_ids, noisy.attention_mask, noisy.scored_mask, noisy.temperature
        )
    exact = dataclasses.replace(
        noisy,
        rollout_logprobs=torch.where(noisy.scored_mask, exact_lp, noisy.rollout_logprobs),
        behaviour_logprobs=torch.where(noisy.policy_mask, exact_lp, noisy.behaviour_logprobs),
        sampler_exact=True,
        stats={},
    )
    expected = sampler_mismatch(exact_lp, noisy.rollout_logprobs, noisy.policy_mask)
    assert expected["train/sampler_mismatch_abs"] > 0.1
    weights = {}
    for name, batch in (("noisy", noisy), ("exact", exact)):
        model = copy.deepcopy(tiny_model)
        module = PolicyModule(
            model,
            make_objective("grpo-token-mean-kl-k3", model),
            functools.partial(torch.optim.SGD, lr=0.5),
            epochs=epochs,
        )
        cpu_trainer(tmp_path, max_steps=epochs, precision="32-true").fit(module, datamodule=RepeatedBatch(batch))
        weights[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
        if name == "noisy":
            logged = module.history[0]
            assert logged["train/sampler_mismatch_abs"] == pytest.approx(
                expected["train/sampler_mismatch_abs"], rel=1e-5
            )
            assert logged["train/sampler_mismatch_kl"] == pytest.approx(expected["train/sampler_mismatch_kl"], rel=1e-5)
        else:
            assert "train/sampler_mismatch_abs" not in module.history[0]  # an exact batch is not recomputed
    assert not torch.equal(weights["noisy"], torch.cat([p.detach().flatten() for p in tiny_model.parameters()]))
    torch.testing.assert_close(weights["noisy"], weights["exact"], rtol=0, atol=1e-6)
