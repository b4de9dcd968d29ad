"""Export the trained policy as a Hugging Face folder that ``from_pretrained`` and vLLM load."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import lightning.pytorch as L

from mintrl.sampler.weights import full_state_dict, is_sharded

if TYPE_CHECKING:
    from mintrl.training.module import PolicyModule


class HFExport(L.Callback):
    """At the end of training, ``save_pretrained`` the policy (and tokenizer) to ``dirpath``.

    Written to a temporary sibling folder, then renamed, so a crash never leaves a half folder.

    Args:
        dirpath: output folder (default ``<trainer.default_root_dir>/hf_policy``).
    """

    def __init__(self, dirpath: str | None = None):
        self.dirpath = dirpath
        self.saved_to: Path | None = None

    def export(self, trainer: L.Trainer, module: PolicyModule, state_dict: dict | None = None) -> Path:
        """Save ``module.policy`` (+ ``module.tokenizer``) and return the folder; ``state_dict``:
        the full weights when the policy is sharded (FSDP), else None (the live module's)."""
        out = Path(self.dirpath or Path(trainer.default_root_dir) / "hf_policy")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
        module.policy.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
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
