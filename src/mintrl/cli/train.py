"""``mintrl-train`` / ``python -m mintrl.cli.train``: compose ``configs/train.yaml`` and run it.

Examples::

    mintrl-train                                   # MInTRL-Const on the embedded default
    mintrl-train objective=regression_proxy judge=rule intervention=rule
    mintrl-train model=hf model.path=/path/to/hf_folder trainer.max_steps=100
    mintrl-train -m objective=regression_const,regression_proxy seed=1,2   # multirun sweep
"""

from __future__ import annotations

import os

import hydra
from omegaconf import DictConfig, OmegaConf

from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run


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
