"""Builds a run's components from a composed Hydra config (shared by the entry points and tests)."""

from __future__ import annotations

from dataclasses import dataclass

import lightning.pytorch as L
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

import mintrl.build.config  # noqa: F401  (registers the config resolvers)
from mintrl.build.config_checks import check_config
from mintrl.data.datamodule import RolloutDataModule
from mintrl.model.loading import LoadedPolicy, check_model_path, embedded_smollm2, load_policy
from mintrl.model.lora import frozen_step0
from mintrl.rollout.engine import RolloutEngine
from mintrl.training.callbacks.run_summary import RunSummary
from mintrl.training.module import PolicyModule


class ModelContext:
    """The policy, its tokenizer, and (on first request) the frozen step-0 policy that the KL
    reference, self-privileged judges and interventions and the OPD self-teacher share: a deep
    copy under full fine-tuning, the policy itself with its adapter disabled under LoRA
    (:class:`mintrl.model.lora.AdapterOff`, no second copy of the weights)."""

    def __init__(self, loaded: LoadedPolicy):
        self.policy = loaded.model
        self.tokenizer = loaded.tokenizer
        self.source = loaded.source
        self._frozen = None
        self._teachers: dict[tuple[str, str], LoadedPolicy] = {}

    def frozen_policy(self):
        """The frozen policy as it is now (call before training: step 0), see
        :func:`mintrl.model.lora.frozen_step0`."""
        if self._frozen is None:
            self._frozen = frozen_step0(self.policy)
        return self._frozen

    def companion_models(self) -> list:
        """Every model handed out so far besides the policy (the step-0 copy, teachers): they run
        next to the policy and move to its device at fit start
        (:meth:`mintrl.training.module.PolicyModule.move_companions`)."""
        models = [self._frozen] if self._frozen is not None else []
        return models + [loaded.model for loaded in self._teachers.values()]

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
            if path != "embedded":
                check_model_path(str(path), field="teacher_model.path")
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
    rollout: RolloutEngine
    datamodule: RolloutDataModule
    module: PolicyModule
    trainer: L.Trainer | None
    summary: RunSummary | None = None

    def close(self) -> None:
        """Free the sampler's engine for good (:meth:`mintrl.sampler.base.Sampler.close`;
        idempotent): the entry points call it when a run ends, also on error, so a Hydra multirun
        in one process never holds two engines."""
        self.rollout.sampler.close()


def split_max_staleness(rollout: DictConfig) -> tuple[DictConfig | dict, int]:
    """The rollout engine's config without ``max_staleness``, and that field (optimizer steps,
    default 0): the data module runs the pipeline it sets, the engine does not take it. A config
    without the field is returned as it is; with it, resolved into a plain dict."""
    if "max_staleness" not in rollout:
        return rollout, 0
    engine = OmegaConf.to_container(rollout, resolve=True)
    return engine, engine.pop("max_staleness")


def build_components(cfg: DictConfig, trainer: bool = True) -> Components:
    """Instantiate every component of ``cfg`` in dependency order.

    model -> sampler -> judge, intervention, reward, allocation, guide -> rollout -> data -> objective -> module ->
    logger, callbacks -> trainer.
    """
    check_config(cfg)
    context = ModelContext(instantiate(cfg.model))
    tokenizer = context.tokenizer
    sampler = instantiate(cfg.sampler, model=context.policy, tokenizer=tokenizer)
    judge = instantiate(cfg.judge, context=context)
    intervention = instantiate(cfg.intervention, context=context)
    reward = instantiate(cfg.reward) if cfg.get("reward") else None  # None: the environment scores (env=)
    allocation = instantiate(cfg.allocation) if cfg.get("allocation") else None
    guide = instantiate(cfg.guide, tokenizer=tokenizer) if cfg.get("guide") else None
    guided = {"guide": guide} if guide is not None and guide.adds_rollouts else {}  # guide=none: nothing passed
    if guided and get_class(cfg.rollout._target_).multi_turn:
        raise ValueError(f"guide={type(guide).__name__} needs single-turn rollouts (rollout=single_turn), not episodes")
    engine_cfg, max_staleness = split_max_staleness(cfg.rollout)
    rollout = instantiate(
        engine_cfg,
        sampler=sampler,
        judge=judge,
        intervention=intervention,
        reward=reward,
        tokenizer=tokenizer,
        allocation=allocation,
        **guided,
    )
    objective = instantiate(cfg.objective, context=context)
    if objective.needs_first_error:  # the judge marks each failed rollout's first wrong step (objective=first_error)
        rollout.mark_first_error = True
    module = instantiate(
        cfg.module,
        policy=context.policy,
        objective=objective,
        tokenizer=tokenizer,
        companion_models=context.companion_models,
    )
    datamodule = instantiate(
        cfg.data,
        rollout=rollout,
        tokenizer=tokenizer,
        max_staleness=max_staleness,
        updates_per_batch=module.updates_per_batch,
    )
    built_trainer, summary = None, None
    if trainer:
        logger = instantiate(cfg.logger) if cfg.get("logger") else False
        callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
        summary = next((c for c in callbacks if isinstance(c, RunSummary)), None)
        built_trainer = instantiate(cfg.trainer, logger=logger, callbacks=callbacks)
    return Components(context, rollout, datamodule, module, built_trainer, summary)
