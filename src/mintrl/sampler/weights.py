"""Keeping a generation engine's copy of the weights in lock-step with the policy being trained.

Helpers shared by the samplers (:class:`mintrl.sampler.HFSampler`, its
:class:`~mintrl.sampler.sampling_copy.SamplingCopy`, :class:`mintrl.sampler.VLLMSampler`) and the
Hugging Face export:

- :class:`WeightsGeneration` (one per policy module, :func:`weights_generation`) tells, without
  reading any weight, whether the policy changed since a copy was last refreshed: whoever writes the
  policy's weights advances it (the training module after every optimizer step and checkpoint load,
  the SFT stage at its end), and every sampler, cache and copy compares the value it last saw. The
  tensors' own version counters cannot be used: an optimizer's ``foreach`` path on FSDP2's
  ``DTensor`` parameters (the CUDA default) and its ``fused`` path on plain tensors move the weights
  without bumping them.
- :func:`full_state_dict` yields the full, unsharded weights on every rank, one tensor at a time
  (gathered under FSDP2, outside inference mode).
- :func:`hf_weights` is that stream with Hugging Face names: for a LoRA policy
  (``model/lora=default``) the adapter merged into the base weights
  (:func:`mintrl.model.lora.merge_lora_stream`), what vLLM and ``from_pretrained`` load;
  :func:`hf_state_dict` collects it into a dict; :func:`save_hf_folder` writes a Hugging Face
  folder.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Iterator

import torch
from torch.distributed.tensor import DTensor

from mintrl.model.lora import base_model, is_lora, lora_scalings, merge_lora_stream

_FSDP_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


class WeightsGeneration:
    """A counter of the writes to one policy's weights: 0 when the policy is built, advanced by one
    after every write (an optimizer step, a checkpoint load, the SFT stage, an in-place adapter
    merge). A copy of the weights made at generation ``g`` is current while :attr:`value` is ``g``.

    The counter is the policy's, whatever holds it (:func:`weights_generation` returns the same
    object for the same module): the training module advances it, the samplers read it.
    """

    def __init__(self) -> None:
        self._value = 0

    @property
    def value(self) -> int:
        """The number of writes so far (a count)."""
        return self._value

    def advance(self) -> int:
        """Record a write to the weights; returns the new value."""
        self._value += 1
        return self._value

    def __repr__(self) -> str:
        return f"WeightsGeneration({self._value})"


_GENERATIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> WeightsGeneration


def weights_generation(model) -> WeightsGeneration:
    """The :class:`WeightsGeneration` of ``model`` (a policy module, or any object that samples,
    such as :class:`mintrl.model.lora.AdapterOff`), created at 0 on the first call; the same object
    on every later call for the same ``model``, dropped with it. A deep copy is another model with
    its own counter."""
    generation = _GENERATIONS.get(model)
    if generation is None:
        generation = _GENERATIONS[model] = WeightsGeneration()
    return generation


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


def _full(tensor: torch.Tensor, sharded: bool) -> torch.Tensor:
    """``tensor`` detached; a ``DTensor`` shard all-gathered into a new full tensor. Runs outside
    inference mode (``DTensor.detach`` cannot set the version counter of an inference tensor, so a
    gather inside ``torch.inference_mode()`` raises) and without autograd."""
    with torch.inference_mode(False), torch.no_grad():
        tensor = tensor.detach()
        if sharded and isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
    return tensor


def full_state_dict(model: torch.nn.Module, tied_once: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` of every parameter and buffer of ``model`` with Hugging Face names.

    Under FSDP2 (``trainer=fsdp``) each sharded parameter is gathered on its own
    (``DTensor.full_tensor``, an all-gather) just before it is yielded and nothing here keeps it, so
    at most one full tensor beyond the shards is alive when the caller consumes the iterator tensor
    by tensor (the vLLM push, the sampling copy, the export); every rank must iterate to the end,
    in the same order, at the same point of the run (a collective per tensor: the rollout loop and
    the export do). Gathers run outside inference mode, so a caller inside
    ``torch.inference_mode()`` may consume the iterator. Wrapper prefixes (activation
    checkpointing, ``torch.compile``) are stripped. Without sharding the live tensors are yielded
    (no copy).

    A tensor that appears under several names (a tied LM head is the embedding's tensor) is
    gathered once and yielded under its names one after another, where its first name stands in
    ``state_dict``'s order (so the tied head comes right after the embedding), then dropped.

    Args:
        tied_once: yield such a tensor under its first name only (the consumers that pass True,
            ``save_pretrained`` and the sampling copy, re-tie it themselves); False: under every
            name, as ``state_dict`` does (vLLM's CPU backend keeps its own copy of a tied head, which
            a reload without ``lm_head.weight`` leaves at the old weights).

    Yields:
        parameter and buffer tensors, detached, on their own device (new tensors under FSDP2).
    """
    sharded = is_sharded(model)
    names_of: dict[int, list[str]] = {}  # id(tensor) -> its names, in the order of first appearance
    tensors: dict[int, torch.Tensor] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names_of.setdefault(id(tensor), []).append(name)
        tensors.setdefault(id(tensor), tensor)
    for key, names in names_of.items():
        full = _full(tensors[key], sharded)
        for name in names[:1] if tied_once else names:
            yield strip_wrapper_prefixes(name), full
        del full


