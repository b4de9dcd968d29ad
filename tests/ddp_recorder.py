"""A callback for tests/test_ddp.py: each rank saves the rollout batch it trained on and a few
weight tensors after training (importable by the DDP child processes through PYTHONPATH)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L
import torch

KEYS = (
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.15.mlp.down_proj.weight",
    "model.layers.29.input_layernorm.weight",
    "model.norm.weight",
)


class Recorder(L.Callback):
    def __init__(self, out: str):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        torch.save(batch, self.out / f"batch_rank{trainer.global_rank}_step{trainer.global_step}.pt")

    def on_train_end(self, trainer, module):
        state = module.policy.state_dict()
        torch.save(
            {"weights": {k: state[k].detach().clone() for k in KEYS}, "world_size": trainer.world_size},
            self.out / f"final_rank{trainer.global_rank}.pt",
        )
