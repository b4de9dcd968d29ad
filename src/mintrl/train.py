"""Entry point: ``python -m mintrl.train`` / ``mintrl-train`` (Hydra; overrides on the command line).

Examples::

    mintrl-train                                   # MInTRL-Const on the embedded default
    mintrl-train objective=regression_proxy judge=rule intervention=rule
    mintrl-train model=hf model.path=/path/to/hf_folder trainer.max_steps=100
    mintrl-train -m objective=regression_const,regression_proxy seed=1,2   # multirun sweep
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import hydra
import lightning.pytorch as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from mintrl.build import build_components

log = logging.getLogger(__name__)

# Absolute, so that `python -m mintrl.train` and the `mintrl-train` console script find the same
# configs (the repository's configs/ next to src/); MINTRL_CONFIG_DIR points elsewhere.
CONFIG_DIR = os.environ.get("MINTRL_CONFIG_DIR", str(Path(__file__).resolve().parents[2] / "configs"))


def resume_checkpoint(cfg: DictConfig) -> str | None:
    """The checkpoint a run resumes from: ``ckpt_path`` when given (``last`` = the output folder's
    ``checkpoints/last.ckpt``), else that file when it exists (a preempted job restarted with the
    same ``paths.output_dir`` continues where it stopped), else None.

    Raises:
        FileNotFoundError: ``ckpt_path`` names a missing file, or ``last`` when there is none.
    """
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    wanted = cfg.get("ckpt_path")
    if wanted in (None, "auto"):
        return str(last) if last.is_file() and cfg.get("train", True) else None
    path = last if wanted == "last" else Path(str(wanted))
    if not path.is_file():
        raise FileNotFoundError(f"ckpt_path={wanted}: no checkpoint at {path}")
    return str(path)


def run(cfg: DictConfig) -> dict:
    """Build, validate at step 0 (not when resuming), train (from :func:`resume_checkpoint` when
    there is one), export; returns the run summary (see ``RunSummary``)."""
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*IterableDataset.*__len__.*")
    # manual optimisation: checkpoints hold the weights after the step's updates, which is what resuming needs
    warnings.filterwarnings("ignore", ".*ModelCheckpoint with manual optimization.*")
    L.seed_everything(cfg.seed, workers=True)
    c = build_components(cfg)
    log.info("policy: %s", c.context.source)
    ckpt_path = resume_checkpoint(cfg)
    if ckpt_path is not None:
        log.info("resuming from %s (the SFT stage and the step-0 validation are not run again)", ckpt_path)
    sft_summary = None
    if cfg.get("sft") and ckpt_path is None:  # SFT+GRPO: supervised stage first, RL continues from its weights
        logger = instantiate(cfg.logger, name=f"{cfg.logger.get('name', 'tensorboard')}_sft") if cfg.get("logger") else False
        sft_summary = instantiate(cfg.sft).run(c, cfg.trainer, logger=logger)
        log.info("SFT stage: %s", sft_summary)
    if (cfg.get("validate_at_start", True) and ckpt_path is None) or not cfg.get("train", True):
        metrics = c.trainer.validate(c.module, datamodule=c.datamodule, verbose=False)
    if not cfg.get("train", True):  # evaluation only (the "base" row of the experiment grid)
        reward = metrics[0].get("val/reward") if metrics else None
        log.info("evaluation only (train=false): val/reward = %s over %d validation prompts", reward, len(c.datamodule.val_items))
        return {"steps": 0, "val_reward_first": reward, "val_reward_last": reward, "sft": sft_summary}
    c.trainer.fit(c.module, datamodule=c.datamodule, ckpt_path=ckpt_path)
    summary = next((cb.summary for cb in c.trainer.callbacks if cb.__class__.__name__ == "RunSummary"), {})
    if sft_summary is not None:
        summary["sft"] = sft_summary
    return summary


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point. Returns the last held-out reward (the sweep objective)."""
    if cfg.get("print_config", False):
        print(OmegaConf.to_yaml(cfg, resolve=True))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    summary = run(cfg)
    return summary.get("val_reward_last")


if __name__ == "__main__":
    main()
