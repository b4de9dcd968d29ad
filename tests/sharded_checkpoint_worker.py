"""Run by tests/integration/test_sharded_checkpoints.py under ``torchrun --nproc_per_node 2`` (gloo,
CPU): a tiny Llama sharded by :class:`mintrl.training.distributed.FullyShardedStrategy` and a
:class:`mintrl.data.datamodule.RolloutDataModule` whose rollouts draw sampling noise from the global
generators, saved and resumed through the strategy's sharded checkpoint as Lightning does it.

``save <out>``: seed every rank alike (``seed_everything``, as a run starts), draw the noise of 2
rollout batches, save ``<out>/last.ckpt`` (weights A, step 2, the data module's state), draw the
noise of 2 more batches (the straight run's), write ``<out>/save_rank<r>.json`` and rank 0 the
gathered weights A to ``<out>/weights_a.pt``; then move the weights, save again and die with
``os._exit`` when the last file of that save (the shards' index) is about to be written.

``resume <out>``: a fresh policy with other weights and a fresh data module load ``last.ckpt``
through Lightning's loader (weights) and ``meta.pt`` (the data module), draw the noise of 2 batches,
save ``last.ckpt`` again (step 3), and write ``<out>/resume_rank<r>.json``.

Every collective times out after 120 s, so a hang fails; each rank's collectives are logged in
``<out>/collectives_<mode>`` (tests/hang_guard.py), which the test names when a phase fails.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as L
import torch
import torch.distributed as dist
from conftest import tiny_llama
from hang_guard import install
from lightning.fabric.plugins.environments import TorchElasticEnvironment
from lightning.fabric.strategies.model_parallel import _load_checkpoint
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh

from mintrl.data.datamodule import RolloutDataModule
from mintrl.sampler.weights import full_state_dict
from mintrl.training.distributed import FullyShardedStrategy

SEED = 7


class NoiseRollout:
    """A rollout engine whose ``generate`` returns 3 uniforms from the global torch generator (as the
    samplers' decoding draws) and whose state counts its calls and names the rank that made it."""

    def __init__(self, rank: int):
        self.rank, self.calls = rank, 0
        self.sampler = SimpleNamespace(prepare=lambda: None, release=lambda: None, close=lambda: None)

    def generate(self, batch, step: int):
        self.calls += 1
        return torch.rand(3).tolist()

    def state_dict(self) -> dict:
        return {"rank": self.rank, "calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.loaded = dict(state)
        self.calls = int(state["calls"])


class Holder(torch.nn.Module):
    """Stands in for the LightningModule: the policy under ``policy.*``."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.policy = policy


def strategy() -> FullyShardedStrategy:
    s = FullyShardedStrategy()
    s.cluster_environment = TorchElasticEnvironment()  # ranks from torchrun's RANK / WORLD_SIZE
    s._device_mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    return s


def data_module(rank: int) -> RolloutDataModule:
    dm = RolloutDataModule(prompts=None, rollout=NoiseRollout(rank), tokenizer=None, seed=SEED)
    dm.trainer = SimpleNamespace(global_rank=rank, world_size=2, training=True, global_step=0)
    return dm


def noise(dm: RolloutDataModule, batches: int) -> list[list[float]]:
    return [dm.on_before_batch_transfer([f"prompt {i}"], 0) for i in range(batches)]


def checkpoint(holder: Holder, dm: RolloutDataModule, step: int) -> dict:
    """What Lightning's ``dump_checkpoint`` hands the strategy (the parts this test needs)."""
    return {
        "state_dict": get_model_state_dict(holder),
        "optimizer_states": [],
        "global_step": step,
        type(dm).__qualname__: dm.state_dict(),
    }


def main(mode: str, out: Path) -> None:
    install(out / f"collectives_{mode}")  # each rank's collectives, named by the test if a phase fails
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    s = strategy()
    policy = tiny_llama(vocab=96)
    s.shard_policy(policy)
    holder = Holder(policy)
    dm = data_module(rank)
    target = out / "last.ckpt"
    found: dict = {"rank": rank}
    if mode == "save":
        L.seed_everything(0, verbose=False)  # every rank alike, as mintrl.build.run.run starts
        found["noise_before"] = noise(dm, 2)
        s.save_checkpoint(checkpoint(holder, dm, 2), target)
        found["noise_after"] = noise(dm, 2)  # the straight run's next 2 batches
        weights = dict(full_state_dict(policy))
        if rank == 0:
            torch.save(weights, out / "weights_a.pt")
        (out / f"save_rank{rank}.json").write_text(json.dumps(found))
        dist.barrier()
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(1.0)

        def die(self, metadata, results):  # the shards are written; their index would be next
            os._exit(9)

        FileSystemWriter.finish = die
        s.save_checkpoint(checkpoint(holder, dm, 4), target)
        raise SystemExit("the second save was not interrupted")
    with torch.no_grad():  # other weights than the checkpoint's, so that loading shows
        for p in policy.parameters():
            p.add_(0.5)
    L.seed_everything(0, verbose=False)
    meta = _load_checkpoint(target, {"state_dict": holder}, strict=True)
    weights = dict(full_state_dict(policy))
    saved = torch.load(out / "weights_a.pt", weights_only=True)
    found["weights_equal_a"] = sorted(weights) == sorted(saved) and all(
        torch.equal(weights[k], saved[k]) for k in saved
    )
    found["global_step"] = int(meta["global_step"])
    dm.load_state_dict(meta[type(dm).__qualname__])
    found["rollout_state"] = dm.rollout.loaded
    found["noise_after"] = noise(dm, 2)
    s.save_checkpoint(checkpoint(holder, dm, 3), target)
    (out / f"resume_rank{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
