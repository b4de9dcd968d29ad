"""The offline single-GPU check (``benchmarks/gpu_check.sh`` runs it): main-job steps with the HF
sampler on randomly initialised models of the embedded model's architecture and of a 1.7B one, full
weights and LoRA, one FSDP update, and full-weight steps on rollouts one step ahead from a sampler
worker process (``stale``), printing per part the step time split into generation and
update, peak GPU memory, generated tokens/s and the update's MFU.

No weights are downloaded: each model is built from its config with random weights (the timing and
memory of a step do not depend on the values; rewards of a random model are 0, and its responses
run to the length limit, which makes every step the same size). The tokenizer is the embedded
model's (copied into ``.gpu-wheels/tokenizer`` by ``make gpu-wheels``; ids fit both vocabularies).

    python benchmarks/gpu_check.py --device cuda                    # everything (what gpu_check.sh runs)
    python benchmarks/gpu_check.py --device cpu --steps 1 --archs tiny --parts full,lora,fsdp-lora   # the wiring, on CPU

MFU of the update: the FLOPs the update actually does (:func:`update_flops`: the body's matmuls
on the tokens forwarded, each group's prompt once under ``module.share_prompts``, causal attention,
and the LM head on response positions only; forward + backward, the backward without weight
gradients of a LoRA policy's frozen base) over ``update seconds x peak`` (the GPU's dense bf16 peak,
:func:`peak_tflops_for`, or ``--peak-tflops``); not reported for an unknown GPU or on CPU.

Before any work, the installed torch, transformers, lightning and peft are checked against the
floors of ``pyproject.toml``, and for every API of a recent release the code calls (:data:`API_FLOORS`). Each part runs on its own: one that raises is recorded in the JSON
(``error``, ``traceback_tail``) and the others still run; the exit status is then 1. The JSON is
rewritten after every part, so a run stopped by ``timeout`` keeps the parts it finished.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.metadata
import json
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import lightning.pytorch as L
import torch
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("MINTRL_CONFIG_DIR", str(ROOT / "configs"))

# architectures (Hugging Face configs, no weights): the embedded SmolLM2-135M-Instruct, Qwen3-1.7B,
# and a tiny Llama for the CPU wiring check
ARCHS = {
    "smollm2_135m": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    ),
    "qwen3_1.7b": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    ),
    "tiny": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    ),
}
# dense (no sparsity) bf16 tensor-core peak in TFLOP/s by GPU, from NVIDIA's data sheets, matched in
# order on torch.cuda.get_device_name() (case-insensitive, whole words: "L4" is not "L40S", "H20" not
# "H200"); an SXM H100 reports "NVIDIA H100 80GB HBM3", the PCIe one "NVIDIA H100 PCIe"
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"\bH100\b.*\bNVL\b", 835.0),
    (r"\bH100\b.*\bPCIe\b", 756.0),
    (r"\bH100\b", 989.0),  # SXM
    (r"\bH200\b.*\bNVL\b", 835.0),
    (r"\bH200\b", 989.0),  # SXM
    (r"\bH20\b", 148.0),
    (r"\bA100\b", 312.0),  # SXM and PCIe
    (r"\bL40S\b", 362.0),
    (r"\bA10G\b", 125.0),
    (r"\bL4\b", 121.0),
    (r"\bRTX 4090\b", 165.2),  # fp32 accumulation
)
# the packages whose floors (pyproject.toml [project] dependencies) main() checks before any work;
# vLLM is not used by any part
CHECKED_PACKAGES = ("torch", "transformers", "lightning", "peft")


class ApiFloor(NamedTuple):
    """An API of a recent release that mintrl calls, and the release that introduced it: the
    package's floor in pyproject.toml must be at least ``release``.

    Attributes:
        package: the distribution (``torch``).
        api: ``module:attribute`` (``torch.nn.utils:get_total_norm``), or ``module:callable(param)``
            when the API is a keyword ``param`` of that callable's signature.
        release: the first release with it (a version string).
        source: where the release is stated (a pull request or release notes) and which code calls it.
    """

    package: str
    api: str
    release: str
    source: str


# every API of a recent release the code calls, with the release that introduced it (the pull
# request that added it and the release it first shipped in); main() checks that the installed
# packages have them, tests/unit/test_gpu_check.py that pyproject.toml's floors are not below them
API_FLOORS: tuple[ApiFloor, ...] = (
    ApiFloor(
        "torch", "torch.nn.utils:get_total_norm", "2.6", "pytorch#139662; mintrl.training.module.global_grad_norm"
    ),
    ApiFloor(
        "torch", "torch.distributed.fsdp:fully_shard", "2.6", "FSDP2 made public, pytorch#141868; training.distributed"
    ),
    ApiFloor(
        "torch", "torch.distributed.fsdp:register_fsdp_forward_method", "2.6", "pytorch#141868; training.distributed"
    ),
    ApiFloor("torch", "torch.distributed.fsdp:FSDPModule", "2.6", "pytorch#141868; sampler.weights.is_sharded"),
    ApiFloor("torch", "torch.distributed.fsdp:CPUOffloadPolicy", "2.6", "pytorch#141868; training.distributed"),
    ApiFloor("torch", "torch.distributed.device_mesh:init_device_mesh", "2.2", "torch 2.2 release notes; tests"),
    ApiFloor("torch", "torch.distributed.tensor:DTensor", "2.5", "DTensor public in torch 2.5; sampler.weights"),
    ApiFloor(
        "torch",
        "torch.distributed.checkpoint:load(no_dist)",
        "2.7",
        "no_dist back on the top-level DCP API, pytorch#145754; training.checkpointing (a sharded checkpoint in one process)",
    ),
    ApiFloor(
        "lightning",
        "lightning.pytorch.strategies:ModelParallelStrategy",
        "2.4",
        "Lightning 2.4.0 release notes (experimental ModelParallelStrategy); trainer=fsdp",
    ),
    ApiFloor(
        "transformers",
        "transformers.modeling_layers:GradientCheckpointingLayer",
        "4.52",
        "transformers#37223; model.shared_prompts",
    ),
    ApiFloor(
        "transformers", "transformers.cache_utils:DynamicLayer", "4.54", "transformers#39106; model.shared_prompts"
    ),
    ApiFloor(
        "transformers",
        "transformers:DynamicCache(config)",
        "4.56",
        "one DynamicCache from the config, transformers#40276; model.shared_prompts",
    ),
)


def api_failures(table: Sequence[ApiFloor] = API_FLOORS) -> list[str]:
    """One line per API of ``table`` the installed packages lack (module missing, attribute
    missing, or keyword not in the callable's signature); empty when all are there."""
    import importlib
    import inspect

    lines = []
    for entry in table:
        module_name, _, attr = entry.api.partition(":")
        attr, _, param = attr.partition("(")
        param = param.rstrip(")")
        try:
            found = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as error:
            lines.append(f"{entry.package} has no {entry.api} (since {entry.release}: {entry.source}): {error}")
            continue
        if param and param not in inspect.signature(found).parameters:
            lines.append(
                f"{entry.package}'s {module_name}.{attr} takes no {param}= (since {entry.release}: {entry.source})"
            )
    return lines


PARTS = ("full", "lora", "fsdp", "fsdp-lora", "stale")
# the "stale" part: full-weight steps with the rollouts one step ahead, sampled by a worker process holding its
# copy of the weights on the same GPU (one GPU here; on a machine with two, sampler.own_device=cuda:1)
STALE = ["rollout.max_staleness=1", "sampler.own_process=true"]
# the main job's step at its own sizes: 8 prompts x 4 rollouts, 64-token responses (configs/train.yaml)
# (no validation, no checkpoint / export / records written: the step alone is measured)
STEP = [
    "validate_at_start=false",
    "+trainer.limit_val_batches=0",
    "rollout.progress=false",
    "~logger",
    *(f"callbacks.{name}=null" for name in ("progress", "best", "checkpoint", "hf_export", "records", "summary")),
]


def build_random_model(arch: str, folder: Path, tokenizer_dir: Path, device: str) -> Path:
    """Save a randomly initialised model of ``arch`` (bf16 on CUDA, fp32 on CPU) plus the tokenizer
    into ``folder``; returns it."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    spec = dict(ARCHS[arch])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(folder)
    del model
    return folder


# ------------------------------------------------------------------ the update's FLOPs, the GPU's peak, versions


class ModelDims(NamedTuple):
    """The sizes of a decoder-only transformer of the Llama / Qwen3 layout (grouped-query attention
    with q, k, v, o projections, a gated MLP of gate, up and down projections, no biases) that its
    FLOPs depend on.

    Attributes:
        layers: decoder layers.
        hidden: model width (elements per token).
        intermediate: MLP width.
        heads, kv_heads: query and key/value heads.
        head_dim: elements per head (``heads x head_dim`` is the query width, ``hidden`` for Llama).
        vocab: LM-head outputs.
        tied: the head shares the embedding's weight; its matmul, and so the FLOP count, is the same.
    """

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True

    @classmethod
    def from_config(cls, config: Mapping) -> ModelDims:
        """From a Hugging Face config's fields (``num_hidden_layers``, ``hidden_size``,
        ``intermediate_size``, ``num_attention_heads``, ``vocab_size``; ``num_key_value_heads``
        defaults to the heads, ``head_dim`` to ``hidden_size / heads``, ``tie_word_embeddings`` to
        True), e.g. an :data:`ARCHS` entry or ``config.to_dict()``.

        Raises:
            KeyError: a required field is missing.
        """
        heads = int(config["num_attention_heads"])
        return cls(
            layers=int(config["num_hidden_layers"]),
            hidden=int(config["hidden_size"]),
            intermediate=int(config["intermediate_size"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", True)),
        )

    @property
    def matmul_params(self) -> int:
        """Weights of the body's matmuls (count): per layer q ``hidden x heads x head_dim``, k and v
        ``hidden x kv_heads x head_dim`` each, o ``heads x head_dim x hidden``, gate, up and down
        ``hidden x intermediate`` each. No embedding, LM head, norms or biases."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.layers * (2 * self.hidden * q + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate)


