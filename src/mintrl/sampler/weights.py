"""Keeping a generation engine's copy of the weights in lock-step with the policy being trained.

Two small helpers shared by engine-backed samplers (:class:`mintrl.sampler.VLLMSampler`):

- :func:`weights_version` tells, without reading any weight, whether the policy changed since the
  engine last received it. Every in-place write to a tensor (``optimizer.step``,
  ``load_state_dict``'s ``copy_``, a checkpoint restore, an SFT stage) bumps the tensor's version
  counter, the one autograd uses to detect in-place modification; replacing a parameter object
  changes its ``id``. So the engine is synced exactly when the weights changed, whoever changed them.
- :func:`full_state_dict` gathers the full, unsharded weights on every rank, also under FSDP.
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


def _fsdp_root(model: torch.nn.Module):
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    for module in model.modules():
        if isinstance(module, FSDP):
            return module
    return None


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or a submodule) is wrapped by FSDP, so its weights live in shards."""
    return _fsdp_root(model) is not None


def full_state_dict(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` of every parameter and buffer of ``model`` with Hugging Face names.

    Under FSDP (Lightning ``strategy=fsdp``, ``use_orig_params=True``) the shards are gathered on
    every rank inside ``summon_full_params`` (a collective: every rank must call this at the same
    point, which the rollout loop does, since every rank generates every step); wrapper prefixes
    (``_fsdp_wrapped_module.``) are stripped. Without FSDP the live tensors are yielded (no copy).

    Yields:
        parameter and buffer tensors, detached, on their own device (copies under FSDP).
    """
    root = _fsdp_root(model)
    if root is None:
        for name, tensor in model.state_dict(keep_vars=False).items():
            yield name, tensor.detach()
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.summon_full_params(root, writeback=False, rank0_only=False, offload_to_cpu=False):
        # copies: the gathered storage is freed when the context exits
        for name, tensor in model.named_parameters():
            yield strip_wrapper_prefixes(name), tensor.detach().clone()
        for name, tensor in model.named_buffers():
            yield strip_wrapper_prefixes(name), tensor.detach().clone()


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
