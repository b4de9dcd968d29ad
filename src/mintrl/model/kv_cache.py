"""The size of a decoder's KV cache, from its Hugging Face config alone (no weights loaded).

A full-attention decoder keeps, for every token of every row, one key and one value vector per
layer and KV head: ``layers x kv_heads x head_dim x 2 x bytes`` per token (229,376 bytes for
Qwen3-1.7B in fp32: 28 x 8 x 128 x 2 x 4). :func:`check_kv_budget` refuses a batch of the HF
sampler (``sampler=hf``) whose cache would exceed ``sampler.max_kv_gb``; vLLM (``sampler=vllm``)
pages its cache within ``sampler.gpu_memory_utilization`` itself. Sliding-window and latent
(MLA) attention keep less: for them the figure is an upper bound.

A pure module: it imports nothing of mintrl and no tensor library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# bytes per element of the dtype names the configs use (model.dtype, sampler.dtype, vLLM's dtype)
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of ``dtype``: a name of :data:`DTYPE_BYTES` or a ``torch.dtype``
    (``torch.float32`` -> 4).

    Raises:
        ValueError: an unknown dtype (the message lists the known names).
    """
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype {name!r} has no known width: one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


def kv_bytes_per_token(config: Mapping[str, Any] | Any, dtype_bytes: int = 4) -> int:
    """KV-cache bytes of one token of one row: ``layers x kv_heads x head_dim x 2 (K, V) x dtype_bytes``.

    Args:
        config: a Hugging Face model config (``PretrainedConfig``) or its ``config.json`` as a dict;
            a multimodal config's ``text_config`` is used when present. Fields read:
            ``num_hidden_layers``, ``num_key_value_heads`` (default ``num_attention_heads``: no
            grouped-query attention), ``head_dim`` (default, or when null,
            ``hidden_size / num_attention_heads``).
        dtype_bytes: bytes per cached element (4 fp32, 2 bf16 / fp16; :func:`dtype_bytes`).

    Returns:
        bytes per token (229,376 for Qwen3-1.7B in fp32, 46,080 for SmolLM2-135M).

    Raises:
        ValueError: the config lacks ``num_hidden_layers``, ``num_attention_heads`` or (without
            ``head_dim``) ``hidden_size``.
    """

    def field(name: str) -> Any:
        return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)

    text = field("text_config")
    if text is not None:
        return kv_bytes_per_token(text, dtype_bytes)
    layers, heads = field("num_hidden_layers"), field("num_attention_heads")
    head_dim = field("head_dim") or (field("hidden_size") // heads if heads and field("hidden_size") else None)
    if not layers or not heads or not head_dim:
        raise ValueError(
            "the model config needs num_hidden_layers, num_attention_heads and head_dim (or hidden_size) "
            f"to size its KV cache, got {layers=}, {heads=}, {head_dim=}"
        )
    kv_heads = field("num_key_value_heads") or heads
    return int(layers) * int(kv_heads) * int(head_dim) * 2 * int(dtype_bytes)


def check_kv_budget(
    config: Mapping[str, Any] | Any, *, rows: int, tokens: int, dtype_bytes: int, max_kv_gb: float
) -> None:
    """Refuse an HF-sampler batch whose KV cache exceeds ``max_kv_gb`` (``sampler.max_kv_gb``).

    A batch of ``rows`` rows (``sampler.max_batch_size``) of up to ``tokens`` tokens each
    (``data.prompts.max_prompt_tokens + rollout.max_response_tokens``) caches
    ``rows x tokens x`` :func:`kv_bytes_per_token` bytes.

    Args:
        config: the policy's Hugging Face config (object or ``config.json`` dict).
        rows: rows per forward batch (count). tokens: longest row, prompt + response (tokens).
        dtype_bytes: bytes per cached element (4 fp32, 2 bf16).
        max_kv_gb: the budget (GB, 10^9 bytes).

    Raises:
        ValueError: over budget; the message gives the size (GB), the fields it comes from, how
            many rows would fit, and what to change (lower ``sampler.max_batch_size`` or
            ``rollout.max_response_tokens``, or use ``sampler=vllm``).
    """
    per_token = kv_bytes_per_token(config, dtype_bytes)
    need = rows * tokens * per_token
    if need <= max_kv_gb * 1e9:
        return
    fit = int(max_kv_gb * 1e9 // (tokens * per_token))
    raise ValueError(
        f"sampler=hf: one batch's KV cache is {need / 1e9:.1f} GB > sampler.max_kv_gb={max_kv_gb} "
        f"(sampler.max_batch_size={rows} rows x {tokens} tokens of data.prompts.max_prompt_tokens + "
        f"rollout.max_response_tokens x {per_token} bytes/token "
        f"at {dtype_bytes} bytes per element): lower sampler.max_batch_size (at most {fit} rows fit) or "
        "rollout.max_response_tokens, sample in bf16 (sampler.dtype=bf16), or use sampler=vllm (a paged "
        "cache within sampler.gpu_memory_utilization); raise sampler.max_kv_gb only if the memory is there"
    )
