"""Multi-device helpers: the FSDP strategy for ``trainer=fsdp``.

Data parallelism itself is Lightning's (``trainer=ddp`` / ``trainer=fsdp``); what is ours:

- each rank generates rollouts for its own prompts (:class:`mintrl.data.datamodule.PromptStream`,
  ``use_distributed_sampler: false``) with its own colocated sampler;
- losses are normalised by counts summed over ranks, so averaged gradients equal the
  single-process gradient on the union of the ranks' batches (:mod:`mintrl.objective.aggregation`,
  tested in tests/test_ddp.py);
- under FSDP, the vLLM weight sync and the Hugging Face export gather the full weights
  (:func:`mintrl.sampler.weights.full_state_dict`).
"""

from __future__ import annotations

import functools

import torch
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy


def _is_decoder_layer(module: torch.nn.Module, suffixes: tuple[str, ...]) -> bool:
    return type(module).__name__.endswith(suffixes)


def fsdp_strategy(
    layer_class_suffixes: tuple[str, ...] | list[str] = ("DecoderLayer",),
    sharding_strategy: str = "FULL_SHARD",
    state_dict_type: str = "sharded",
    activation_checkpointing: bool = False,
    cpu_offload: bool = False,
):
    """Lightning's ``FSDPStrategy`` wrapping every transformer block of a Hugging Face causal LM.

    Args:
        layer_class_suffixes: a module becomes its own FSDP unit when its class name ends with one
            of these (``LlamaDecoderLayer``, ``Qwen2DecoderLayer``, ... all end in ``DecoderLayer``).
        sharding_strategy: ``FULL_SHARD`` | ``SHARD_GRAD_OP`` | ``HYBRID_SHARD`` | ``NO_SHARD``.
        state_dict_type: Lightning checkpoints: ``sharded`` (one file per rank, fast) or ``full``.
            The Hugging Face export is always full (gathered on every rank, written by rank 0).
        activation_checkpointing: recompute each block's activations in the backward pass.
        cpu_offload: keep parameters and gradients in host memory.

    Returns:
        a ``lightning.pytorch.strategies.FSDPStrategy`` with ``use_orig_params=True`` (the sampler
        reads parameters by their Hugging Face names).

    Raises:
        ValueError: empty ``layer_class_suffixes``. Lightning raises when the accelerator is not a GPU.
    """
    from lightning.pytorch.strategies import FSDPStrategy

    suffixes = tuple(layer_class_suffixes)
    if not suffixes:
        raise ValueError("trainer.strategy.layer_class_suffixes must name at least one block class suffix")
    policy = functools.partial(
        lambda_auto_wrap_policy, lambda_fn=functools.partial(_is_decoder_layer, suffixes=suffixes)
    )
    checkpointing = None
    if activation_checkpointing:
        checkpointing = functools.partial(
            lambda_auto_wrap_policy, lambda_fn=functools.partial(_is_decoder_layer, suffixes=suffixes)
        )
    return FSDPStrategy(
        auto_wrap_policy=policy,
        sharding_strategy=sharding_strategy,
        state_dict_type=state_dict_type,
        activation_checkpointing_policy=checkpointing,
        cpu_offload=cpu_offload,
        use_orig_params=True,
    )
