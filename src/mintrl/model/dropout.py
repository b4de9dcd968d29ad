"""Dropout off in the policy: RL trains on log-probs of the tokens the policy sampled, which came from
a forward without dropout; a training forward with dropout would give ratios away from 1 on unchanged
weights and noise in every KL and anchor term. RL trainers (TRL, verl) turn it off; so does mintrl."""

from __future__ import annotations

import torch


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability of ``model`` to 0, in place: each ``torch.nn.Dropout`` (and
    subclass, e.g. LoRA's ``lora_dropout``) gets ``p = 0``, and every float attribute of a module
    whose name says dropout (``attention_dropout``, ``attn_pdrop``, ``resid_pdrop``: the rates
    Hugging Face attention modules read at each forward) becomes 0.0, as do those fields of the
    model's config.

    Returns:
        How many rates were nonzero before (0 for the dropout-free models mintrl ships with).
    """
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p != 0
            module.p = 0.0
        holders = [module.__dict__]
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "__dict__"):
            holders.append(config.__dict__)
        for holder in holders:
            for name, value in list(holder.items()):
                if isinstance(value, float) and ("dropout" in name or name.endswith("pdrop")):
                    changed += value != 0.0
                    holder[name] = 0.0
    return changed
