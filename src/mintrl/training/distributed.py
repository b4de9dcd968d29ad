"""Multi-device helpers: the fully sharded strategy of ``trainer=fsdp``.

Data parallelism itself is Lightning's (``trainer=ddp`` / ``trainer=fsdp``); what is ours:

- each rank generates rollouts for its own prompts (:class:`mintrl.data.datamodule.PromptStream`,
  ``use_distributed_sampler: false``) with its own sampler;
- losses are normalised by counts summed over ranks, so averaged gradients equal the
  single-process gradient on the union of the ranks' batches (:mod:`mintrl.objective.aggregation`,
  tested in tests/integration/test_ddp.py and test_fsdp.py);
- under FSDP, the policy is sharded with torch's FSDP2 (``fully_shard``) through Lightning's
  :class:`~lightning.pytorch.strategies.ModelParallelStrategy`: the LightningModule itself is not
  wrapped, so manual optimisation, several forwards before a backward and clipping by the sharded
  gradients' global norm work as on one device (Lightning's ``FSDPStrategy`` (FSDP1) wraps the whole
  module, refuses norm clipping and does not support manual optimisation);
- the samplers, the Hugging Face export and the vLLM sync read the full weights one tensor at a time
  (:func:`mintrl.sampler.weights.full_state_dict`).
"""

from __future__ import annotations

import os
import shutil
import types
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import register_fsdp_forward_method

from mintrl.model.heads import is_tied
from mintrl.model.logprobs import ROOT_UNIT_METHOD
from mintrl.model.lora import base_model
from mintrl.training.checkpointing import SHARDED_METADATA, fsync_file, put_in_place, temporary_path

RESHARD = (True, False)


def _is_block(module: torch.nn.Module, suffixes: tuple[str, ...]) -> bool:
    return type(module).__name__.endswith(suffixes)


def shard_units(policy: torch.nn.Module, suffixes: tuple[str, ...]) -> list[torch.nn.Module]:
    """The modules of ``policy`` that become FSDP units, innermost first (the root last).

    Every block whose class name ends with one of ``suffixes`` (``LlamaDecoderLayer``,
    ``Qwen3DecoderLayer``, ...); the input embedding and the LM head each as their own unit when
    their weights are not tied (a tied head is the embedding's tensor, which must stay in one unit:
    the root's); the policy itself as the root unit (norms, tied embedding, what is left).

    Raises:
        ValueError: no block matches ``suffixes`` (the field ``trainer.strategy.layer_class_suffixes``).
    """
    blocks = [m for m in policy.modules() if _is_block(m, suffixes)]
    if not blocks:
        names = sorted({type(m).__name__ for m in policy.modules()})[:12]
        raise ValueError(
            f"trainer.strategy.layer_class_suffixes={list(suffixes)} matches no block of the policy "
            f"(its module classes include {names})"
        )
    units = list(blocks)
    base = base_model(policy)
    embed, head = base.get_input_embeddings(), base.get_output_embeddings()
    if embed is not None and head is not None and not is_tied(base):
        units += [embed, head]
    return [*units, policy]


