"""The configs' folder and the OmegaConf resolvers they use (registered on import of
:mod:`mintrl.build.components`)."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from mintrl.core.precision import cpu_trainer_precision

# Absolute, so that `python -m mintrl.cli.train` and the console scripts find the same configs (the
# repository's configs/ next to src/); MINTRL_CONFIG_DIR points elsewhere.
CONFIG_DIR = os.environ.get("MINTRL_CONFIG_DIR", str(Path(__file__).resolve().parents[3] / "configs"))


def rollout_batches(max_steps: int, epochs: int, minibatches: int) -> int:
    """Rollout batches in a run of ``max_steps`` optimizer updates with ``epochs x minibatches``
    updates per batch (``${rollout_batches:...}`` in ``configs/trainer``)."""
    return max(int(max_steps) // (int(epochs) * int(minibatches)), 1)


if not OmegaConf.has_resolver("rollout_batches"):
    OmegaConf.register_new_resolver("rollout_batches", rollout_batches)


def rollouts_per_step(prompts_per_step: int, rollouts_per_prompt: int) -> int:
    """A step's rollout budget: ``prompts_per_step x rollouts_per_prompt`` (rollouts;
    ``${rollouts_per_step:...}`` in the allocation rows' ``allocation.budget_per_step``)."""
    return int(prompts_per_step) * int(rollouts_per_prompt)


if not OmegaConf.has_resolver("rollouts_per_step"):
    OmegaConf.register_new_resolver("rollouts_per_step", rollouts_per_step)


if not OmegaConf.has_resolver("cpu_precision"):
    OmegaConf.register_new_resolver("cpu_precision", cpu_trainer_precision)
