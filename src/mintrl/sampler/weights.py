"""Keeping a generation engine's copy of the weights in lock-step with the policy being trained.

Two small helpers shared by engine-backed samplers (:class:`mintrl.sampler.VLLMSampler`):

- :func:`weights_version` tells, without reading any weight, whether the policy changed since the
  engine last received it. Every in-place write to a tensor (``optimizer.step``,
  ``load_state_dict``'s ``copy_``, a checkpoint restore, an SFT stage) bumps the tensor's version
  counter, the one autograd uses to detect in-place modification; replacing a parameter object
  changes its ``id``. So the engine is synced exactly when the weights changed, whoever changed them.
- :func:`full_state_dict` gathers the full, unsharded weights on every rank, also under FSDP.
"""

from __future__ import annotations

from typing import Iterator

import torch

_FSDP_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def weights_version(model: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """``(id, version counter)`` of every parameter: changes whenever any weight was written.

    Returns:
        a tuple comparable with ``==``; cheap (no tensor data is read).
    """
    return tuple((id(p), p._version) for p in model.parameters())


def _clean(name: str) -> str:
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
            yield _clean(name), tensor.detach().clone()
        for name, tensor in model.named_buffers():
            yield _clean(name), tensor.detach().clone()