def update_flops(
    dims: ModelDims,
    prompt_lengths: Sequence[int],
    response_lengths: Sequence[Sequence[int]],
    share_prompts: bool,
    lora_params: int | None = None,
) -> int:
    """FLOPs (a multiply-add counts 2) of one forward + backward of the policy over a batch, as
    mintrl's forward (:func:`mintrl.model.logprobs.token_logprobs`) does it: the model FLOPs of the
    main job's update with its defaults (one update per rollout batch, its log-probs recomputed by
    that same forward, no reference-model pass).

    Args:
        dims: the model.
        prompt_lengths: ``[G]`` each group's prompt, in tokens.
        response_lengths: ``[G][rows of the group]`` each row's response, in tokens (all of them LM-head
            targets).
        share_prompts: each group's prompt is forwarded once and its rows' responses continue from
            its KV cache (``module.share_prompts``, :mod:`mintrl.model.shared_prompts`); False: every
            row forwards its prompt and its response.
        lora_params: None for full fine-tuning; for a LoRA policy, its adapter's parameters (count),
            all in the body's linear layers (``target_modules: all-linear`` leaves the head out).

    Returns:
        ``F = m (2 W T + 2 h V R) + 3 x 4 l q C + 6 A T`` FLOPs, with ``W`` =
        :attr:`ModelDims.matmul_params`; ``T`` the tokens the body forwards (shared:
        ``sum_g (P_g + sum_i R_gi)``, else ``sum_g sum_i (P_g + R_gi)``); ``h`` the hidden size and
        ``V`` the vocabulary, the head running on the ``R = sum R_gi`` response positions only;
        ``l`` layers, ``q = heads x head_dim``; ``C`` the keys attended, summed over the tokens
        forwarded, causally (the ``t``-th token of a sequence attends ``t`` keys: prompt token ``t``
        ``t`` keys, response token ``j`` ``P_g + j``, shared or not), ``QK^T`` and ``PV`` each
        ``2 q`` FLOPs per key in the forward and twice that in the backward (x 3 in all, also under
        LoRA: no weights, but the gradient flows through); ``m`` = 3 for full fine-tuning (forward
        2, backward 4: input and weight gradients, per weight per token) and 2 for LoRA (the frozen
        base and head get input gradients only); ``A = lora_params`` (0 for full), forward 2 +
        backward 4 per adapter weight per body token.

        Not counted: embedding lookups, norms, rotary embeddings, activations, softmax and the loss
        (``O(h)`` or ``O(V)`` per token); padding columns; the LM head's recomputation in the backward
        pass (activation checkpointing, ``2 h V`` per response position: hardware, not model FLOPs);
        layer 0's input gradients, which autograd skips under LoRA (at most ``2 x`` its q, k, v weights
        per token). Attention kernels that compute masked blocks do more work than ``C`` counts.

    Raises:
        ValueError: ``response_lengths`` does not have one list per group, a length is negative, or
            ``lora_params`` is negative.
    """
    if len(prompt_lengths) != len(response_lengths):
        raise ValueError(
            f"need one list of response lengths per group, got {len(response_lengths)} for {len(prompt_lengths)} prompts"
        )
    if any(p < 0 for p in prompt_lengths) or any(r < 0 for rows in response_lengths for r in rows):
        raise ValueError("prompt and response lengths must be non-negative")
    if lora_params is not None and lora_params < 0:
        raise ValueError(f"lora_params must be non-negative, got {lora_params}")

    def keys(first: int, last: int) -> int:  # sum of t for t = first..last (0 when empty)
        return (first + last) * (last - first + 1) // 2 if last >= first else 0

    tokens = keys_attended = head_positions = 0
    for p, rows in zip(prompt_lengths, response_lengths):
        copies = 1 if share_prompts else len(rows)  # forwards of the group's prompt
        tokens += copies * p + sum(rows)
        keys_attended += copies * keys(1, p) + sum(keys(p + 1, p + r) for r in rows)
        head_positions += sum(rows)
    m = 2 if lora_params is not None else 3
    matmul = 2 * dims.matmul_params * tokens + 2 * dims.hidden * dims.vocab * head_positions
    attention = 4 * dims.layers * dims.heads * dims.head_dim * keys_attended
    return m * matmul + 3 * attention + 6 * (lora_params or 0) * tokens