class FullyShardedStrategy(ModelParallelStrategy):
    """FSDP2 data parallelism over every device (``trainer=fsdp``): each rank holds ``1 / world``
    of every parameter, gradient and optimizer moment.

    The policy is sharded in :meth:`shard_policy`, which the LightningModule's ``configure_model``
    calls (units: :func:`shard_units`). Parameters stay in their loaded dtype (fp32 master weights
    for a full fine-tune); ``trainer.precision=bf16-mixed`` is Lightning's autocast around the
    forward, so gradients are reduced in fp32 and buffers (rotary ``inv_freq``) are never cast —
    FSDP2 does not touch buffers. Norm clipping (``module.max_grad_norm``) runs
    ``torch.nn.utils.clip_grad_norm_`` on the sharded gradients, which reduces the global norm over
    ranks.

    Args:
        layer_class_suffixes: a module becomes its own unit when its class name ends with one of these.
        reshard_after_forward: free each unit's gathered weights after its forward (True: ZeRO-3,
            least memory) or keep them until the backward (False: ZeRO-2-like, one all-gather less).
        state_dict_type: Lightning checkpoints: ``sharded`` (a folder, one file per rank) or ``full``
            (gathered on rank 0, one file). The Hugging Face export is always full.
        cpu_offload: keep the sharded parameters, gradients and optimizer state in host memory.

    Raises:
        ValueError: empty ``layer_class_suffixes``, ``state_dict_type`` not ``sharded`` / ``full``.
    """

    def __init__(
        self,
        layer_class_suffixes: tuple[str, ...] | list[str] = ("DecoderLayer",),
        reshard_after_forward: bool = True,
        state_dict_type: str = "sharded",
        cpu_offload: bool = False,
        **kwargs,
    ):
        suffixes = tuple(layer_class_suffixes)
        if not suffixes:
            raise ValueError("trainer.strategy.layer_class_suffixes must name at least one block class suffix")
        if state_dict_type not in ("sharded", "full"):
            raise ValueError(f"trainer.strategy.state_dict_type must be sharded or full, got {state_dict_type!r}")
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=state_dict_type == "sharded",
            **kwargs,
        )
        self.layer_class_suffixes = suffixes
        self.reshard_after_forward = bool(reshard_after_forward)
        self.cpu_offload = bool(cpu_offload)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None) -> None:
        """Write a checkpoint; a sharded one atomically: every rank writes its shards (and rank 0
        ``meta.pt``) into ``.<name>.tmp-<pid of rank 0>`` beside ``filepath``, then rank 0 renames it
        into place (:func:`mintrl.training.checkpointing.put_in_place`). A kill mid-save leaves the
        previous checkpoint and a temporary folder that resume ignores and the next save removes.
        A full checkpoint goes through the trainer's checkpoint IO (``AtomicCheckpointIO``).

        Raises:
            TypeError: ``storage_options`` given with a sharded checkpoint (as Lightning's).
        """
        if not self._save_distributed_checkpoint:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        target = Path(self.broadcast(str(filepath)))
        tmp = Path(self.broadcast(str(temporary_path(target, os.getpid()))))  # rank 0's name on every rank
        if self.is_global_zero:
            shutil.rmtree(tmp, ignore_errors=True)  # a killed run's of the same pid
            tmp.parent.mkdir(parents=True, exist_ok=True)
        self.barrier("sharded checkpoint: temporary folder")
        super().save_checkpoint(checkpoint, tmp, storage_options)  # shards on every rank, meta.pt on rank 0
        self.barrier("sharded checkpoint: every shard written")
        if self.is_global_zero:
            fsync_file(tmp / SHARDED_METADATA)  # the shards and .metadata are synced by the writer
            put_in_place(tmp, target)
        self.barrier("sharded checkpoint: in place")

    def setup_environment(self) -> None:
        """Processes and the device mesh: one data-parallel dimension over every rank."""
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def shard_policy(self, policy: torch.nn.Module) -> None:
        """``fully_shard`` every unit of ``policy`` (:func:`shard_units`) over the data-parallel
        mesh; a policy already sharded is left as it is (``configure_model`` may run again)."""
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard

        if isinstance(policy, FSDPModule):
            return
        mesh = self.device_mesh["data_parallel"]
        offload = CPUOffloadPolicy() if self.cpu_offload else None
        for unit in shard_units(policy, self.layer_class_suffixes):
            kwargs = {"offload_policy": offload} if offload is not None else {}
            fully_shard(unit, mesh=mesh, reshard_after_forward=self.reshard_after_forward, **kwargs)
        # the trainer's forward calls the body and the LM head (in blocks) itself, not policy.forward:
        # a registered forward method gathers the root unit's weights around it and its backward; an
        # untied head (its own unit) gets one too, so its blocks gather it once, not once per block
        base = base_model(policy)
        head = base.get_output_embeddings()
        for unit in (policy, head) if isinstance(head, FSDPModule) else (policy,):
            setattr(unit, ROOT_UNIT_METHOD, types.MethodType(_run_in_root_unit, unit))
            register_fsdp_forward_method(unit, ROOT_UNIT_METHOD)


def _run_in_root_unit(policy, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``: registered as an FSDP forward method of a sharded policy
    (:func:`mintrl.model.logprobs.in_root_unit`)."""
    return fn(*args, **kwargs)


def fsdp_strategy(
    layer_class_suffixes: tuple[str, ...] | list[str] = ("DecoderLayer",),
    reshard_after_forward: bool = True,
    state_dict_type: str = "sharded",
    cpu_offload: bool = False,
) -> FullyShardedStrategy:
    """The ``trainer=fsdp`` strategy (a :class:`FullyShardedStrategy`; arguments as there)."""
    return FullyShardedStrategy(
        layer_class_suffixes=layer_class_suffixes,
        reshard_after_forward=reshard_after_forward,
        state_dict_type=state_dict_type,
        cpu_offload=cpu_offload,
    )
