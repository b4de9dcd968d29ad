"""Policy loading: the embedded SmolLM2 default (GGUF → safetensors cache) and any HF folder or hub id."""

from mintrl.model.loading import LoadedPolicy, embedded_smollm2, load_policy, locate_embedded_gguf

__all__ = ["LoadedPolicy", "embedded_smollm2", "load_policy", "locate_embedded_gguf"]
