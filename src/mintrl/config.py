"""OmegaConf resolvers used by the configs (registered on import of :mod:`mintrl.build`)."""

from __future__ import annotations

from omegaconf import OmegaConf


def rollout_batches(max_steps: int, epochs: int, minibatches: int) -> int:
    """Rollout batches in a run of ``max_steps`` optimizer updates with ``epochs x minibatches``
    updates per batch (``${rollout_batches:...}`` in ``configs/trainer``)."""
    return max(int(max_steps) // (int(epochs) * int(minibatches)), 1)


if not OmegaConf.has_resolver("rollout_batches"):
    OmegaConf.register_new_resolver("rollout_batches", rollout_batches)
