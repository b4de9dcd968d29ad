"""Builds a run's components from a composed Hydra config (shared by ``train.py`` and tests)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as L
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

import mintrl.training.config  # noqa: F401  (registers the config resolvers)
from mintrl.data.datamodule import RolloutDataModule
from mintrl.model.loading import LoadedPolicy, embedded_smollm2, load_policy
from mintrl.rollout.semi_on_policy import SemiOnPolicyRollout
from mintrl.training.callbacks.summary import RunSummary
from mintrl.training.module import PolicyModule

# Fields that must be positive integers, checked before any model is loaded.
POSITIVE_FIELDS = (
    "rollout.n_control",
    "rollout.chunk_size",
    "rollout.continuation_len",
    "rollout.max_response_tokens",
    "data.prompts_per_step",
    "data.val_samples_per_prompt",
    "trainer.max_steps",
)
NON_NEGATIVE_FIELDS = ("rollout.n_semi", "rollout.max_reviews", "rollout.intervention_steps")


def check_config(cfg: DictConfig) -> None:
    """Reject bad sizes at config time, naming the field.

    Raises:
        ValueError: a field of ``POSITIVE_FIELDS`` that is not a positive integer, or of
            ``NON_NEGATIVE_FIELDS`` that is negative; ``trainer.max_steps`` not a multiple of the
            optimizer updates per rollout batch; ``rollout.top_p < 1`` in a training run (see
            :mod:`mintrl.sampler.vllm`); ``trainer=fsdp`` with a sampler that cannot run on sharded
            weights (``Sampler.runs_sharded``); code problems (``PromptSource.serves_code``) scored by
            a reward without ``Reward.handles_code``, or the reverse.
    """
    for fields, low in ((POSITIVE_FIELDS, 1), (NON_NEGATIVE_FIELDS, 0)):
        for name in fields:
            node: Any = cfg
            for part in name.split("."):
                node = node.get(part) if isinstance(node, DictConfig) else None
            if node is None:
                continue
            if not isinstance(node, int) or isinstance(node, bool) or node < low:
                kind = "a positive" if low else "a non-negative"
                raise ValueError(f"{name} must be {kind} integer, got {node!r}")
    top_p = (cfg.get("rollout") or {}).get("top_p", 1.0)
    if cfg.get("train", True) and isinstance(top_p, (int, float)) and top_p < 1:
        raise ValueError(
            f"rollout.top_p={top_p} < 1 is refused for training: engines report log-probs renormalised over "
            "the nucleus (vLLM) while the trainer's are over the full vocabulary, so the objective would "
            "train on mismatched log-probs; sample with top_p=1 (evaluation, mintrl-eval, may use top_p < 1)"
        )
    strategy = (cfg.get("trainer") or {}).get("strategy")
    strategy = str(strategy.get("_target_", "") if isinstance(strategy, DictConfig) else strategy or "")
    sampler = component_class(cfg, "sampler")
    if "fsdp" in strategy.lower() and sampler is not None and not sampler.runs_sharded:
        raise ValueError(
            "trainer=fsdp needs sampler=vllm: Hugging Face generate cannot run on FSDP-sharded weights "
            "outside the training forward"
        )
    module = cfg.get("module") or {}
    updates = int(module.get("epochs", 1) or 1) * int(module.get("minibatches", 1) or 1)
    max_steps = (cfg.get("trainer") or {}).get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0 and max_steps % updates:
        raise ValueError(
            f"trainer.max_steps={max_steps} (optimizer updates) must be a multiple of module.epochs x module.minibatches = {updates}"
        )
    prompts, reward = component_class(cfg, "data.prompts"), component_class(cfg, "reward")
    if prompts is not None and reward is not None:
        code_prompts = prompts.serves_code(OmegaConf.select(cfg, "data.prompts"))
        if code_prompts != reward.handles_code:
            raise ValueError(
                f"data.prompts ({prompts.__name__}) and reward ({reward.__name__}) do not match: "
                "code problems need reward=code (e.g. `data=humaneval reward=code`), other tasks another reward"
            )


def component_class(cfg: DictConfig, key: str) -> type | None:
    """The class a config node's ``_target_`` names (imported, not instantiated), so that a check
    can ask it what it declares (``runs_sharded``, ``handles_code``, ``serves_code``); None when
    the node or its ``_target_`` is absent."""
    node = OmegaConf.select(cfg, key)
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    return get_class(str(target)) if target else None


class ModelContext:
    """The policy, its tokenizer, and (on first request) the frozen step-0 copy that
    self-privileged judges and interventions share."""

    def __init__(self, loaded: LoadedPolicy):
        self.policy = loaded.model
        self.tokenizer = loaded.tokenizer
        self.source = loaded.source
        self._frozen = None
        self._teachers: dict[tuple[str, str], LoadedPolicy] = {}

    def frozen_policy(self):
        """A frozen deep copy of the policy as it is now (call before training: step 0)."""
        if self._frozen is None:
            self._frozen = copy.deepcopy(self.policy).eval().requires_grad_(False)
        return self._frozen

    def teacher(self, path: str | None = None, dtype: str = "float32") -> LoadedPolicy:
        """A frozen model for a teacher, judge or distillation target, loaded once per ``(path, dtype)``.

        Args:
            path: None for the frozen step-0 policy (self), ``embedded`` for the embedded
                SmolLM2, else any Hugging Face folder or hub id (:func:`mintrl.model.load_policy`).
            dtype: weights dtype of a loaded model.
        """
        if path is None:
            return LoadedPolicy(self.frozen_policy(), self.tokenizer, f"frozen step-0 copy of {self.source}")
        key = (str(path), dtype)
        if key not in self._teachers:
            loaded = embedded_smollm2(dtype=dtype) if path == "embedded" else load_policy(str(path), dtype=dtype)
            loaded.model.eval().requires_grad_(False)
            self._teachers[key] = loaded
        return self._teachers[key]


@dataclass
class Components:
    """Everything a run needs, built and wired.

    Attributes:
        context: the policy, tokenizer, frozen step-0 copy and teachers.
        rollout: the rollout engine (sampler, judge, intervention, reward, allocation).
        datamodule: prompts in, freshly generated rollouts out.
        module: the LightningModule (objective, optimizer, updates).
        trainer: the Lightning Trainer (None when built with ``trainer=False``).
        summary: the run's :class:`RunSummary` callback, when the config has one.
    """

    context: ModelContext
    rollout: SemiOnPolicyRollout
    datamodule: RolloutDataModule
    module: PolicyModule
    trainer: L.Trainer | None
    summary: RunSummary | None = None


def build_components(cfg: DictConfig, trainer: bool = True) -> Components:
    """Instantiate every component of ``cfg`` in dependency order.

    model -> sampler -> judge, intervention, reward, allocation -> rollout -> data -> objective -> module ->
    logger, callbacks -> trainer.
    """
    check_config(cfg)
    context = ModelContext(instantiate(cfg.model))
    tokenizer = context.tokenizer
    sampler = instantiate(cfg.sampler, model=context.policy, tokenizer=tokenizer)
    judge = instantiate(cfg.judge, context=context)
    intervention = instantiate(cfg.intervention, context=context)
    reward = instantiate(cfg.reward)
    allocation = instantiate(cfg.allocation) if cfg.get("allocation") else None
    rollout = instantiate(
        cfg.rollout,
        sampler=sampler,
        judge=judge,
        intervention=intervention,
        reward=reward,
        tokenizer=tokenizer,
        allocation=allocation,
    )
    datamodule = instantiate(cfg.data, rollout=rollout, tokenizer=tokenizer)
    module = instantiate(
        cfg.module, policy=context.policy, objective=instantiate(cfg.objective, context=context), tokenizer=tokenizer
    )
    built_trainer, summary = None, None
    if trainer:
        logger = instantiate(cfg.logger) if cfg.get("logger") else False
        callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
        summary = next((c for c in callbacks if isinstance(c, RunSummary)), None)
        built_trainer = instantiate(cfg.trainer, logger=logger, callbacks=callbacks)
    return Components(context, rollout, datamodule, module, built_trainer, summary)