def update_shape(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    target_mask: torch.Tensor,
    micro_batch_rows: int | None,
    share: bool,
) -> list[tuple[list[int], list[list[int]], bool]]:
    """What the update forwards, per micro-batch of ``micro_batch_rows`` rows
    (:meth:`mintrl.training.module.PolicyModule.accumulate`), as :func:`update_flops` takes it:
    ``(prompt lengths per group, response lengths per row of each group, shared)``, lengths in tokens.

    As :func:`mintrl.model.shared_prompts.shared_prompt_hidden` decides: with ``share`` on and some
    prompt (the tokens before a row's first target) repeated among a micro-batch's rows with a
    target, those rows are grouped by prompt and rows without a target are not forwarded (shared);
    otherwise every row is its own group (the plain forward).

    Args:
        input_ids: ``[N, L]`` token ids, right or left padded. attention_mask: ``[N, L]``.
        target_mask: ``[N, L]`` bool, the positions whose log-probs are computed (the batch's
            ``scored_mask``; column 0 is never a target).
        micro_batch_rows: rows per forward; None: all at once.
        share: prompt sharing is on for this policy (``module.share_prompts``, not sharded).
    """
    from mintrl.model.shared_prompts import first_token_columns, prompt_lengths

    target = target_mask.clone()
    target[:, 0] = False
    start = first_token_columns(attention_mask)
    plen = prompt_lengths(attention_mask, target)
    end = start + attention_mask.sum(-1)
    step = micro_batch_rows or input_ids.shape[0]
    shape = []
    for s in range(0, input_ids.shape[0], step):
        rows = range(s, min(s + step, input_ids.shape[0]))
        groups: dict[tuple[int, ...], list[int]] = {}
        for i in rows:
            if target[i].any():
                groups.setdefault(tuple(input_ids[i, start[i] : plen[i]].tolist()), []).append(i)
        if share and sum(map(len, groups.values())) > len(groups):
            shape.append(
                ([len(k) for k in groups], [[int(end[i] - plen[i]) for i in g] for g in groups.values()], True)
            )
        else:
            shape.append(([int(plen[i] - start[i]) for i in rows], [[int(end[i] - plen[i])] for i in rows], False))
    return shape


