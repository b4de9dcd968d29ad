"""``mintrl-pilot``: MInTRL Appendix H's tuning table (``configs/pilot.yaml``; see
:mod:`mintrl.eval.pilot`)."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from mintrl.build.config import CONFIG_DIR
from mintrl.eval.pilot import format_table, run_pilot


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="pilot")
def main(cfg: DictConfig) -> None:
    """Hydra entry point: print the table and write it to ``pilot.output``."""
    table = format_table(run_pilot(cfg))
    print(table, flush=True)
    if cfg.pilot.get("output"):
        out = Path(cfg.pilot.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(table + "\n")


if __name__ == "__main__":
    main()
