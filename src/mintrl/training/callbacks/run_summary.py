"""A one-screen summary at the end of a run."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import lightning.pytorch as L

from mintrl.training.callbacks.export import HFExport
from mintrl.training.callbacks.records import RolloutRecords

if TYPE_CHECKING:
    from mintrl.training.module import PolicyModule


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


class RunSummary(L.Callback):
    """Prints first vs last held-out and control reward, the off-policy fraction and where the
    logs, checkpoints (last, and the best by a monitored metric such as ``val/pass@1``) and Hugging
    Face folder are; ``self.summary`` keeps the numbers.

    Args:
        path: also write the numbers as JSON here at the end of fitting (rewards 0-1, ``minutes`` of
            wall time, paths as strings, NaN written as null; rank 0 only); None: print only.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.summary: dict = {}
        self._t0 = time.perf_counter()

    def on_fit_start(self, trainer, module) -> None:
        self._t0 = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, module: PolicyModule) -> None:
        hist, val = module.history, module.val_history
        k = max(1, len(hist) // 4)
        last = trainer.checkpoint_callback
        ckpt = (last.last_model_path or last.best_model_path) if last is not None else ""
        export = next((c for c in trainer.callbacks if isinstance(c, HFExport)), None)
        best = next((c for c in trainer.checkpoint_callbacks if c.monitor and c.best_model_path), None)
        records = next((c for c in trainer.callbacks if isinstance(c, RolloutRecords) and c.enabled), None)
        self.summary = {
            "steps": trainer.global_step,
            "minutes": (time.perf_counter() - self._t0) / 60,
            "val_reward_first": val[0][1] if val else None,
            "val_reward_last": val[-1][1] if val else None,
            "control_reward_first": _mean(h.get("reward/control") for h in hist[:k]),
            "control_reward_last": _mean(h.get("reward/control") for h in hist[-k:]),
            "semi_minus_control": _mean(h.get("reward/gap") for h in hist),
            "offpolicy_frac": _mean(h.get("rollout/offpolicy_frac") for h in hist),
            "log_dir": trainer.logger.log_dir if trainer.logger is not None else None,
            "checkpoint": ckpt,
            "best_checkpoint": best.best_model_path if best else None,
            "best_score": float(best.best_model_score) if best and best.best_model_score is not None else None,
            "best_monitor": best.monitor if best else None,
            "hf_folder": str(export.dirpath or f"{trainer.default_root_dir}/hf_policy") if export else None,
            "records": str(records.writer.root) if records is not None and records.writer is not None else None,
        }
        if not trainer.is_global_zero:
            return
        if self.path is not None:
            out = Path(self.path)
            out.parent.mkdir(parents=True, exist_ok=True)
            clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in self.summary.items()}
            out.write_text(json.dumps(clean, indent=2) + "\n")
        s = self.summary

        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.3f}"

        lines = [
            "",
            "=" * 72,
            f"mintrl run summary: {s['steps']} optimizer steps in {s['minutes']:.1f} min",
            f"  held-out reward (val/reward):   first {fmt(s['val_reward_first'])}  ->  last {fmt(s['val_reward_last'])}",
            f"  control reward (first/last {k} steps): {fmt(s['control_reward_first'])}  ->  {fmt(s['control_reward_last'])}",
            f"  semi-on-policy minus control:   {fmt(s['semi_minus_control'])}   off-policy token fraction: {fmt(s['offpolicy_frac'])}",
            f"  TensorBoard logs: {s['log_dir']}   (tensorboard --logdir {s['log_dir']})",
            f"  Lightning checkpoint: {s['checkpoint'] or 'none'}",
            *(
                [f"  best checkpoint ({s['best_monitor']} = {fmt(s['best_score'])}): {s['best_checkpoint']}"]
                if s["best_checkpoint"]
                else []
            ),
            f"  Hugging Face policy: {s['hf_folder']}",
            *([f"  summary (JSON): {self.path}"] if self.path is not None else []),
            *([f"  Rollout records: {s['records']}   (mintrl-rollouts {s['records']})"] if s["records"] else []),
            "=" * 72,
        ]
        print("\n".join(lines), flush=True)
