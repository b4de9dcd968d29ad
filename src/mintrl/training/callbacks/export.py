"""Export the trained policy as a Hugging Face folder that ``from_pretrained`` and vLLM load (and,
for a LoRA policy, the peft adapter folder next to it)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import lightning.pytorch as L
import torch

from mintrl.model.lora import is_lora, lora_scalings, merge_lora_weights
from mintrl.sampler.weights import full_state_dict, hf_state_dict, is_sharded, save_hf_folder, strip_wrapper_prefixes

if TYPE_CHECKING:
    from mintrl.training.module import PolicyModule


class HFExport(L.Callback):
    """At the end of training, ``save_pretrained`` the policy (and tokenizer) to ``dirpath``.

    Written to a temporary sibling folder, then renamed, so a crash never leaves a half folder. A
    LoRA policy (``model/lora=default``) is written twice: ``hf_policy/`` holds the merged model
    (``W + (alpha / r) B A``; transformers and vLLM load it without peft) and ``hf_adapter/`` next
    to it the peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``; load with
    ``peft.PeftModel.from_pretrained(base, ".../hf_adapter")``).

    Args:
        dirpath: output folder (default ``<trainer.default_root_dir>/hf_policy``; the adapter goes
            to its sibling, :func:`adapter_folder_name`: ``hf_adapter``, ``hf_sft_adapter``).
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
        self.adapter_saved_to: Path | None = None

    def export(self, trainer: L.Trainer, module: PolicyModule, state_dict: dict | None = None) -> Path:
        """Save ``module.policy`` (+ ``module.tokenizer``) and return the folder; ``state_dict``:
        the full weights (raw names, as :func:`full_state_dict` yields them) when the policy is
        sharded (FSDP), else None (the live module's). A LoRA policy's adapter goes to the sibling
        ``hf_adapter`` (:attr:`adapter_saved_to`)."""
        out = Path(self.dirpath or Path(trainer.default_root_dir) / "hf_policy")
        out.parent.mkdir(parents=True, exist_ok=True)
        lora = is_lora(module.policy)
        if lora:
            self.adapter_saved_to = self._export_adapter(module, out.parent / adapter_folder_name(out.name), state_dict)
            state_dict = hf_state_dict(module.policy) if state_dict is None else _merged(module.policy, state_dict)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
        if self.dtype is not None:
            state_dict = cast_state_dict(module.policy.state_dict() if state_dict is None else state_dict, self.dtype)
        save_hf_folder(module.policy, tmp, state_dict)
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

    def _export_adapter(self, module: PolicyModule, out: Path, state_dict: dict | None) -> Path:
        """The peft adapter folder of a LoRA policy (``save_pretrained`` of the ``PeftModel``), written
        like ``hf_policy``: a temporary sibling renamed into place."""
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
        module.policy.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        return out

    def on_train_end(self, trainer: L.Trainer, module: PolicyModule) -> None:
        state_dict = None
        if is_sharded(module.policy):  # a collective: every rank gathers, rank 0 keeps and writes
            state_dict = gather_to_host(module.policy, keep=trainer.is_global_zero)
        if trainer.is_global_zero:
            self.export(trainer, module, state_dict)


def gather_to_host(policy: torch.nn.Module, keep: bool) -> dict[str, torch.Tensor] | None:
    """The full weights of a sharded policy (raw names, as :func:`full_state_dict` yields them),
    gathered one tensor at a time (a collective per tensor: every rank calls this at the same point)
    and each moved to host memory at once, so the device holds one full tensor beyond the shards at a
    time; a tied head is gathered once (under the embedding's name: ``save_pretrained`` drops the
    tied name anyway).

    Args:
        keep: this rank writes the export (rank 0): return the tensors; other ranks drop each one
            as soon as it is gathered and get None.
    """
    out: dict[str, torch.Tensor] = {}
    for name, tensor in full_state_dict(policy, tied_once=True):
        if keep:
            out[name] = tensor.cpu()
    return out if keep else None


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


def adapter_folder_name(policy_folder: str) -> str:
    """The adapter folder next to a policy export: ``hf_policy`` -> ``hf_adapter``, ``hf_sft_policy``
    -> ``hf_sft_adapter``, any other name + ``_adapter``."""
    if "policy" in policy_folder:
        return policy_folder.replace("policy", "adapter")
    return policy_folder + "_adapter"


def _merged(policy, state_dict: dict) -> dict:
    """Hugging Face weights of a LoRA policy from its gathered peft state dict (FSDP)."""
    return merge_lora_weights(
        state_dict, {strip_wrapper_prefixes(name): s for name, s in lora_scalings(policy).items()}
    )
