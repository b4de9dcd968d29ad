"""``mintrl-eval``: pass@k of a checkpoint on one benchmark (``configs/eval.yaml``; see
:func:`mintrl.eval.evaluate.evaluate`)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from mintrl.build.config import CONFIG_DIR
from mintrl.eval.evaluate import evaluate


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="eval")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point. Returns pass@1 (the sweep objective)."""
    return evaluate(cfg)["pass_at_k"].get(1)


if __name__ == "__main__":
    main()
