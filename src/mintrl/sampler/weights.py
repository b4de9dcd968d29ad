"""Keeping a generation engine's copy of the weights in lock-step with the policy being trained.

Two small helpers shared by engine-backed samplers (:class:`mintrl.sampler.VLLMSampler`):

- :func:`weights_version` tells, without reading any weight, whether the policy changed since the
  engine last received it. Every in-place write to a tensor (``optimizer.step``,
  ``load_state_dict``'s ``copy_``, a checkpoint restore, an SFT stage) bumps the tensor's version
  counter, the one autograd uses to detect in-place modification; replacing a parameter object
  changes its ``id``. So the engine is synced exactly when the weights changed, whoever changed them.
- :func:`full_state_dict` yields the full, unsharded weights on every rank, one tensor at a time
  (gathered under FSDP2).
- :func:`hf_state_dict` is that with Hugging Face names: for a LoRA policy (``model/lora=default``)
  the adapter merged into the base weights (:func:`mintrl.model.lora.merge_lora_weights`), what
  vLLM and ``from_pretrained`` load; :func:`save_hf_folder` writes it as a Hugging Face folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from mintrl.model.lora import is_lora, lora_scalings, merge_lora_weights

_FSDP_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def weights_version(model: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """``(id, version counter)`` of every parameter: changes whenever any weight was written.

    Returns:
        a tuple comparable with ``==``; cheap (no tensor data is read).
    """
    return tuple((id(p), p._version) for p in model.parameters())


def strip_wrapper_prefixes(name: str) -> str:
    """``name`` without the FSDP / activation-checkpointing / compile wrapper prefixes."""
    for prefix in _FSDP_PREFIXES:
        name = name.replace(prefix, "")
    return name


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or a submodule) is sharded by FSDP2 (``fully_shard``: its parameters are
    ``DTensor`` shards), so reading its full weights is a collective."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return any(isinstance(module, FSDPModule) for module in model.modules())


def full_state_dict(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` of every parameter and buffer of ``model`` with Hugging Face names.

    Under FSDP2 (``trainer=fsdp``) each sharded parameter is gathered on its own
    (``DTensor.full_tensor``, an all-gather) just before it is yielded, so at most one full tensor
    beyond the shards is alive when the caller consumes the iterator tensor by tensor (the vLLM
    sync, the sampling copy); every rank must iterate to the end, in the same order, at the same
    point of the run (a collective per tensor — the rollout loop and the export do). Wrapper prefixes
    (activation checkpointing, ``torch.compile``) are stripped; a tied head (one tensor under two
    names) is yielded under both names, as ``state_dict`` does. Without sharding the live tensors are
    yielded (no copy).

    Yields:
        parameter and buffer tensors, detached, on their own device (new tensors under FSDP2).
    """
    sharded = is_sharded(model)
    for name, tensor in model.state_dict(keep_vars=True).items():
        tensor = tensor.detach()
        if sharded and hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        yield strip_wrapper_prefixes(name), tensor


def hf_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's full weights under Hugging Face names (a collective under FSDP, like
    :func:`full_state_dict`).

    A LoRA policy's adapter is merged: every adapted layer's weight becomes ``W + (alpha / r) B A``,
    a new tensor (transiently about one more copy of the adapted layers' weights); otherwise the
    tensors of :func:`full_state_dict` are returned as they are.
    """
    tensors = dict(full_state_dict(model))
    if not is_lora(model):
        return tensors
    return merge_lora_weights(tensors, {strip_wrapper_prefixes(name): s for name, s in lora_scalings(model).items()})


def save_hf_folder(model: torch.nn.Module, folder: str | Path, state_dict: dict | None = None) -> None:
    """``save_pretrained`` of the policy as a plain Hugging Face folder (config, generation config,
    safetensors weights): a LoRA policy's merged weights (:func:`hf_state_dict`) under its base
    model's config, so ``from_pretrained`` and vLLM load it without peft.

    Args:
        state_dict: Hugging Face-named weights to write (gathered under FSDP; cast by the caller);
            None: the live policy's (merged for LoRA).
    """
    if is_lora(model):
        base = model.get_base_model()
        base.save_pretrained(folder, safe_serialization=True, state_dict=state_dict or hf_state_dict(model))
    else:
        model.save_pretrained(folder, safe_serialization=True, state_dict=state_dict)
