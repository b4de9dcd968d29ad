"""A plain, unsharded copy of the policy for sampling, kept equal to the live weights: in bfloat16
(``sampler.dtype=bf16``) or, for a policy sharded by FSDP2 (``trainer=fsdp``), in the policy's dtype."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM

try:  # transformers 5
    from transformers.initialization import no_init_weights
except ImportError:  # transformers 4.56-4.x (pyproject's floor): the same context manager
    from transformers.modeling_utils import no_init_weights

from mintrl.model.heads import is_tied
from mintrl.model.lora import base_model
from mintrl.sampler.weights import hf_weights, weights_generation


class SamplingCopy:
    """The policy's weights in ``dtype`` as a plain Hugging Face model, refreshed from the policy
    whenever its weights changed.

    The copy is built once from the policy's config (its base model's for a LoRA policy) and loaded
    from :func:`mintrl.sampler.weights.hf_weights`, one tensor at a time (a sharded policy's gathered
    one at a time): a LoRA adapter is merged into the base weights, so sampling runs no adapter
    layers (``W + (alpha / r) B A`` rounded to ``dtype`` once per refresh instead of two extra
    products per layer per token); the copy decodes with no collective, so ranks may generate
    different numbers of tokens. After that, :meth:`current` copies the weights again (in place, no
    new module) when the policy's :func:`mintrl.sampler.weights.weights_generation` differs from the
    one of the last refresh (under FSDP2 every rank refreshes at the same point: its first sampling
    call after an update), and follows the policy to its device when it moved.
    Buffers the state dict does not hold (rotary frequencies) are the config's, in fp32. Costs
    ``bytes(dtype) x parameters`` of memory per rank (270 MB for SmolLM2-135M in bf16).

    Args:
        policy: the live module the trainer updates (a Hugging Face causal LM or a peft model,
            sharded or not).
        dtype: the copy's dtype (``torch.bfloat16``, or the policy's own for a sharded policy).
    """

    def __init__(self, policy: torch.nn.Module, dtype: torch.dtype = torch.bfloat16):
        self.policy = policy
        self.dtype = dtype
        self.module: torch.nn.Module | None = None  # built at the first current()
        self._generation: int | None = None  # the policy's weights generation the copy holds
        self.refreshes = 0  # times the weights were copied (the first copy included)

    def current(self) -> torch.nn.Module:
        """The copy, equal (after rounding to ``dtype``) to the policy's weights now, on the policy's
        device. Made and refreshed outside inference mode (validation runs under it, and a copy made
        there could never be written again)."""
        with torch.inference_mode(False), torch.no_grad():
            return self._current()

    def forget(self) -> None:
        """The next :meth:`current` copies the policy's weights again (its module was written by
        someone else, e.g. :meth:`mintrl.sampler.pinned.PinnedSampler.load`)."""
        self._generation = None

    def _current(self) -> torch.nn.Module:
        generation = weights_generation(self.policy).value
        if self.module is not None and generation == self._generation:
            device = _device_of(self.policy)
            if next(self.module.parameters()).device != device:  # the policy moved (to the trainer's device)
                self.module.to(device)
            return self.module
        copied = set()
        state = None
        for name, tensor in hf_weights(self.policy):  # one gathered tensor at a time; LoRA merged as it passes
            if self.module is None:
                self.module = self._build()
            if state is None:
                state = self.module.state_dict()
            if name in state:
                state[name].copy_(tensor)  # cast to the copy's dtype (and moved to its device) in the copy
                copied.add(name)
        if state is None:  # pragma: no cover - a policy without weights
            raise ValueError("the sampling copy found no weight in the policy")
        tied = {"lm_head.weight"} if is_tied(self.module) else set()  # a tied head is the embedding's tensor
        missing = set(state) - copied - tied  # never drawn at random (plain_model): an uncopied weight is garbage
        if self.refreshes == 0 and missing:
            raise ValueError(f"the sampling copy finds no policy weight for {sorted(missing)[:5]}")
        self._generation = generation
        self.refreshes += 1
        return self.module

    def _build(self) -> torch.nn.Module:
        """The plain model of the policy's (base) config in :attr:`dtype` on the policy's device."""
        module = plain_model(base_config(self.policy), self.dtype, _device_of(self.policy))
        # requires_grad stays True: on CPU, bf16 linear layers whose weight does not require grad take
        # a ~2.4x slower kernel path (torch 2.13, AVX512-BF16); the copy only runs under no_grad
        return module


def base_config(policy: torch.nn.Module):
    """The Hugging Face config of ``policy``, its base model's for a LoRA policy (a copy merges the adapter)."""
    return base_model(policy).config


def plain_model(config, dtype: torch.dtype, device: torch.device | str) -> torch.nn.Module:
    """A plain causal LM of ``config`` in ``dtype`` on ``device``, in eval mode, its weights to be copied in.

    Its parameters are allocated, never drawn at random (transformers' ``no_init_weights``: drawing
    them cost ~1.5 s for SmolLM2-135M on a CPU core, minutes for a 7B model, and every one is
    overwritten by the copy); the head is tied to the embedding again afterwards where ``config``
    ties them, and the buffers the state dict does not hold (rotary frequencies) are computed by the
    modules' constructors, as in a model built with its random draw. ``no_init_weights`` replaces
    ``torch.nn.init``'s functions for the construction (~0.02 s): a module built by another thread in
    that window would keep unset weights (mintrl builds none then: the copy is built at its first
    sampling call, after every model of the run is loaded).

    Raises:
        ValueError: ``config`` ties the head but the built model's head is not the embedding.
    """
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()
    if config.get_text_config().tie_word_embeddings and not is_tied(model):
        raise ValueError(f"{type(model).__name__}: the config ties the head to the embedding, the built model does not")
    return model.to(device).eval()


def _device_of(policy: torch.nn.Module) -> torch.device:
    """The device of ``policy``'s first parameter (its local shard's under FSDP2)."""
    param = next(policy.parameters())
    return param.to_local().device if isinstance(param, DTensor) else param.device
