"""A callback for tests/integration/test_ddp.py and test_fsdp.py: each rank saves the rollout batch
it trained on, and after training a few weight tensors (gathered in full under FSDP) and its
per-step scalars (``module.history``, the logged values) (importable by the
child processes through PYTHONPATH); with ``trainable=True`` it also saves every trainable parameter
at the start and the end of training (a LoRA policy's adapter, after DDP's initial broadcast from
rank 0); with ``gathered=True`` every weight as gathered at the start of training."""

from __future__ import annotations

import threading
from pathlib import Path

import lightning.pytorch as L
import torch

from mintrl.sampler.weights import full_state_dict

KEYS = (
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.15.mlp.down_proj.weight",
    "model.layers.29.input_layernorm.weight",
    "model.norm.weight",
)


def trainable_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Name -> detached copy of every parameter of ``module`` that requires a gradient."""
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}


class Recorder(L.Callback):
    def __init__(self, out: str, keys: list[str] | None = None, trainable: bool = False, gathered: bool = False):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.keys = tuple(keys) if keys is not None else KEYS
        self.trainable = trainable
        self.gathered = gathered

    def on_train_start(self, trainer, module):
        if self.gathered:  # a collective under FSDP: every rank gathers
            state = {k: v.clone() for k, v in full_state_dict(module.policy)}
            torch.save(state, self.out / f"gathered_rank{trainer.global_rank}.pt")
        if self.trainable:
            torch.save(trainable_state(module.policy), self.out / f"start_rank{trainer.global_rank}.pt")

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        torch.save(batch, self.out / f"batch_rank{trainer.global_rank}_step{trainer.global_step}.pt")

    def on_train_end(self, trainer, module):
        state = dict(full_state_dict(module.policy))  # a collective under FSDP
        final = {
            "weights": {k: state[k].detach().clone() for k in self.keys},
            "world_size": trainer.world_size,
            "history": list(module.history),  # the scalars of each training step as this rank holds them
        }
        if self.trainable:
            final["trainable"] = trainable_state(module.policy)
        torch.save(final, self.out / f"final_rank{trainer.global_rank}.pt")


class FailingProducer(L.Callback):
    """On rank ``rank`` only, the rollout producer thread raises ``ConnectionError`` when it starts
    the batch of weights version ``version`` (the engine's class is patched in that rank's process
    at the start of training; the trainer's thread and every other version generate as usual)."""

    def __init__(self, rank: int = 1, version: int = 1):
        self.rank, self.version = rank, version

    def on_train_start(self, trainer, module):
        if trainer.global_rank != self.rank:
            return
        engine_class = type(trainer.datamodule.rollout)
        original = engine_class.generate
        failing = self.version

        def generate(self, items, *args, step=0, **kwargs):
            if threading.current_thread().name == "rollout-producer" and step == failing:
                raise ConnectionError("the judge server went away")
            return original(self, items, *args, step=step, **kwargs)

        engine_class.generate = generate
