"""A fabricated multirun with known numbers (tests of mintrl-summary and the analysis notebook)."""

from __future__ import annotations

from pathlib import Path

import yaml

# job -> (overrides, {tag: [(step, value), ...]}); None: the job has no event files
JOBS = {
    "0": (
        ["+sweep=intensity", "rollout.progress=false", "judge=none"],
        {
            "rollout/offpolicy_frac": [(1, 0.0), (2, 0.0), (3, 0.0)],
            "val/reward": [(0, 0.20), (3, 0.30)],
            "reward/control": [(1, 0.1), (2, 0.2), (3, 0.3)],
        },
    ),
    "1": (
        ["+sweep=intensity", "rollout.progress=false", "rollout.max_reviews=1"],
        {
            "rollout/offpolicy_frac": [(1, 0.01), (2, 0.03), (3, 0.02)],
            "val/pass@1": [(0, 0.20), (3, 0.35)],
            "val/reward": [(0, 0.9), (3, 0.9)],  # val/pass@1 preferred
            "reward/control": [(1, 0.1), (2, 0.3), (3, 0.4)],
            "train/policy_entropy": [(1, 1.5), (2, 1.4), (3, 1.3)],
        },
    ),
    "2": (
        ["+sweep=intensity", "rollout.progress=false", "rollout.max_reviews=4"],
        {
            "rollout/offpolicy_frac": [(1, 0.04), (2, 0.06), (3, 0.05)],
            "val/pass@1": [(0, 0.20), (3, 0.25)],
            "reward/control": [(1, 0.1), (2, 0.1), (3, 0.2)],
        },
    ),
    "10": (["+sweep=intensity", "rollout.progress=false", "rollout.max_reviews=8"], None),
}


def write_job(job_dir: Path, overrides: list[str], scalars: dict | None) -> None:
    from torch.utils.tensorboard import SummaryWriter

    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if scalars is None:
        return
    writer = SummaryWriter(log_dir=str(job_dir / "tensorboard"))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()


def write_multirun(root: Path) -> Path:
    """Write JOBS as a Hydra multirun folder under ``root`` (one job folder per key); returns root."""
    for name, (overrides, scalars) in JOBS.items():
        write_job(root / name, overrides, scalars)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root
