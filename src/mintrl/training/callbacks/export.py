"""Export the trained policy as a Hugging Face folder that ``from_pretrained`` and vLLM load."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import lightning.pytorch as L
import torch

from mintrl.sampler.weights import full_state_dict, is_sharded

if TYPE_CHECKING:
    from mintrl.training.module import PolicyModule


class HFExport(L.Callback):
    """At the end of training, ``save_pretrained`` the policy (and tokenizer) to ``dirpath``.

    Written to a temporary sibling folder, then renamed, so a crash never leaves a half folder.

    Args:
        dirpath: output folder (default ``<trainer.default_root_dir>/hf_policy``).
        dtype: floating-point dtype of the exported weights, a ``torch`` dtype name (``bfloat16``:
            half the bytes of float32, what ``callbacks=sweep`` writes); None keeps the policy's own.
            The training run itself is unchanged: only the written copy is cast.

    Raises:
        ValueError: ``dtype`` is not a floating-point ``torch`` dtype name.
    """

    def __init__(self, dirpath: str | None = None, dtype: str | None = None):
        if dtype is not None and not (
            isinstance(getattr(torch, str(dtype), None), torch.dtype) and getattr(torch, dtype).is_floating_point
        ):
            raise ValueError(
                f"HFExport dtype must be a floating-point torch dtype name such as bfloat16, got {dtype!r}"
            )
        self.dirpath = dirpath
        self.dtype = dtype
        self.saved_to: Path | None = None

    def export(self, trainer: L.Trainer, module: PolicyModule, state_dict: dict | None = None) -> Path:
        """Save ``module.policy`` (+ ``module.tokenizer``) and return the folder; ``state_dict``:
        the full weights when the policy is sharded (FSDP), else None (the live module's)."""
        out = Path(self.dirpath or Path(trainer.default_root_dir) / "hf_policy")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
        if self.dtype is not None:
            state_dict = cast_state_dict(module.policy.state_dict() if state_dict is None else state_dict, self.dtype)
        module.policy.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        if self.dtype is not None:  # save_pretrained records the live policy's dtype
            config = json.loads((tmp / "config.json").read_text())
            config["torch_dtype" if "torch_dtype" in config and "dtype" not in config else "dtype"] = self.dtype
            (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if module.tokenizer is not None:
            module.tokenizer.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        self.saved_to = out
        return out

    def on_train_end(self, trainer: L.Trainer, module: PolicyModule) -> None:
        state_dict = None
        if is_sharded(module.policy):  # a collective: every rank gathers, rank 0 writes
            state_dict = dict(full_state_dict(module.policy))
        if trainer.is_global_zero:
            self.export(trainer, module, state_dict)


def cast_state_dict(state_dict: dict, dtype: str) -> dict:
    """``state_dict`` with its floating-point tensors cast to ``torch.<dtype>`` (integer buffers kept);
    tensors sharing storage (tied embeddings) stay shared, so ``save_pretrained`` still drops the tie."""
    target = getattr(torch, dtype)
    cast: dict = {}
    memo: dict[tuple, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            cast[key] = tensor
            continue
        ident = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if ident not in memo:
            memo[ident] = tensor.detach().to(target)
        cast[key] = memo[ident]
    return cast