def median_mfu(flops: Sequence[float | None], seconds: Sequence[float], peak: float | None) -> float | None:
    """Median over the steps after the first (a warm-up) of ``flops / (seconds x peak)`` (a
    fraction); None without a peak (FLOP/s) or FLOP counts."""
    pairs = list(zip(flops, seconds))
    pairs = pairs[1:] if len(pairs) > 1 else pairs
    if not peak or not pairs or any(f is None for f, _ in pairs):
        return None
    return statistics.median(f / (t * peak) for f, t in pairs)


def peak_tflops_for(name: str) -> float | None:
    """Dense bf16 peak (TFLOP/s) of the GPU called ``name`` (``torch.cuda.get_device_name()``) by
    :data:`PEAK_TFLOPS`; None when no entry matches."""
    return next((t for pattern, t in PEAK_TFLOPS if re.search(pattern, name, re.IGNORECASE)), None)


def peak_flops(device: str, override: float | None, name: str | None = None) -> float | None:
    """bf16 dense peak FLOP/s for the MFU: ``override`` TFLOP/s when given, else by the GPU's name
    (``name``, default the current CUDA device's); None on CPU, and for an unknown GPU (with a
    printed note: the MFU is then not reported)."""
    if override is not None:
        return override * 1e12
    if device != "cuda":
        return None
    name = name or torch.cuda.get_device_name()
    tflops = peak_tflops_for(name)
    if tflops is None:
        print(f"note: no bf16 peak known for {name!r}: MFU not reported (give --peak-tflops)", flush=True)
        return None
    return tflops * 1e12


