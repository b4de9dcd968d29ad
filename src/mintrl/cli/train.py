"""``mintrl-train`` / ``python -m mintrl.cli.train``: compose ``configs/train.yaml`` and run it.

Examples::

    mintrl-train                                   # MInTRL-Const on the embedded default
    mintrl-train objective=regression_proxy judge=rule intervention=rule
    mintrl-train model=hf model.path=/path/to/hf_folder trainer.max_steps=100
    mintrl-train -m objective=regression_const,regression_proxy seed=1,2   # multirun sweep
    mintrl-train --plan experiment=paper/mintrl_const   # print the memory plan and exit (no model loaded)

Every run prints its memory plan (:mod:`mintrl.build.memory_plan`) before any model loads, and a GPU
run whose plan exceeds the device stops there.
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from mintrl.build.config import CONFIG_DIR

PLAN_FLAG = "--plan"


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def train(cfg: DictConfig) -> float | None:
    """Hydra entry point. Returns the last held-out reward (the sweep objective)."""
    from mintrl.build.run import run

    if cfg.get("print_config", False):
        print(OmegaConf.to_yaml(cfg, resolve=True))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    summary = run(cfg)
    return summary.get("val_reward_last")


def print_plan(overrides: list[str]) -> int:
    """``mintrl-train --plan <overrides>``: compose the config with ``overrides``, check it
    (:func:`mintrl.build.config_checks.check_config`), print its memory plan and return the exit
    status (0: it fits, or a CPU run, which is never refused; 1: it does not fit, the refusal's message
    printed after the plan). Loads no model and builds no component."""
    from hydra import compose, initialize_config_dir

    from mintrl.build.config_checks import check_config
    from mintrl.build.memory_plan import MemoryPlanError, check_memory_plan, memory_plan

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    check_config(cfg)
    plan = memory_plan(cfg)
    print(plan.render())
    try:
        check_memory_plan(plan)
    except MemoryPlanError as err:
        print(f"\n{err}")
        return 1
    return 0


def main() -> float | None:
    """The console script: ``--plan`` prints the memory plan (:func:`print_plan`) and exits;
    anything else is a Hydra run (:func:`train`)."""
    if PLAN_FLAG in sys.argv[1:]:
        sys.exit(print_plan([a for a in sys.argv[1:] if a != PLAN_FLAG]))
    return train()


if __name__ == "__main__":
    main()
