"""The memory plan: estimated device bytes per part of a composed training config, before anything loads.

Every number comes from the config and the models' architecture numbers (``config.json``: hidden size,
layers, heads, KV heads, head dim, intermediate size, vocabulary, tied head), never from loaded
weights: a local folder's ``config.json`` is read with ``transformers.AutoConfig`` (no weights), a hub
id with no local copy from :data:`KNOWN_ARCHITECTURES` (the paper presets' models, each with its
source), the embedded SmolLM2-135M-Instruct from the same table. Units: bytes everywhere; GiB
(2^30 bytes) only when printed.

Parts (each with the phases it is alive in; the peak is the largest phase's sum):

- **policy weights** ``P x bytes(model.dtype)``, ``/ world`` under ``trainer=fsdp`` (``P`` the
  parameter count of :func:`parameter_count`; these are the fp32 master weights when
  ``model.dtype=float32``: ``bf16-mixed`` autocasts, it keeps no second copy); a LoRA policy adds its
  adapter, ``P_lora x 4`` (peft keeps adapters in fp32).
- **gradients** ``P_train x bytes(param)``, ``/ world`` under FSDP; update phase only (freed at
  ``zero_grad``).
- **optimizer state** ``P_train x bytes(param) x moments`` (AdamW / Adam: 2, SGD with momentum: 1),
  ``/ world`` under FSDP.
- **activations** of one micro-batch at the longest row: ``rows = module.micro_batch_rows`` (null: the
  whole mini-batch of one rank: ``data.prompts_per_step`` is split over the ranks), ``T = data.prompts.max_prompt_tokens + rollout.max_response_tokens``;
  per token and layer (:func:`layer_activation_bytes`, SDPA / FlashAttention: no ``[T, T]`` scores)
  ``2 r H + 2 w H + w (3 q + 3 kv) + 4 w I`` (``r`` residual width = the weights', ``w`` the compute
  width, 2 under ``bf16-mixed``); without checkpointing ``layers x that``; with
  ``module.gradient_checkpointing`` ``layers x r H`` (the saved layer inputs) plus one layer's
  ``that`` (its recomputation); plus the final norm's ``(r + w) H``.
- **LM-head block** ``3 x module.logprob_chunk_tokens x V x 4`` (fp32 logits, their softmax or
  gradient, one more buffer; :mod:`mintrl.model.logprobs`).
- **FSDP gathered units**: the largest unit (the embedding, or one decoder layer) at full size, twice
  (the current one and the prefetched one); update phase.
- **vLLM engine** (``sampler=vllm``): ``sampler.gpu_memory_utilization x device`` while awake, of
  which its weights ``P x bytes(sampler.dtype or model.dtype)`` and the KV cache the rest; asleep
  (``sampler.sleep_mode``) during the update, else held then too. The KV budget must hold one
  ``sampler.max_model_len`` row.
- **HF sampler** (``sampler=hf``): its bf16 sampling copy (``P x 2`` when it samples from one), one
  batch's KV ``sampler.max_batch_size x T x`` :func:`mintrl.model.kv_cache.kv_bytes_per_token`, and
  the continuation cache ``sampler.continuation_cache_mib``.
- **teacher models** (``judge=teacher``, ``intervention=teacher``, ``objective.teacher``): each
  distinct ``(path, dtype)`` once, ``P_t x bytes(dtype)``; **step-0 copy** (GRPO/LUFFY ``kl_coef > 0``,
  self-privileged judge or intervention without a teacher, the OPD self-teacher) ``P x
  bytes(model.dtype)`` under full fine-tuning (a LoRA policy's step-0 model is itself with the adapter
  off: 0). What loads which model is declared by the components' classes (``context_models``).
- **judge / intervention KV and prefill**: a model judge generates with Hugging Face on rows of
  ``data.prompts.max_prompt_tokens + reviewed response + its new tokens`` (the reviewed response:
  ``rollout.max_reviews x rollout.chunk_size + (max_reviews - 1) x rollout.continuation_len``, capped at
  ``rollout.max_response_tokens``; a whole response in episodes or when an SFT stage reviews / writes
  ``sft.max_new_tokens``), ``judge.max_batch_size`` (``intervention.max_batch_size``) rows at once: KV
  ``rows x tokens x kv_bytes_per_token`` plus the prefill's one-layer working memory
  ``rows x tokens x w (2 H + 3 I)``. The judge and the intervention run one after the other: each is
  its own phase.

Not counted: the CUDA context, allocator fragmentation and kernel workspaces (``plan.reserve_gib``
is kept free for them), vLLM's own activation peak and CUDA graphs, the SFT stage's separate optimizer
and activations (it runs before RL with the same sizes or fewer), a frozen model's no-grad forward
(KL reference, OPD teacher: it runs before the micro-batches' backward), the judge template's own
tokens, the full state dict the vLLM push gathers under FSDP, and anything on the host.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mintrl.build.config import sequence_limits
from mintrl.build.config_checks import component_class
from mintrl.model.kv_cache import dtype_bytes, kv_bytes_per_token

log = logging.getLogger(__name__)

GIB = 2**30  # bytes per GiB
ROLLOUT, JUDGE, INTERVENTION, UPDATE = "rollout", "judge", "intervention", "update"
PHASES = (ROLLOUT, JUDGE, INTERVENTION, UPDATE)
ALL = frozenset(PHASES)
GENERATING = frozenset((ROLLOUT, JUDGE, INTERVENTION))
EMBEDDED = "embedded"  # model=smollm2_135m (no model.path) and teacher paths "embedded"
EMBEDDED_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_DEVICE_GIB = 80.0  # plan.device_memory_gib when the config states none (GiB)
DEFAULT_RESERVE_GIB = 2.0  # plan.reserve_gib when the config states none (GiB)


@dataclass(frozen=True)
class Architecture:
    """A dense decoder's architecture numbers, as its ``config.json`` states them (counts; no units).

    Attributes:
        hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
        intermediate_size, vocab_size: the config fields of those names (``head_dim`` defaults to
        ``hidden_size / num_attention_heads``, ``num_key_value_heads`` to ``num_attention_heads``).
        tie_word_embeddings: the LM head is the embedding matrix (no second ``V x H`` matrix).
        attention_bias: q, k, v, o projections have biases (Llama's ``attention_bias``).
        qkv_bias: q, k, v (not o) have biases (Qwen2).
        qk_norm: per-head RMSNorm on q and k (Qwen3: ``2 x head_dim`` weights per layer).
        source: where the numbers come from (a folder, or the table entry's source).
    """

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    source: str = ""

    @property
    def q_dim(self) -> int:
        """Query width ``heads x head_dim``."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Key (= value) width ``kv_heads x head_dim``."""
        return self.num_key_value_heads * self.head_dim

    def kv_config(self) -> dict[str, int]:
        """The fields :func:`mintrl.model.kv_cache.kv_bytes_per_token` reads."""
        return {
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
        }


# Architecture numbers of the models the presets name, for hub ids with no local copy (nothing is
# downloaded). Each as published in the model's config.json on the Hugging Face hub.
KNOWN_ARCHITECTURES: dict[str, Architecture] = {
    EMBEDDED_ID: Architecture(
        hidden_size=576,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        intermediate_size=1536,
        vocab_size=49152,
        tie_word_embeddings=True,
        source="huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct config.json (the embedded GGUF's numbers)",
    ),
    "Qwen/Qwen3-1.7B": Architecture(
        hidden_size=2048,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=6144,
        vocab_size=151936,
        tie_word_embeddings=True,
        qk_norm=True,
        source="huggingface.co/Qwen/Qwen3-1.7B config.json",
    ),
    "Qwen/Qwen3-4B-Instruct-2507": Architecture(
        hidden_size=2560,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=9728,
        vocab_size=151936,
        tie_word_embeddings=True,
        qk_norm=True,
        source="huggingface.co/Qwen/Qwen3-4B-Instruct-2507 config.json",
    ),
}


def architecture_from_config(config: Mapping[str, Any] | Any, source: str = "") -> Architecture:
    """The :class:`Architecture` of a Hugging Face config (a ``PretrainedConfig`` or its
    ``config.json`` dict; a multimodal config's ``text_config`` is used when present).

    Raises:
        ValueError: a field the plan needs is missing (the message names it).
    """

    def get(name: str, default: Any = None) -> Any:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        return default if value is None else value

    text = get("text_config")
    if text is not None:
        return architecture_from_config(text, source)
    missing = [n for n in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if get(n) is None]
    if get("intermediate_size") is None:
        missing.append("intermediate_size")
    if missing:
        raise ValueError(f"{source or 'model config'}: the memory plan needs {', '.join(missing)} in config.json")
    heads = int(get("num_attention_heads"))
    model_type = str(get("model_type", ""))
    return Architecture(
        hidden_size=int(get("hidden_size")),
        num_hidden_layers=int(get("num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(get("num_key_value_heads", heads)),
        head_dim=int(get("head_dim", int(get("hidden_size")) // heads)),
        intermediate_size=int(get("intermediate_size")),
        vocab_size=int(get("vocab_size")),
        tie_word_embeddings=bool(get("tie_word_embeddings", True)),
        attention_bias=bool(get("attention_bias", False)),
        qkv_bias=model_type == "qwen2",
        qk_norm=model_type.startswith("qwen3"),
        source=source,
    )


def resolve_architecture(path: str | None) -> Architecture | None:
    """The architecture of a configured model without loading it.

    Args:
        path: ``model.path`` / a teacher path: None or ``embedded`` (the embedded SmolLM2), a local
            folder (its ``config.json`` through ``transformers.AutoConfig``), or a hub id (the hub
            cache through ``AutoConfig(local_files_only=True)``, else :data:`KNOWN_ARCHITECTURES`).

    Returns:
        the architecture, or None when none of these knows the model, or its config lacks a field
        the plan needs (the plan then counts it as unknown and says so; it refuses nothing for it).
    """
    if path is None or str(path) == EMBEDDED:
        return KNOWN_ARCHITECTURES[EMBEDDED_ID]
    path = str(path)
    folder = Path(path).expanduser()
    if path in KNOWN_ARCHITECTURES and not (folder / "config.json").is_file():
        return KNOWN_ARCHITECTURES[path]
    from transformers import AutoConfig

    local = (folder / "config.json").is_file()
    try:
        config = AutoConfig.from_pretrained(str(folder) if local else path, local_files_only=True)
        return architecture_from_config(config, source=str(folder / "config.json") if local else f"{path} (hub cache)")
    except (OSError, ValueError) as err:  # not cached, not a decoder the plan knows: counted as unknown
        log.debug("memory plan: no architecture for %s: %s", path, err)
        return None


def parameter_count(arch: Architecture) -> int:
    """Parameters (count) of a Llama / Mistral / Qwen-family dense decoder:
    ``V H`` (embedding) ``+ layers x (H q + 2 H kv + q H + biases + 3 H I + 2 H + qk-norm)`` ``+ H``
    (final norm) ``+ V H`` (an untied LM head); equals ``sum(p.numel())`` of the transformers model
    for those families (tested on the meta device)."""
    h, q, kv, i = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h
    if arch.attention_bias:
        layer += q + 2 * kv + h
    elif arch.qkv_bias:
        layer += q + 2 * kv
    if arch.qk_norm:
        layer += 2 * arch.head_dim
    embedding = arch.vocab_size * h
    return embedding + arch.num_hidden_layers * layer + h + (0 if arch.tie_word_embeddings else embedding)


LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_parameter_count(arch: Architecture, r: int, target_modules: Any = "all-linear") -> int:
    """Parameters (count) of a LoRA adapter of rank ``r``: ``r x (in + out)`` for every targeted
    linear layer of every decoder layer (``all-linear``: :data:`LORA_MODULES`, the LM head excluded;
    or a list of those names)."""
    h, q, kv, i = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    shapes = {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }
    names = LORA_MODULES if target_modules in (None, "all-linear") else [str(n) for n in target_modules]
    return arch.num_hidden_layers * sum(int(r) * sum(shapes[n]) for n in names if n in shapes)


def layer_activation_bytes(arch: Architecture, residual_bytes: int, compute_bytes: int) -> int:
    """Bytes one token keeps for the backward in one decoder layer (no checkpointing):
    ``2 r H`` (the two RMSNorms' fp32-or-weights-width inputs) ``+ 2 w H`` (their outputs, read by the
    projections) ``+ w (q + 2 kv)`` (q, k, v) ``+ w (q + kv)`` (rotated q, k) ``+ w q`` (attention
    output) ``+ 4 w I`` (gate, up, act(gate), their product), with ``r = residual_bytes``,
    ``w = compute_bytes`` (92,160 for Qwen3-1.7B with fp32 weights under bf16-mixed)."""
    h, q, kv, i = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    r, w = residual_bytes, compute_bytes
    return 2 * r * h + 2 * w * h + w * (3 * q + 3 * kv) + 4 * w * i


def activation_bytes(
    arch: Architecture, tokens: int, residual_bytes: int, compute_bytes: int, checkpointing: bool
) -> int:
    """Activation bytes of a micro-batch of ``tokens`` tokens (rows x longest row) kept for the
    backward: without checkpointing ``layers x`` :func:`layer_activation_bytes`; with it the saved
    layer inputs ``layers x r H`` plus one layer's recomputation; both plus the final norm's
    ``(r + w) H`` per token."""
    per_layer = layer_activation_bytes(arch, residual_bytes, compute_bytes)
    final = (residual_bytes + compute_bytes) * arch.hidden_size
    if checkpointing:
        per_token = arch.num_hidden_layers * residual_bytes * arch.hidden_size + per_layer + final
    else:
        per_token = arch.num_hidden_layers * per_layer + final
    return int(tokens) * per_token


def prefill_bytes(arch: Architecture, tokens: int, width: int) -> int:
    """Working memory of a no-grad prefill of ``tokens`` tokens (rows x row length), one layer at a
    time: ``tokens x width x (2 H + 3 I)`` (normed input and residual, gate, up, their product)."""
    return int(tokens) * width * (2 * arch.hidden_size + 3 * arch.intermediate_size)


@dataclass(frozen=True)
class Part:
    """One line of the plan.

    Attributes:
        name: what it is. bytes: its estimated size (bytes; None: unknown model, not counted).
        phases: the phases it is alive in (:data:`PHASES`). detail: the formula with its numbers.
        knobs: the config overrides that shrink it.
    """

    name: str
    bytes: int | None
    phases: frozenset
    detail: str = ""
    knobs: tuple[str, ...] = ()


@dataclass
class MemoryPlan:
    """The plan of one composed config on one device.

    Attributes:
        parts: every counted part. device_bytes: one device's memory (bytes).
        device_source: where that number comes from (``torch.cuda``, ``plan.device_memory_gib``, host).
        reserve_bytes: kept free for what no part counts (``plan.reserve_gib``; bytes).
        refuses: whether a plan over the device refuses to start (False on CPU runs and with
            ``plan.refuse=false``).
        problems: other reasons the config cannot run (e.g. a vLLM KV budget below one row).
        notes: extra lines printed with the plan.
    """

    parts: list[Part]
    device_bytes: int
    device_source: str
    reserve_bytes: int
    refuses: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def phase_bytes(self, phase: str) -> int:
        """Bytes alive in ``phase`` (the sum of its known parts)."""
        return sum(p.bytes for p in self.parts if phase in p.phases and p.bytes is not None)

    @property
    def peak_phase(self) -> str:
        """The phase with the most bytes."""
        return max(PHASES, key=self.phase_bytes)

    @property
    def peak_bytes(self) -> int:
        """Bytes of the peak phase (reserve excluded)."""
        return self.phase_bytes(self.peak_phase)

    @property
    def fits(self) -> bool:
        """Peak + reserve within the device, and no problem."""
        return self.peak_bytes + self.reserve_bytes <= self.device_bytes and not self.problems

    def largest(self, n: int = 3) -> list[Part]:
        """The ``n`` largest known parts of the peak phase."""
        parts = [p for p in self.parts if self.peak_phase in p.phases and p.bytes]
        return sorted(parts, key=lambda p: -p.bytes)[:n]

    def render(self) -> str:
        """The plan as printed at start and by ``mintrl-train --plan`` (GiB = 2^30 bytes)."""
        lines = [
            f"memory plan (GiB = 2^30 bytes): {gib(self.device_bytes)} GiB per device ({self.device_source}), "
            f"{gib(self.reserve_bytes)} GiB kept free (plan.reserve_gib)"
        ]
        width = max(len(p.name) for p in self.parts) if self.parts else 10
        for p in self.parts:
            size = "unknown" if p.bytes is None else f"{gib(p.bytes):>8}"
            phases = ",".join(ph for ph in PHASES if ph in p.phases)
            lines.append(f"  {p.name:<{width}} {size} GiB  [{phases}]  {p.detail}")
        totals = ", ".join(f"{ph} {gib(self.phase_bytes(ph))}" for ph in PHASES)
        lines.append(f"  phases (GiB): {totals}")
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(
            f"  peak: {gib(self.peak_bytes)} GiB ({self.peak_phase}) + {gib(self.reserve_bytes)} reserve = "
            f"{gib(self.peak_bytes + self.reserve_bytes)} of {gib(self.device_bytes)} GiB: {verdict}"
            + ("" if self.refuses else " (printed only: this run is not refused)")
        )
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


class MemoryPlanError(ValueError):
    """A plan over the device's memory (or with a problem); the message names the largest parts and
    the knobs that shrink them."""


def gib(n: int | float) -> str:
    """``n`` bytes in GiB with two decimals."""
    return f"{n / GIB:.2f}"


def check_memory_plan(plan: MemoryPlan) -> None:
    """Refuse a plan that does not fit, when it refuses at all (:attr:`MemoryPlan.refuses`).

    Raises:
        MemoryPlanError: the peak phase's bytes + reserve exceed the device, or a problem; the message
            gives the sizes, the three largest parts of the peak phase with their knobs, and the problems.
    """
    if plan.fits or not plan.refuses:
        return
    largest = "; ".join(f"{p.name} {gib(p.bytes)} GiB ({', '.join(p.knobs) or 'no knob'})" for p in plan.largest())
    message = (
        f"memory plan: the {plan.peak_phase} phase needs {gib(plan.peak_bytes)} GiB + {gib(plan.reserve_bytes)} GiB "
        f"reserve > {gib(plan.device_bytes)} GiB per device ({plan.device_source}); refused before any model loads. "
        f"Largest parts: {largest}."
    )
    if plan.problems:
        message += " Problems: " + " ".join(plan.problems)
    message += " (mintrl-train --plan <overrides> prints the whole plan; plan.refuse=false starts anyway.)"
    raise MemoryPlanError(message)


def _select(cfg: DictConfig, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def _precision_widths(precision: str, weight_bytes: int) -> tuple[int, int]:
    """(weights' bytes, compute bytes) under a Lightning precision: ``*-true`` below 32 casts the
    weights; ``*-mixed`` autocasts the compute to 2 bytes; ``32-true`` computes at the weights'."""
    precision = str(precision)
    if precision.endswith("-true") and not precision.startswith("32") and not precision.startswith("64"):
        return 2, 2
    if precision.endswith("-mixed"):
        return weight_bytes, 2
    return weight_bytes, weight_bytes


def _world_size(cfg: DictConfig) -> int:
    devices, nodes = _select(cfg, "trainer.devices", 1), _select(cfg, "trainer.num_nodes", 1)
    devices = len(devices) if isinstance(devices, (list, tuple)) or OmegaConf.is_list(devices) else devices
    return (int(devices) if isinstance(devices, int) else 1) * int(nodes)


def _is_fsdp(cfg: DictConfig) -> bool:
    strategy = OmegaConf.select(cfg, "trainer.strategy")
    target = strategy.get("_target_", "") if isinstance(strategy, DictConfig) else strategy
    return "fsdp" in str(target or "").lower()


def _optimizer_moments(cfg: DictConfig) -> tuple[int, str]:
    """State tensors per trainable parameter of ``module.optimizer`` (Adam / AdamW: 2 moments, SGD: 1
    with momentum, else 0; any other optimizer is counted as 2) and its name."""
    import torch

    optimizer = get_class(str(_select(cfg, "module.optimizer._target_", "torch.optim.AdamW")))
    if issubclass(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 2, optimizer.__name__
    if issubclass(optimizer, torch.optim.SGD):
        return (1 if float(_select(cfg, "module.optimizer.momentum", 0.0)) else 0), optimizer.__name__
    return 2, f"{optimizer.__name__} (counted as 2 moments)"


def _rows_per_prompt(cfg: DictConfig) -> int:
    rows = int(_select(cfg, "rollout.n_control", 0)) + int(_select(cfg, "rollout.n_semi", 0))
    guide = OmegaConf.select(cfg, "guide")
    if isinstance(guide, DictConfig) and component_class(cfg, "guide") is not None:
        if component_class(cfg, "guide").adds_rollouts:
            rows += int(guide.get("rollouts_per_prompt", 0) or 0)
    return max(rows, 1)


def _prompts_per_rank(cfg: DictConfig) -> int:
    """One rank's prompts per step: ``data.prompts_per_step`` (the global batch) over the data-parallel
    ranks, rounded up."""
    return -(-int(_select(cfg, "data.prompts_per_step", 1)) // _world_size(cfg))


def _micro_batch_rows(cfg: DictConfig) -> tuple[int, str]:
    rows = OmegaConf.select(cfg, "module.micro_batch_rows")
    if isinstance(rows, int):
        return rows, f"module.micro_batch_rows={rows}"
    batch = _prompts_per_rank(cfg) * _rows_per_prompt(cfg)
    budget = OmegaConf.select(cfg, "allocation.budget_per_step")
    if isinstance(budget, int):
        batch = max(batch, -(-budget // _world_size(cfg)))
    minibatches = int(_select(cfg, "module.minibatches", 1))
    rows = -(-batch // minibatches)
    return rows, f"the whole mini-batch ({rows} rows: module.micro_batch_rows=null)"


def _resolved(cfg: DictConfig, key: str) -> dict | None:
    """The config node ``key`` as a resolved dict, or None when it cannot be resolved before the run
    (e.g. ``judge=teacher`` with ``teacher_model.path`` unset: the build reports that, not the plan)."""
    try:
        return OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=True)
    except OmegaConfBaseException:
        return None


def _context_models(cfg: DictConfig) -> list[tuple[str | None, str, str]]:
    """``(path, dtype, who)`` of every model the judge, intervention and objective take from the
    run's model context (path None: the frozen step-0 policy), as their classes declare."""
    out = []
    for key in ("judge", "intervention", "objective"):
        cls = component_class(cfg, key)
        if cls is not None and (node := _resolved(cfg, key)) is not None:
            out += [(path, dtype, key) for path, dtype in cls.context_models(node)]
    return out


def device_memory(cfg: DictConfig) -> tuple[int, str, bool]:
    """One device's memory: ``(bytes, where it comes from, whether a plan over it refuses)``.

    A GPU run (``trainer.accelerator`` gpu / cuda / auto) on a visible GPU: ``torch.cuda``'s total
    memory of device 0; with no GPU visible: ``plan.device_memory_gib`` (GiB, default 80); both refuse
    when over (unless ``plan.refuse=false``). A CPU run: the host's memory, printed only, never refused.
    """
    accelerator = str(_select(cfg, "trainer.accelerator", "cpu")).lower()
    refuse = bool(_select(cfg, "plan.refuse", True))
    if accelerator == "cpu":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(total), "host memory of a CPU run: printed, never refused", False
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).total_memory), "torch.cuda device 0", refuse
    device_gib = float(_select(cfg, "plan.device_memory_gib", DEFAULT_DEVICE_GIB))
    return int(device_gib * GIB), f"plan.device_memory_gib={device_gib:g}: no GPU visible", refuse


def memory_plan(cfg: DictConfig, device_bytes: int | None = None) -> MemoryPlan:
    """The memory plan of a composed training config (see the module docstring for every formula).

    Args:
        cfg: the composed config (``configs/train.yaml`` and its overrides); nothing is built.
        device_bytes: one device's memory (bytes); None: :func:`device_memory`.

    Returns:
        the :class:`MemoryPlan` (print :meth:`MemoryPlan.render`; refuse with :func:`check_memory_plan`).
    """
    if device_bytes is None:
        device_bytes, device_source, refuses = device_memory(cfg)
    else:
        device_source, refuses = "given", bool(_select(cfg, "plan.refuse", True))
    reserve = int(float(_select(cfg, "plan.reserve_gib", DEFAULT_RESERVE_GIB)) * GIB)
    parts: list[Part] = []
    problems: list[str] = []
    notes: list[str] = []

    model = OmegaConf.select(cfg, "model")
    # model=hf states a path (``???`` until set: ``in`` is False for it); the embedded model none
    stated = isinstance(model, DictConfig) and ("path" in model or OmegaConf.is_missing(model, "path"))
    model_path = None if not stated or OmegaConf.is_missing(model, "path") else model.get("path")
    policy = resolve_architecture(model_path) if model_path is not None or not stated else None
    policy_name = str(model_path or (f"{EMBEDDED} ({EMBEDDED_ID})" if not stated else "??? (model.path not set)"))
    model_dtype = str(_select(cfg, "model.dtype", "float32"))
    precision = str(_select(cfg, "trainer.precision", "32-true"))
    weight_bytes, compute_bytes = _precision_widths(precision, dtype_bytes(model_dtype))
    fsdp = _is_fsdp(cfg)
    world = _world_size(cfg) if fsdp else 1
    shard = f" / {world} ranks (trainer=fsdp)" if fsdp else ""
    lora = OmegaConf.select(cfg, "model.lora")
    limits = sequence_limits(cfg)
    response = int(_select(cfg, "rollout.max_response_tokens", 0))
    prompt = int(limits[next(iter(limits))]) if limits else 0
    row_tokens = prompt + response
    if limits is None:
        notes.append("the config states no prompt limit: rows counted as rollout.max_response_tokens only")
    if policy is None:
        notes.append(
            f"model.path={policy_name}: no architecture (no config.json in a local folder or the hub cache, not in "
            "KNOWN_ARCHITECTURES, or not a dense decoder): the policy's parts are unknown, nothing is refused for them"
        )
        return MemoryPlan(parts, device_bytes, device_source, reserve, refuses, problems, notes)
    n_params = parameter_count(policy)
    notes.append(f"policy {policy_name}: {n_params:,} parameters ({policy.source})")

    # policy weights, gradients, optimizer state
    trainable = n_params
    weights = n_params * weight_bytes // world
    detail = f"{n_params:,} x {weight_bytes} B ({model_dtype}, trainer.precision={precision}){shard}"
    if lora is not None:
        trainable = lora_parameter_count(policy, int(lora.get("r", 16)), lora.get("target_modules", "all-linear"))
        weights += trainable * 4 // world
        detail += f" + LoRA {trainable:,} x 4 B"
    parts.append(Part("policy weights", weights, ALL, detail, ("model.dtype", "trainer=fsdp", "model/lora=default")))
    grad_bytes = 4 if lora is not None else weight_bytes
    parts.append(
        Part(
            "gradients",
            trainable * grad_bytes // world,
            frozenset({UPDATE}),
            f"{trainable:,} trainable x {grad_bytes} B{shard}",
            ("trainer=fsdp", "model/lora=default"),
        )
    )
    moments, optimizer = _optimizer_moments(cfg)
    parts.append(
        Part(
            "optimizer state",
            trainable * grad_bytes * moments // world,
            ALL,
            f"{optimizer}: {moments} moments x {trainable:,} x {grad_bytes} B{shard}",
            ("trainer=fsdp", "model/lora=default"),
        )
    )

    # activations and the LM-head block
    rows, rows_from = _micro_batch_rows(cfg)
    checkpointing = bool(_select(cfg, "module.gradient_checkpointing", False))
    tokens = rows * row_tokens
    with_ckpt = activation_bytes(policy, tokens, weight_bytes, compute_bytes, True)
    without = activation_bytes(policy, tokens, weight_bytes, compute_bytes, False)
    parts.append(
        Part(
            "activations",
            with_ckpt if checkpointing else without,
            frozenset({UPDATE}),
            f"{rows_from} x {row_tokens} tokens; with checkpointing {gib(with_ckpt)} GiB, without {gib(without)} GiB "
            f"(module.gradient_checkpointing={str(checkpointing).lower()})",
            ("module.gradient_checkpointing=true", "module.micro_batch_rows", "rollout.max_response_tokens"),
        )
    )
    chunk = int(_select(cfg, "module.logprob_chunk_tokens", 256))
    parts.append(
        Part(
            "LM-head block",
            3 * chunk * policy.vocab_size * 4,
            frozenset({UPDATE}),
            f"3 x {chunk} tokens x {policy.vocab_size} vocab x 4 B",
            ("module.logprob_chunk_tokens",),
        )
    )
    if fsdp:
        h = policy.hidden_size
        layer = parameter_count(policy) - policy.vocab_size * h * (1 if policy.tie_word_embeddings else 2) - h
        unit = max(policy.vocab_size * h, layer // policy.num_hidden_layers)
        parts.append(
            Part(
                "FSDP gathered units",
                2 * unit * weight_bytes,
                frozenset({UPDATE}),
                f"2 x largest unit {unit:,} x {weight_bytes} B",
                ("trainer.strategy.reshard_after_forward=true",),
            )
        )

    # the policy's sampler, by the fields its config states (as check_sampler_fits reads them): an
    # engine with its own share of the device (vLLM: gpu_memory_utilization), or batches on the policy (HF)
    sampler = OmegaConf.select(cfg, "sampler")
    if isinstance(sampler, DictConfig) and sampler.get("gpu_memory_utilization") is not None:
        parts += _vllm_parts(cfg, policy, n_params, model_dtype, device_bytes, problems)
    elif isinstance(sampler, DictConfig) and sampler.get("max_batch_size") is not None:
        parts += _hf_sampler_parts(cfg, policy, n_params, weight_bytes, row_tokens, lora is not None, fsdp)

    # teacher models, the step-0 copy, the judge's and intervention's KV
    held: dict[tuple, str] = {}
    for path, dtype, who in _context_models(cfg):
        key = ("step-0",) if path is None else (str(path), str(dtype))
        held[key] = f"{held[key]}, {who}" if key in held else who
    for key, who in held.items():
        if key == ("step-0",):
            if lora is not None:
                notes.append(f"step-0 model ({who}): the LoRA policy with its adapter off, no copy")
                continue
            parts.append(
                Part(
                    "step-0 copy",
                    n_params * dtype_bytes(model_dtype),
                    ALL,
                    f"{who}: {n_params:,} x {dtype_bytes(model_dtype)} B ({model_dtype}, a frozen deep copy)",
                    ("objective.kl_coef=0", "a teacher model (judge.teacher=...)", "model/lora=default"),
                )
            )
            continue
        arch = resolve_architecture(key[0])
        nbytes = None if arch is None else parameter_count(arch) * dtype_bytes(key[1])
        if arch is None:
            notes.append(f"{who} model {key[0]}: no architecture found: not counted")
        parts.append(
            Part(
                f"teacher {key[0]}",
                nbytes,
                ALL,
                f"{who}: {parameter_count(arch):,} x {dtype_bytes(key[1])} B ({key[1]})" if arch else who,
                ("teacher_model.dtype=bfloat16", "judge=api intervention=api (a server)"),
            )
        )
    parts += _review_parts(cfg, policy, model_dtype, prompt, response)
    return MemoryPlan(parts, device_bytes, device_source, reserve, refuses, problems, notes)


def _vllm_parts(cfg, policy: Architecture, n_params: int, model_dtype: str, device_bytes: int, problems) -> list[Part]:
    """The colocated vLLM engine: its share of the device (weights + KV cache)."""
    engine_dtype = str(_select(cfg, "sampler.dtype", model_dtype))
    width = dtype_bytes(engine_dtype)
    share = float(_select(cfg, "sampler.gpu_memory_utilization", 0.3))
    total = int(share * device_bytes)
    weights = n_params * width
    kv = total - weights
    per_token = kv_bytes_per_token(policy.kv_config(), width)
    length = OmegaConf.select(cfg, "sampler.max_model_len")
    sleep = bool(_select(cfg, "sampler.sleep_mode", False))
    phases = ALL if not sleep else GENERATING
    if isinstance(length, int) and kv < length * per_token:
        problems.append(
            f"sampler=vllm: the engine's KV budget {gib(max(kv, 0))} GiB (sampler.gpu_memory_utilization={share} x "
            f"device - {gib(weights)} GiB of {engine_dtype} weights) holds less than one sampler.max_model_len={length} "
            f"row ({gib(length * per_token)} GiB at {per_token:,} B/token): raise sampler.gpu_memory_utilization or "
            "use sampler.dtype=bfloat16"
        )
    rows = f", {max(kv, 0) // (length * per_token)} rows of {length} tokens" if isinstance(length, int) else ""
    return [
        Part(
            "vLLM engine",
            total,
            phases,
            f"sampler.gpu_memory_utilization={share} x device: weights {gib(weights)} GiB ({engine_dtype}) + KV "
            f"{gib(max(kv, 0))} GiB ({per_token:,} B/token{rows}); "
            + ("asleep during the update (sampler.sleep_mode=true)" if sleep else "held during the update too"),
            ("sampler.sleep_mode=true", "sampler.gpu_memory_utilization", "sampler.dtype=bfloat16"),
        )
    ]


def _hf_sampler_parts(
    cfg, policy, n_params: int, weight_bytes: int, row_tokens: int, lora: bool, fsdp: bool
) -> list[Part]:
    """The Hugging Face sampler: its sampling copy (bf16; under FSDP a full copy per rank in the
    sampling dtype), one batch's KV, the continuation cache."""
    from mintrl.core.precision import cpu_has_fast_bf16

    parts = []
    dtype = str(_select(cfg, "sampler.dtype", "auto"))
    on_gpu = str(_select(cfg, "trainer.accelerator", "cpu")).lower() != "cpu"
    copy = dtype == "bf16" or (dtype == "auto" and weight_bytes == 4 and (on_gpu or cpu_has_fast_bf16()))
    copy = copy or (lora and dtype != "fp32")  # a LoRA policy samples from its merged copy
    width = 2 if copy else weight_bytes
    if copy or fsdp:  # a sharded policy is sampled from a full copy per rank (SamplingCopy)
        what = "a bf16 copy of the policy" if copy else "a full copy per rank of the sharded policy"
        parts.append(
            Part(
                "HF sampling copy",
                n_params * width,
                ALL,
                f"{n_params:,} x {width} B (sampler.dtype={dtype}: {what})",
                ("sampler.dtype=bf16", "sampler=vllm") if width > 2 else ("sampler.dtype=fp32", "sampler=vllm"),
            )
        )
    rows = int(_select(cfg, "sampler.max_batch_size", 128))
    per_token = kv_bytes_per_token(policy.kv_config(), width)
    parts.append(
        Part(
            "HF sampler KV",
            rows * row_tokens * per_token,
            frozenset({ROLLOUT}),
            f"sampler.max_batch_size={rows} x {row_tokens} tokens x {per_token:,} B/token",
            ("sampler.max_batch_size", "rollout.max_response_tokens", "sampler=vllm"),
        )
    )
    cache = int(_select(cfg, "sampler.continuation_cache_mib", 0)) * 2**20
    if cache:
        parts.append(
            Part(
                "HF continuation cache",
                cache,
                GENERATING,
                f"sampler.continuation_cache_mib={cache // 2**20} MiB",
                ("sampler.continuation_cache_mib",),
            )
        )
    return parts


def _review_parts(cfg, policy: Architecture, model_dtype: str, prompt: int, response: int) -> list[Part]:
    """The KV and prefill memory of a model judge's and a model intervention's generation batches."""
    parts = []
    chunk, reviews = OmegaConf.select(cfg, "rollout.chunk_size"), OmegaConf.select(cfg, "rollout.max_reviews")
    continuation = int(_select(cfg, "rollout.continuation_len", 0))
    if isinstance(chunk, int) and isinstance(reviews, int) and OmegaConf.select(cfg, "env") is None:
        reviewed = min(response, reviews * chunk + max(reviews - 1, 0) * continuation)
    else:
        reviewed = response
    sft_tokens = OmegaConf.select(cfg, "sft.max_new_tokens") if OmegaConf.select(cfg, "sft") is not None else None
    if isinstance(sft_tokens, int):
        reviewed = max(reviewed, sft_tokens)
    requests = _prompts_per_rank(cfg) * max(int(_select(cfg, "rollout.n_semi", 0)), 1)
    if isinstance(sft_tokens, int):  # the SFT stage reviews / writes whole responses for its prompts
        requests = max(requests, int(_select(cfg, "sft.prompts", 1)) * int(_select(cfg, "sft.per_prompt", 1)))
    for key, phase in (("judge", JUDGE), ("intervention", INTERVENTION)):
        cls = component_class(cfg, key)
        node = _resolved(cfg, key) if cls is not None else None
        if node is None:
            continue
        for path, dtype in cls.context_models(node):
            arch = policy if path is None else resolve_architecture(path)
            width = dtype_bytes(model_dtype if path is None else dtype)
            if arch is None:
                continue
            new = int(node.get("max_new_tokens") or 0) if key == "judge" else continuation
            tokens = prompt + reviewed + new
            rows = min(int(node.get("max_batch_size") or 128), requests)
            per_token = kv_bytes_per_token(arch.kv_config(), width)
            kv = rows * tokens * per_token
            work = prefill_bytes(arch, rows * tokens, width)
            parts.append(
                Part(
                    f"{key} KV + prefill",
                    kv + work,
                    frozenset({phase}),
                    f"{rows} rows ({key}.max_batch_size) x {tokens} tokens (prompt {prompt} + reviewed {reviewed} + "
                    f"new {new}) x {per_token:,} B/token = {gib(kv)} GiB KV + {gib(work)} GiB prefill",
                    (f"{key}.max_batch_size", "rollout.max_reviews", "rollout.chunk_size"),
                )
            )
    return parts


def plan_and_check(cfg: DictConfig, print_fn=None) -> MemoryPlan:
    """Build the plan of ``cfg``, print it (``print_fn``, default the log at INFO) and refuse it when
    it does not fit (:func:`check_memory_plan`). Called by the training job before any model loads.

    Raises:
        MemoryPlanError: the plan exceeds the device (GPU runs).
    """
    plan = memory_plan(cfg)
    (print_fn or log.info)(plan.render())
    check_memory_plan(plan)
    return plan


__all__ = [
    "Architecture",
    "KNOWN_ARCHITECTURES",
    "MemoryPlan",
    "MemoryPlanError",
    "Part",
    "activation_bytes",
    "architecture_from_config",
    "check_memory_plan",
    "device_memory",
    "layer_activation_bytes",
    "lora_parameter_count",
    "memory_plan",
    "parameter_count",
    "plan_and_check",
    "prefill_bytes",
    "resolve_architecture",
]