def project_floors(pyproject: Path, names: Sequence[str]) -> dict[str, str]:
    """``{name: minimum version}`` of ``names`` from the ``>=`` clauses of ``pyproject``'s
    ``[project] dependencies``; a name without one is left out.

    Raises:
        OSError: ``pyproject`` cannot be read. KeyError: it has no ``[project] dependencies``.
    """
    text = pyproject.read_text()
    try:
        import tomllib

        deps = tomllib.loads(text)["project"]["dependencies"]
    except ModuleNotFoundError:  # python 3.10: the quoted strings of the [project] dependencies list
        block = re.search(r"^\[project\].*?^dependencies\s*=\s*\[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
        if block is None:
            raise KeyError("dependencies") from None
        deps = re.findall(r'^\s*"([^"]+)"', block.group(1), re.MULTILINE)
    floors = {}
    for dep in deps:
        req = Requirement(dep)
        if req.name.lower() in names:
            floor = [s.version for s in req.specifier if s.operator == ">="]
            if floor:
                floors[req.name.lower()] = floor[0]
    return floors


def version_failures(floors: Mapping[str, str], installed: Mapping[str, str | None] | None = None) -> list[str]:
    """One line per package of ``floors`` (``{name: minimum version}``) that is missing, older, or
    of an unreadable version; empty when all are fine. ``installed`` (``{name: version or None}``,
    for tests) defaults to what ``importlib.metadata`` finds. Local and pre-release versions compare
    by ``packaging.version`` (``2.13.0.dev1+cu130`` is above ``2.4``)."""
    lines = []
    for name, floor in floors.items():
        if installed is None:
            try:
                have = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                have = None
        else:
            have = installed.get(name)
        if have is None:
            lines.append(f"{name} is not installed (needs >={floor})")
            continue
        try:
            if Version(have) < Version(floor):
                lines.append(f"{name} {have} is older than the project's floor >={floor}")
        except InvalidVersion:
            lines.append(f"{name} has an unreadable version {have!r} (needs >={floor})")
    return lines


class UpdateMeter(L.Callback):
    """Per training batch: its attended tokens (prompt + response, all rows), what the update
    forwards (:func:`update_shape`) and its FLOPs (:func:`update_flops`; None unless the module
    makes one update per batch, the main job's default), and the update's wall time (the training
    step, after the rollouts were generated; CUDA synchronised).

    Args:
        dims: the policy's sizes.
        lora_params: the adapter's parameters of a LoRA policy (count); None for full fine-tuning.
    """

    def __init__(self, dims: ModelDims, lora_params: int | None):
        self.dims, self.lora_params = dims, lora_params
        self.tokens: list[int] = []
        self.flops: list[int | None] = []
        self.batches: list[list[dict]] = []
        self.seconds: list[float] = []
        self._start = 0.0

    def _sync(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        from mintrl.model.shared_prompts import CACHE_ARG

        # the module shares prompts unless sharded; older transformers run the plain forward instead
        share = module._share(module.policy) and CACHE_ARG == "cache"
        shape = update_shape(batch.input_ids, batch.attention_mask, batch.scored_mask, module.micro_batch_rows, share)
        self.tokens.append(int(batch.attention_mask.sum()))
        self.batches.append([{"prompts": p, "responses": r, "shared": s} for p, r, s in shape])
        one_update = module.updates_per_batch == 1
        self.flops.append(
            sum(update_flops(self.dims, p, r, s, self.lora_params) for p, r, s in shape) if one_update else None
        )
        self._sync()
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._sync()
        self.seconds.append(time.perf_counter() - self._start)


def run_steps(
    folder: Path, lora: bool, steps: int, device: str, out: Path, dims: ModelDims, stale: bool = False
) -> dict:
    """``steps`` main-job steps (MInTRL-Const, rule judge, HF sampler) on the model in ``folder``
    (of sizes ``dims``): fp32 master weights, bf16 autocast on CUDA (``trainer=gpu``); with ``stale``
    the rollouts one step ahead from a sampler worker process (:data:`STALE`). Returns per-step lists
    (generation and update seconds, generated tokens/s, attended tokens, the update's FLOPs and what
    it forwarded, each batch's staleness in optimizer steps), parameter counts and the peak GPU memory
    (GiB, the trainer's process only)."""
    from hydra import compose, initialize_config_dir

    from mintrl.build.components import build_components
    from mintrl.model.lora import trainable_parameter_count

    overrides = [
        "model=hf",
        f"model.path={folder}",
        f"trainer={'gpu' if device == 'cuda' else 'cpu'}",
        f"trainer.max_steps={steps}",
        f"paths.output_dir={out}",
        *STEP,
        *(["model/lora=default", "module.optimizer.lr=2e-4"] if lora else []),
        *(STALE if stale else []),
    ]
    with initialize_config_dir(config_dir=os.environ["MINTRL_CONFIG_DIR"], version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    torch.manual_seed(0)
    c = build_components(cfg)
    trainable, total = trainable_parameter_count(c.context.policy)
    meter = UpdateMeter(dims, trainable if lora else None)
    c.trainer.callbacks.append(meter)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    c.trainer.fit(c.module, datamodule=c.datamodule)
    wall = time.perf_counter() - start
    hist = c.module.history
    result = {
        "steps": len(hist),
        "wall_s": wall,
        "gen_s": [h.get("perf/gen_seconds", float("nan")) for h in hist],
        "update_s": meter.seconds,
        "gen_tokens_per_s": [h.get("perf/gen_tokens_per_s", float("nan")) for h in hist],
        "staleness": [h.get("train/staleness", float("nan")) for h in hist],
        "step_s": [h.get("perf/step_seconds", float("nan")) for h in hist],
        "tokens": meter.tokens,
        "update_flops": meter.flops,
        "update_batches": meter.batches,
        "params": total,
        "trainable": trainable,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
    }
    return result


def fsdp_step(folder: Path, lora: bool, device: str, out: Path) -> dict:
    """One FSDP update (``trainer=fsdp``'s strategy, :func:`mintrl.training.distributed.fsdp_strategy`:
    FSDP2 through Lightning's ``ModelParallelStrategy``, on one device; bf16-mixed on CUDA, fp32 on
    CPU, where the rank's process group is gloo) on a fixed batch of 32 rows (100 prompt + 64
    response tokens) and the HF export it gathers; no generation (vLLM is not on this machine).
    Records the strategy's class and whether the policy was sharded; a process group this step
    started is destroyed when it ends."""
    from torch.utils.data import DataLoader

    from mintrl.core.batch import RolloutBatch
    from mintrl.model.loading import load_policy
    from mintrl.model.lora import LoraSettings
    from mintrl.objective import GRPO
    from mintrl.sampler.weights import is_sharded
    from mintrl.training.callbacks.export import HFExport
    from mintrl.training.distributed import fsdp_strategy
    from mintrl.training.module import PolicyModule

    loaded = load_policy(str(folder), dtype="float32", lora=LoraSettings() if lora else None)
    n, p, r = 32, 100, 64
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (n, p + r), generator=g)
    resp = torch.zeros(n, p + r, dtype=torch.bool)
    resp[:, p:] = True
    batch = RolloutBatch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        response_mask=resp,
        intervention_mask=torch.zeros_like(resp),
        rollout_logprobs=-torch.rand(n, p + r, generator=g) * resp,
        rewards=torch.tensor([1.0, 0.0] * (n // 2)),
        group_index=torch.arange(n) // 4,
        is_control=torch.ones(n, dtype=torch.bool),
        num_groups=n // 4,
        finished=torch.ones(n, dtype=torch.bool),
        behaviour_logprobs=torch.zeros(n, p + r),
        temperature=1.0,
        step=0,
    )

    class Fixed(L.LightningDataModule):
        def train_dataloader(self):
            return DataLoader([batch] * 4, batch_size=None, collate_fn=lambda x: x)

    module = PolicyModule(
        loaded.model, GRPO(), functools.partial(torch.optim.AdamW, lr=1e-5), micro_batch_rows=8, tokenizer=None
    )
    export = HFExport(str(out / "hf_policy"))
    strategy = fsdp_strategy()
    had_group = torch.distributed.is_available() and torch.distributed.is_initialized()
    environ = dict(os.environ)  # Lightning sets MASTER_ADDR / MASTER_PORT / ranks here: put back after the part
    trainer = L.Trainer(
        max_steps=1,
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        strategy=strategy,
        precision="bf16-mixed" if device == "cuda" else "32-true",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        callbacks=[export],
    )
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        trainer.fit(module, datamodule=Fixed())
        wall = time.perf_counter() - start
        sharded = is_sharded(module.policy)
    finally:
        if not had_group and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        # a later part or a later run in this process would otherwise rendezvous on this part's port, which the
        # store of this process group may still hold (EADDRINUSE)
        os.environ.clear()
        os.environ.update(environ)
    return {
        "strategy": type(trainer.strategy).__name__,
        "sharded": sharded,
        "wall_s": wall,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "exported": sorted(os.listdir(export.saved_to)),
        "adapter": sorted(os.listdir(export.adapter_saved_to)) if export.adapter_saved_to else None,
    }


def free_memory(device: str) -> None:
    """Free what a finished part left: its model, optimizer state and trainer are unreachable once
    it returned or raised, but Lightning's trainer and module refer to each other, so only the cycle
    collector frees them; then CUDA's cached blocks go back and the peak counter restarts, so the
    next part's peak counts its own tensors only."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def report(r: dict) -> str:
    """A main-job part's summary line (after its name): medians over the steps after the first (the
    first warms kernels up), and ``r["mfu"]`` (a fraction, or None); the measured step time
    (``perf/step_seconds``: less than generation + update where the two overlap, the ``stale`` part)
    and each step's staleness."""

    def med(xs):
        xs = xs[1:] if len(xs) > 1 else xs
        return statistics.median(xs) if xs else float("nan")

    gen, upd = med(r["gen_s"]), med(r["update_s"])
    mem = f"{r['peak_gib']:.1f} GiB" if r["peak_gib"] is not None else "n/a (cpu)"
    return (
        f"step {gen + upd:6.2f} s = generation {gen:6.2f} s + update {upd:6.2f} s | "
        f"gen {med(r['gen_tokens_per_s']):8.0f} tok/s | peak {mem} | update MFU "
        + (f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a")
        + f" | trainable {r['trainable'] / 1e6:.3g}M of {r['params'] / 1e6:.4g}M"
        + (f" | measured step {med(r['step_s']):6.2f} s, staleness {r['staleness']}" if r.get("step_s") else "")
    )


def failure(error: BaseException) -> dict:
    """A failed part's record: ``error`` (``"<type>: <message>"``) and ``traceback_tail`` (the last
    lines of its traceback)."""
    lines = "".join(traceback.format_exception(type(error), error, error.__traceback__)).splitlines()
    return {"error": f"{type(error).__name__}: {error}", "traceback_tail": "\n".join(lines[-20:])}


def run_part(part: str, folder: Path, args, out: Path, dims: ModelDims, peak: float | None) -> tuple[dict, str]:
    """One part (``full``, ``lora``, ``fsdp``, ``fsdp-lora``, ``stale``) on the model in ``folder``: its
    results and its summary line."""
    if part.startswith("fsdp"):
        r = fsdp_step(folder, part == "fsdp-lora", args.device, out)
        line = f"one FSDP update + export {r['wall_s']:6.2f} s | peak " + (
            f"{r['peak_gib']:.1f} GiB" if r["peak_gib"] is not None else "n/a (cpu)"
        )
        return r, line
    r = run_steps(folder, part == "lora", args.steps, args.device, out, dims, stale=part == "stale")
    r["mfu"] = median_mfu(r["update_flops"], r["update_s"], peak)
    return r, report(r)


def main(argv=None) -> int:
    """Runs the check (see the module docstring).

    Returns:
        0 when every part ran; 1 when some part raised (its ``error`` and ``traceback_tail`` in the
        JSON, the other parts' results beside it); 2 before any work when a package of
        :data:`CHECKED_PACKAGES` is below the project's floor or missing, an API of
        :data:`API_FLOORS` is missing, or ``--device cuda`` sees no GPU. Unknown ``--archs`` / ``--parts`` exit through argparse (status 2).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per part (the first is warm-up)")
    parser.add_argument("--archs", default="smollm2_135m,qwen3_1.7b", help=f"comma list of {sorted(ARCHS)}")
    parser.add_argument("--parts", default="full,lora,fsdp-lora,stale", help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--tokenizer", default=str(ROOT / ".gpu-wheels" / "tokenizer"))
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU (default: by name)")
    parser.add_argument("--json", default=None, help="also write the results here (after every part)")
    args = parser.parse_args(argv)
    archs, parts = args.archs.split(","), args.parts.split(",")
    for kind, names, known in (("arch", archs, ARCHS), ("part", parts, PARTS)):
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown {kind} {', '.join(unknown)} (choose from {', '.join(known)})")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        parser.error(f"--peak-tflops must be > 0, got {args.peak_tflops}")
    failures = version_failures(project_floors(ROOT / "pyproject.toml", CHECKED_PACKAGES))
    failures += api_failures()
    for line in failures:
        print(f"gpu_check: {line} (pyproject.toml)", file=sys.stderr)
    if failures:
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible", file=sys.stderr)
        return 2
    peak = peak_flops(args.device, args.peak_tflops)
    results, lines = {}, []

    def record(name: str, r: dict, line: str) -> None:
        results[name] = r
        lines.append(f"{name:<22} {line}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))

    with tempfile.TemporaryDirectory(prefix="mintrl-gpu-check-") as tmp:
        for arch in archs:
            try:
                folder = build_random_model(arch, Path(tmp) / arch, Path(args.tokenizer), args.device)
                built = None
                free_memory(args.device)  # the model written to the folder, before the first part's peak
            except Exception as e:  # every part of this architecture fails the same way
                built = failure(e)
            for part in parts:
                name, t0 = f"{arch}/{part}", time.perf_counter()
                if built is not None:
                    r = dict(built)
                else:
                    try:
                        r, line = run_part(
                            part, folder, args, Path(tmp) / "runs" / name, ModelDims.from_config(ARCHS[arch]), peak
                        )
                    except Exception as e:  # the part failed: recorded, the next one still runs
                        r = failure(e)
                if "error" in r:
                    line = "FAILED " + r["error"].splitlines()[0][:300]
                free_memory(args.device)  # the part's model, before the next part measures its peak
                record(name, r, line)
                print(lines[-1], f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    failed = [name for name, r in results.items() if "error" in r]
    print("\n== summary (" + (torch.cuda.get_device_name() if args.device == "cuda" else "cpu") + ")")
    print("\n".join(lines))
    if failed:
        print(f"{len(failed)} of {len(results)} parts failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