def hf_weights(model: torch.nn.Module, tied_once: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's full weights under Hugging Face names, one tensor at a time (a collective per
    tensor under FSDP, like :func:`full_state_dict`), a tied head under the embedding's name only
    (``tied_once``) or under both names from one gather (False: what vLLM's reload needs).

    A LoRA policy's adapter is merged as the stream passes (:func:`mintrl.model.lora.merge_lora_stream`):
    every adapted layer's weight becomes ``W + (alpha / r) B A``, a new tensor; otherwise the tensors
    of :func:`full_state_dict` are yielded as they are.
    """
    tensors = full_state_dict(model, tied_once=tied_once)
    if not is_lora(model):
        return tensors
    scalings = {strip_wrapper_prefixes(name): s for name, s in lora_scalings(model).items()}
    return merge_lora_stream(tensors, scalings)


def hf_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """:func:`hf_weights` collected into a dict (every full tensor alive at once: for tests and small
    models; the vLLM push and the export consume the stream)."""
    return dict(hf_weights(model))


def save_hf_folder(model: torch.nn.Module, folder: str | Path, state_dict: dict | None = None) -> None:
    """``save_pretrained`` of the policy as a plain Hugging Face folder (config, generation config,
    safetensors weights): a LoRA policy's merged weights (:func:`hf_state_dict`) under its base
    model's config, so ``from_pretrained`` and vLLM load it without peft. Writes on the main
    process only when ``torch.distributed`` is initialized (transformers 5 writes on rank 0 only):
    a folder every rank needs is :func:`save_rank_local_folder`'s.

    Args:
        state_dict: Hugging Face-named weights to write (gathered under FSDP; cast by the caller);
            None: the live policy's (merged for LoRA).
    """
    if is_lora(model):
        base = model.get_base_model()
        base.save_pretrained(folder, safe_serialization=True, state_dict=state_dict or hf_state_dict(model))
    else:
        model.save_pretrained(folder, safe_serialization=True, state_dict=state_dict)


def save_rank_local_folder(model: torch.nn.Module, folder: str | Path, dtype: torch.dtype | None = None) -> list[str]:
    """Write the policy as a Hugging Face folder on *this* rank, whatever its rank (a collective
    under FSDP: every rank calls it at the same point): ``config.json``, ``generation_config.json``
    and ``model.safetensors`` holding :func:`hf_weights` (a LoRA policy merged, under its base
    model's config), each tensor moved to the CPU (cast to ``dtype`` when given) as it is gathered,
    so the device holds one full tensor beyond the shards at a time. ``save_pretrained`` cannot be
    used: transformers 5 writes its files on rank 0 only, leaving other ranks' folders empty.

    Returns:
        the names written, in order.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    base = base_model(model)
    tensors = {}
    for name, tensor in hf_weights(model):
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensors[name] = tensor.contiguous().cpu()
    base.config.save_pretrained(folder)  # no rank check in config or generation-config saves
    if base.generation_config is not None:
        base.generation_config.save_pretrained(folder)
    save_file(untie(tensors), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return list(tensors)


def untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage: clone tensors that share memory with an earlier one."""
    seen: set[int] = set()
    out = {}
    for name, t in tensors.items():
        ptr = t.untyped_storage().data_ptr()
        out[name] = t.clone() if ptr in seen else t
        seen.add(ptr)
    return out
