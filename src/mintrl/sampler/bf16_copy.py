"""A bfloat16 copy of the policy for sampling (``sampler.dtype=bf16``), kept equal to the live weights."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from mintrl.model.lora import is_lora
from mintrl.sampler.weights import hf_state_dict, weights_version


class Bf16Copy:
    """The policy's weights in bfloat16 as a plain Hugging Face model, refreshed from the policy
    whenever its weights changed.

    The copy is built once from the policy's config (its base model's for a LoRA policy) and loaded
    with :func:`mintrl.sampler.weights.hf_state_dict`: a LoRA adapter is merged into the base
    weights, so sampling runs no adapter layers (``W + (alpha / r) B A`` rounded to bf16 once per
    refresh instead of two extra products per layer per token). After that, :meth:`current`
    copies the weights again (cast copies, no new module) when
    :func:`mintrl.sampler.weights.weights_version` of the policy differs from the last refresh.
    Buffers the state dict does not hold (rotary frequencies) are the config's, in fp32. Costs
    ``2 bytes x parameters`` of memory (270 MB for SmolLM2-135M).

    Args:
        policy: the live module the trainer updates (a Hugging Face causal LM or a peft model).
    """

    def __init__(self, policy: torch.nn.Module):
        self.policy = policy
        self.module: torch.nn.Module | None = None  # built at the first current()
        self._version = None
        self.refreshes = 0  # times the weights were copied (the first copy included)

    def current(self) -> torch.nn.Module:
        """The bfloat16 module, equal (after rounding) to the policy's weights now. Made and
        refreshed outside inference mode (validation runs under it, and a copy made there could
        never be written again)."""
        with torch.inference_mode(False), torch.no_grad():
            return self._current()

    def _current(self) -> torch.nn.Module:
        version = weights_version(self.policy)
        if self.module is not None and version == self._version:
            return self.module
        weights = hf_state_dict(self.policy)  # merged once per refresh (LoRA)
        if self.module is None:
            self.module = self._build(set(weights))
        state = self.module.state_dict()
        for name, tensor in weights.items():
            if name in state:
                state[name].copy_(tensor)  # cast to bf16 in the copy
        self._version = version
        self.refreshes += 1
        return self.module

    def _build(self, names: set[str]) -> torch.nn.Module:
        """The bf16 model of the policy's (base) config; ``names``: the policy's Hugging Face weight names.

        Raises:
            ValueError: the model has weights the policy does not name (other than a tied head).
        """
        base = self.policy.get_base_model() if is_lora(self.policy) else self.policy
        device = next(self.policy.parameters()).device
        module = AutoModelForCausalLM.from_config(base.config, dtype=torch.bfloat16).to(device).eval()
        missing = set(module.state_dict()) - names
        if missing - {"lm_head.weight"}:  # a tied head is the embedding's tensor
            raise ValueError(f"the bf16 sampling copy finds no policy weight for {sorted(missing)[:5]}")
        # requires_grad stays True: on CPU, bf16 linear layers whose weight does not require grad take
        # a ~2.4x slower kernel path (torch 2.13, AVX512-BF16); the copy only runs under no_grad
        return module
