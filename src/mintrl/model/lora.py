"""LoRA adapters on the policy (``model/lora=default``): peft's ``LoraConfig`` applied to the loaded
causal LM, the frozen base seen through the same module with the adapter switched off, and the
merged Hugging Face weights that vLLM and ``from_pretrained`` load.

LoRA (Hu et al. 2021, eq. 3): a targeted linear layer computes ``W x + (alpha / r) B A x`` with the
pretrained ``W`` [out, in] frozen and only ``A`` [r, in] and ``B`` [out, r] trained; ``B`` starts at
zero, so the adapted model equals the base model at step 0. That makes the base with the adapter
disabled *the* step-0 policy: the KL reference, the self-privileged judge and intervention and the
OPD self-teacher use it (:class:`AdapterOff`) instead of a second copy of the weights.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch

from mintrl.model.logprobs import in_root_unit

# peft's LoRA parameter names inside a wrapped layer (lora_A / lora_B of Linear layers; the others are
# LoRA variants this module does not merge and refuses)
_LORA_KEYS = (".lora_A.", ".lora_B.")
_UNSUPPORTED_KEYS = (".lora_embedding_A.", ".lora_embedding_B.", ".lora_magnitude_vector.", ".modules_to_save.")
PEFT_PREFIX = "base_model.model."  # a PeftModel's state-dict names: this + the Hugging Face name


@dataclass
class LoraSettings:
    """The adapter of ``model/lora=default`` (``configs/model/lora/default.yaml``).

    Attributes:
        r: rank of ``A`` and ``B`` (rows of ``A``; a count, >= 1).
        alpha: scaling numerator: the update is ``(alpha / r) B A`` (dimensionless).
        dropout: dropout probability on the adapter's input in train mode (0 = none; keep 0 for RL,
            where the trainer's and the sampler's log-probs must agree).
        target_modules: names of the linear layers that get an adapter (suffixes of module names,
            e.g. ``q_proj``), or ``all-linear`` for every linear layer except the LM head.
        rslora: rank-stabilised scaling ``alpha / sqrt(r)`` instead of ``alpha / r``.

    Raises:
        ValueError: ``r < 1``, ``alpha <= 0`` or ``dropout`` outside [0, 1), naming ``model.lora.<field>``.
    """

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: list[str] | str = field(default_factory=lambda: "all-linear")
    rslora: bool = False

    def __post_init__(self):
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"model.lora.r must be a positive integer, got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"model.lora.alpha must be positive, got {self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.lora.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.target_modules, str):
            self.target_modules = [str(m) for m in self.target_modules]
            if not self.target_modules:
                raise ValueError("model.lora.target_modules is empty: name layers (q_proj, ...) or all-linear")


def apply_lora(model: torch.nn.Module, settings: LoraSettings):
    """Wrap ``model`` with a fresh LoRA adapter (peft ``get_peft_model``): base weights frozen
    (``requires_grad=False``), adapter weights trainable, ``B = 0`` so outputs are unchanged.

    Returns:
        the ``peft.PeftModelForCausalLM`` (the same base module inside, not a copy).

    Raises:
        ImportError: peft is not installed (it is a dependency of mintrl: ``pip install -e .``).
        ValueError: ``target_modules`` matches no layer of the model (peft's message).
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        use_rslora=settings.rslora,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def is_lora(model) -> bool:
    """Whether ``model`` is a peft-wrapped policy (``model/lora=default``)."""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face causal LM under a peft wrapper (``model`` itself when it is not wrapped)."""
    return model.get_base_model() if is_lora(model) else model


def trainable_parameter_count(model: torch.nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts of ``model`` (elements)."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


@contextlib.contextmanager
def adapter_disabled(policy) -> Iterator[None]:
    """Run the enclosed code on ``policy``'s base weights: adapter layers off and the model in eval
    mode (as the frozen copy was); the adapter and the training mode come back on exit, also on error."""
    was_training = policy.training
    policy.eval()
    try:
        with policy.disable_adapter():
            yield
    finally:
        policy.train(was_training)


class _AdapterOffModule:
    """A submodule of the policy (its decoder, its LM head) called with the adapter disabled."""

    def __init__(self, module: torch.nn.Module, policy):
        self._module, self._policy = module, policy

    def __call__(self, *args, **kwargs):
        with adapter_disabled(self._policy):
            return self._module(*args, **kwargs)

    def __getattr__(self, name):  # config, training, modules(), ... of the wrapped module
        return getattr(self._module, name)


class AdapterOff:
    """The frozen step-0 policy of a LoRA run: the live peft policy with its adapter disabled.

    Everything that used a frozen deep copy of the policy (the GRPO KL reference, the
    self-privileged judge and intervention, the OPD self-teacher) takes this instead: it holds no
    weights of its own (the memory of one model copy saved), and since the base weights never
    train and ``B`` starts at 0, it is exactly the policy at step 0, also after resuming.

    What callers use works as on a Hugging Face model: calling it, ``generate``, ``get_decoder()``
    and ``get_output_embeddings()`` (both called with the adapter off), ``config``,
    ``generation_config``, ``device``, ``dtype``, ``parameters()``, ``modules()``,
    ``training``/``train()``/``eval()`` (a flag of its own: it never changes the policy's mode),
    ``run_in_root_unit`` (the sharded policy's root unit around the trainer's forward: FSDP),
    ``to()`` (a no-op: the policy's device is the trainer's business) and ``requires_grad_()`` (a
    no-op: the base is frozen already).

    Not thread-safe against the policy: the adapter is a switch on the shared layers, so nothing
    may run the policy while a call here is in flight (the rollout loop calls them in turn; a
    judge call abandoned by ``rollout.judge_timeout_s`` keeps running in its thread, so time-outs
    with a self-privileged judge and LoRA are unsafe).
    """

    def __init__(self, policy):
        self._policy = policy
        self.training = False

    @property
    def policy(self):
        """The peft policy this is a view of."""
        return self._policy

    def __call__(self, *args, **kwargs):
        with adapter_disabled(self._policy):
            return self._policy(*args, **kwargs)

    forward = __call__

    def run_in_root_unit(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` as a forward of the policy's root shard unit when the policy is
        sharded (the policy's own registered FSDP forward method, ``ROOT_UNIT_METHOD``: the root's
        weights, a tied head among them, are gathered around the call), else a plain call.
        :func:`mintrl.model.logprobs.token_logprobs` runs its body and head here; they are the
        adapter-off modules of :meth:`get_decoder` and :meth:`get_output_embeddings`, so the
        adapter is off inside. Without it the root's norm and tied head would stay sharded
        ("mixed torch.Tensor and DTensor") under ``trainer=fsdp``."""
        return in_root_unit(self._policy, fn, *args, **kwargs)

    def generate(self, *args, **kwargs):
        """``generate`` of the base weights (adapter off)."""
        with adapter_disabled(self._policy):
            return self._policy.generate(*args, **kwargs)

    def get_decoder(self):
        """The decoder body, called with the adapter off (:func:`mintrl.model.logprobs.token_logprobs`)."""
        return _AdapterOffModule(self._policy.get_decoder(), self._policy)

    def get_output_embeddings(self):
        """The LM head, called with the adapter off (a LoRA on the head would be bypassed too)."""
        return _AdapterOffModule(self._policy.get_output_embeddings(), self._policy)

    @property
    def config(self):
        return self._policy.config

    @property
    def generation_config(self):
        return self._policy.generation_config

    @property
    def name_or_path(self):
        return self._policy.name_or_path

    @property
    def device(self) -> torch.device:
        return next(self._policy.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self._policy.parameters()).dtype

    def parameters(self, recurse: bool = True):
        return self._policy.parameters(recurse)

    def modules(self):
        return self._policy.modules()

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def to(self, *args, **kwargs):
        return self

    def requires_grad_(self, requires_grad: bool = True):
        return self


def frozen_step0(policy):
    """The frozen step-0 policy: :class:`AdapterOff` of a LoRA policy (no copy), else a frozen deep
    copy (full fine-tuning: the policy's weights will move)."""
    if is_lora(policy):
        return AdapterOff(policy)
    return copy.deepcopy(policy).eval().requires_grad_(False)


def lora_scalings(policy) -> dict[str, float]:
    """``{peft module name: alpha / r}`` (or ``alpha / sqrt(r)`` with rslora) of every LoRA layer
    of ``policy``, for its one active adapter; names as ``named_modules`` gives them (FSDP wrapper
    prefixes included: the caller strips them).

    Raises:
        ValueError: a layer with no or several active adapters.
    """
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, module in policy.named_modules():
        if isinstance(module, LoraLayer):
            adapters = list(module.active_adapters)
            if len(adapters) != 1:
                raise ValueError(f"LoRA layer {name} has active adapters {adapters}: exactly one is supported")
            out[name] = float(module.scaling[adapters[0]])
    return out


def merge_lora_weights(tensors: dict[str, torch.Tensor], scalings: dict[str, float]) -> dict[str, torch.Tensor]:
    """Hugging Face weights of the adapted model from a peft state dict: ``W + (alpha / r) B A`` for
    every LoRA layer (Hu et al. 2021, eq. 3), adapter tensors dropped, peft's prefixes removed
    (:func:`merge_lora_stream` over the dict; a base weight whose layer has no adapter tensor in
    ``tensors`` passes unmerged).

    Args:
        tensors: ``{name: tensor}`` with peft names (``base_model.model.<hf name>``, a LoRA layer's
            weight as ``<layer>.base_layer.weight`` and its ``<layer>.lora_A.<adapter>.weight`` [r, in],
            ``<layer>.lora_B.<adapter>.weight`` [out, r]); wrapper prefixes already removed.
        scalings: ``{<peft module name>: scaling}`` of every LoRA layer (:func:`lora_scalings`).

    Returns:
        ``{hf name: tensor}``; merged weights are new tensors in the base weight's dtype (the
        product is taken in float32), every other tensor is passed through (shared storage kept).

    Raises:
        ValueError: a LoRA variant this merge does not handle (embedding LoRA, DoRA,
            ``modules_to_save``), or an adapter tensor without its base weight.
    """
    adapted = {name.split(key)[0] for name in tensors for key in _LORA_KEYS if key in name}
    return dict(merge_lora_stream(tensors.items(), scalings, adapted))


def merge_lora_stream(
    tensors: Iterable[tuple[str, torch.Tensor]], scalings: dict[str, float], adapted: set[str] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """:func:`merge_lora_weights` over a stream of ``(peft name, tensor)`` (a gathered state dict,
    one tensor at a time): each tensor is yielded under its Hugging Face name as soon as it is
    complete, a LoRA layer's merged weight once its base weight, ``A`` and ``B`` have all passed
    (peft's state dict keeps them together, so about one base weight is held at a time).

    Args:
        tensors: ``(name, tensor)`` pairs named as in :func:`merge_lora_weights`.
        scalings: ``{<peft module name>: alpha / r}`` of every LoRA layer (:func:`lora_scalings`).
        adapted: the layers whose base weight is merged (default: every layer of ``scalings``).

    Raises:
        ValueError: a LoRA variant this merge does not handle, an adapter tensor without its base
            weight, or a base weight of an adapted layer without its adapter (at the stream's end).
    """
    adapted = set(scalings) if adapted is None else adapted
    pending: dict[str, list] = {}  # layer -> [base weight, A [r, in], B [out, r]] (None until seen)
    for name, tensor in tensors:
        if any(k in name for k in _UNSUPPORTED_KEYS):
            raise ValueError(f"cannot merge {name}: only LoRA on linear layers (lora_A / lora_B) is supported")
        layer, slot = None, 0
        for slot_of, key in enumerate(_LORA_KEYS, start=1):
            if key in name:
                layer, slot = name.split(key)[0], slot_of
                break
        else:
            if name.endswith(".base_layer.weight") and name.removesuffix(".base_layer.weight") in adapted:
                layer = name.removesuffix(".base_layer.weight")
        if layer is None:
            yield _hf_name(name), tensor
            continue
        parts = pending.setdefault(layer, [None, None, None])
        parts[slot] = (name, tensor) if slot == 0 else tensor
        if all(part is not None for part in parts):
            del pending[layer]
            (base_name, weight), a, b = parts
            delta = (b.float() @ a.float()) * scalings[layer]  # [out, in]
            yield _hf_name(base_name), (weight.float() + delta).to(weight.dtype)
    if pending:
        raise ValueError(f"LoRA weights without a base weight or adapter: {sorted(pending)[:3]}")


def _hf_name(peft_name: str) -> str:
    """A peft state-dict name as the plain model's: ``base_layer.`` and peft's prefix removed."""
    return peft_name.replace(".base_layer.", ".").removeprefix(PEFT_PREFIX)
