"""Run a composed training config: build, validate, train, export (behind ``mintrl-train``)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import lightning.pytorch as L
from hydra.utils import instantiate
from omegaconf import DictConfig

from mintrl.build.components import build_components
from mintrl.build.config_checks import check_config
from mintrl.build.memory_plan import plan_and_check
from mintrl.core.manifest import write_manifest
from mintrl.sft.stage import models_device, place_models, strategy_places_policy
from mintrl.training.checkpointing import checkpoint_to_resume, is_checkpoint

log = logging.getLogger(__name__)


def resume_checkpoint(cfg: DictConfig) -> str | None:
    """The checkpoint a run resumes from: ``ckpt_path`` when given (``last`` = the output folder's
    ``checkpoints/last.ckpt``), else that checkpoint when it exists (a preempted job restarted with the
    same ``paths.output_dir`` continues where it stopped), else None. A checkpoint is a file or a
    sharded folder (``trainer=fsdp``); a sharded save killed between its two renames left the
    previous ``last.ckpt`` aside, which is taken instead
    (:func:`mintrl.training.checkpointing.checkpoint_to_resume`).

    Raises:
        FileNotFoundError: ``ckpt_path`` names a missing file or folder (or an incomplete sharded
            folder), or ``last`` when there is none.
    """
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    wanted = cfg.get("ckpt_path")
    if wanted in (None, "auto"):
        found = checkpoint_to_resume(last) if cfg.get("train", True) else None
        return str(found) if found is not None else None
    found = checkpoint_to_resume(last) if wanted == "last" else Path(str(wanted))
    if found is None or not is_checkpoint(found):
        raise FileNotFoundError(f"ckpt_path={wanted}: no checkpoint at {last if found is None else found}")
    return str(found)


def run(cfg: DictConfig) -> dict:
    """Build, validate at step 0 (not when resuming), train (from :func:`resume_checkpoint` when
    there is one), export; returns the run summary (see ``RunSummary``). Before building, prints
    the memory plan and refuses a GPU run over the device's memory
    (:func:`mintrl.build.memory_plan.plan_and_check`, raises ``MemoryPlanError``). First writes
    the run manifest ``<paths.output_dir>/manifest.json`` (the commit of the imported code, the machine, the
    command line: :mod:`mintrl.core.manifest`)."""
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*IterableDataset.*__len__.*")
    # manual optimisation: checkpoints hold the weights after the step's updates, which is what resuming needs
    warnings.filterwarnings("ignore", ".*ModelCheckpoint with manual optimization.*")
    L.seed_everything(cfg.seed, workers=True)
    write_manifest(cfg.paths.output_dir)
    check_config(cfg)  # the cross-field checks, then the memory plan: printed, and a GPU run over the device
    plan_and_check(cfg)  # stops here, before any model loads (mintrl.build.memory_plan)
    c = build_components(cfg)
    try:
        return _run(cfg, c)
    finally:
        c.close()  # the sampler's engine (vLLM) is freed when the run ends, also on error


def _run(cfg: DictConfig, c) -> dict:
    """The body of :func:`run` on built components."""
    log.info("policy: %s", c.context.source)
    ckpt_path = resume_checkpoint(cfg)
    if ckpt_path is not None:
        log.info("resuming from %s (the SFT stage and the step-0 validation are not run again)", ckpt_path)
    # every model on the trainer's device (its strategy's root device) before anything generates: the SFT
    # stage and the step-0 validation run before fit would otherwise generate on the CPU. A sharded policy is
    # left to its strategy (configure_model shards it, then only the shards move); the SFT stage places its own
    place_models(c, models_device(c.trainer), policy=not strategy_places_policy(c.trainer))
    sft_summary = None
    if cfg.get("sft") and ckpt_path is None:  # SFT+GRPO: supervised stage first, RL continues from its weights
        logger = (
            instantiate(cfg.logger, name=f"{cfg.logger.get('name', 'tensorboard')}_sft") if cfg.get("logger") else False
        )
        sft_summary = instantiate(cfg.sft).run(c, cfg.trainer, logger=logger)
        log.info("SFT stage: %s", sft_summary)
    if (cfg.get("validate_at_start", True) and ckpt_path is None) or not cfg.get("train", True):
        metrics = c.trainer.validate(c.module, datamodule=c.datamodule, verbose=False)
    if not cfg.get("train", True):  # evaluation only (the "base" row of the experiment grid)
        reward = metrics[0].get("val/reward") if metrics else None
        log.info(
            "evaluation only (train=false): val/reward = %s over %d validation prompts",
            reward,
            len(c.datamodule.val_items),
        )
        return {"steps": 0, "val_reward_first": reward, "val_reward_last": reward, "sft": sft_summary}
    c.trainer.fit(c.module, datamodule=c.datamodule, ckpt_path=ckpt_path)
    summary = dict(c.summary.summary) if c.summary is not None else {}
    if sft_summary is not None:
        summary["sft"] = sft_summary
    return summary
