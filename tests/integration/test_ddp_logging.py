"""What 2 DDP processes log (gloo, ``ddp_spawn``, a tiny model): a training step's loss, rewards
and rollout statistics of both ranks' rollouts together, equal to the single process on the union
of their batches, not rank 0's share (training/step_logging.py); a validation's response length
over both ranks' rows. A collective one rank never enters raises there after the strategy's
120 s timeout, with the traceback of the call that waited."""

from __future__ import annotations

import copy
import datetime
import functools
import json

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.loggers import Logger
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader
from update_helpers import rollout_batch

from mintrl.objective import GRPO
from mintrl.objective.aggregation import step_totals
from mintrl.training.module import PolicyModule, global_grad_norm


class _JsonLinesLogger(Logger):
    """Writes each ``log_metrics`` call (rank 0's, as Lightning's loggers) as a JSON line."""

    def __init__(self, path):
        super().__init__()
        self.path = str(path)

    @property
    def name(self):
        return "jsonl"

    @property
    def version(self):
        return 0

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs):
        pass

    @rank_zero_only
    def log_metrics(self, metrics, step=None):
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")


class _SaveHistory(L.Callback):
    def __init__(self, folder):
        self.folder = folder

    def on_train_end(self, trainer, module):
        torch.save(module.history, self.folder / f"history_rank{trainer.global_rank}.pt")


def _row_stats(part):
    """Rollout statistics of ``part`` as the rollout engine reports them: means of the control and
    semi-on-policy rewards (missing ones skipped) with their counts, and truncated rows (a count)."""
    scored = ~torch.isnan(part.rewards)
    control = part.rewards[part.is_control & scored]
    semi = part.rewards[~part.is_control & scored]
    stats = {
        "reward/control": float(control.mean()),
        "reward/semi": float(semi.mean()),
        "reward/gap": float(semi.mean() - control.mean()),
        "rollout/truncated": float((~part.finished).sum()),
    }
    return stats, {"reward/control": float(len(control)), "reward/semi": float(len(semi))}


class _RankBatches(L.LightningDataModule):
    """Rank r trains on rows [4r, 4r + 4) (prompt r) of the same 8-row batch, with its statistics."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def train_dataloader(self):
        rank = self.trainer.global_rank
        part = self.batch.select(torch.arange(4 * rank, 4 * rank + 4))
        part.stats, part.stat_weights = _row_stats(part)
        return DataLoader([part] * 10, batch_size=None, collate_fn=lambda x: x)


def test_ddp_logs_the_loss_rewards_and_statistics_of_both_ranks(tiny_model, tmp_path):
    batch = rollout_batch(tiny_model)
    batch.rewards[5] = float("nan")  # rank 1: one control rollout without a reward (1 control reward vs rank 0's 2)
    start = copy.deepcopy(tiny_model.state_dict())

    def module():
        model = copy.deepcopy(tiny_model)
        model.load_state_dict(start)
        return PolicyModule(model, GRPO(), functools.partial(torch.optim.SGD, lr=1.0), max_grad_norm=None)

    trainer = L.Trainer(
        max_steps=1,
        accelerator="cpu",
        devices=2,
        # a collective one rank never enters fails that rank within 2 minutes instead of hanging
        strategy=DDPStrategy(start_method="spawn", timeout=datetime.timedelta(seconds=120)),
        logger=_JsonLinesLogger(tmp_path / "logged.jsonl"),
        callbacks=[_SaveHistory(tmp_path)],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module(), datamodule=_RankBatches(batch))
    lines = [json.loads(line) for line in (tmp_path / "logged.jsonl").read_text().splitlines()]
    logged = {k: v for line in lines if line["step"] == 0 for k, v in line.items()}
    histories = [torch.load(tmp_path / f"history_rank{r}.pt") for r in (0, 1)]

    # the single process on the union of the two batches (each prompt's group lies on one rank)
    single = module()
    single.objective.setup(single.policy)
    single.objective.prepare(batch, single.frozen_logprobs)
    loss, metrics = single.accumulate(batch, step_totals(batch.loss_mask))
    norm = global_grad_norm(single.policy.parameters())

    # rewards by hand: control 1, 0 (rank 0) and 0 (rank 1); semi 1, 1 (rank 0) and 1, 0 (rank 1)
    expected = {
        "reward/control": 1 / 3,
        "reward/semi": 3 / 4,
        "reward/gap": 3 / 4 - 1 / 3,
        "rollout/truncated": 1.0,
        "train/loss": float(loss),
        "train/grad_norm": norm,
        "train/policy_entropy": metrics["train/policy_entropy"],
    }
    assert abs(float(loss)) > 1e-4, "a zero loss would make the comparison vacuous"
    close = functools.partial(pytest.approx, rel=1e-5, abs=1e-7)
    wrong = {k: (logged[k], v) for k, v in expected.items() if logged[k] != close(v)}
    assert not wrong, f"logged (rank 0) vs all ranks: {wrong}"
    for rank, history in enumerate(histories):  # every rank holds the all-rank values
        assert {k: history[0][k] for k in expected} == {k: close(v) for k, v in expected.items()}, rank


class _RankValBatches(L.LightningDataModule):
    """Validation: rank 0 the 8-row batch (responses of 5, 2, 7, 1, 4, 6, 3, 5 tokens), rank 1 its
    first 4 rows as a batch of its own (5, 2, 7, 1): ranks with different row counts."""

    def __init__(self, full, half):
        super().__init__()
        self.full, self.half = full, half

    def val_dataloader(self):
        part = [self.full] if self.trainer.global_rank == 0 else [self.half]
        return DataLoader(part, batch_size=None, collate_fn=lambda x: x)


def test_ddp_validation_logs_the_response_length_of_both_ranks(tiny_model, tmp_path):
    full = rollout_batch(tiny_model)
    half = full.select(torch.arange(4))
    module = PolicyModule(tiny_model, GRPO(), functools.partial(torch.optim.SGD, lr=1.0))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(start_method="spawn", timeout=datetime.timedelta(seconds=120)),
        logger=_JsonLinesLogger(tmp_path / "logged.jsonl"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.validate(module, datamodule=_RankValBatches(full, half))
    logged = {
        k: v for line in (tmp_path / "logged.jsonl").read_text().splitlines() for k, v in json.loads(line).items()
    }
    # all 12 rows: (33 + 15) / 12 tokens (rank 0 alone: 4.125; the mean of the ranks' means: 3.9375)
    assert logged["val/response_len"] == pytest.approx(48 / 12)
    assert logged["val/reward"] == pytest.approx((4 + 3) / 12)  # rewards 1,0,1,1,0,0,1,0 and 1,0,1,1
