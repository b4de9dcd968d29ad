"""Rollout samplers: the same interface on CPU (Hugging Face ``generate``) and, later, vLLM."""

from mintrl.sampler.base import Generation, Sampler
from mintrl.sampler.hf import HFSampler

__all__ = ["Generation", "HFSampler", "Sampler"]
