"""Fabricated multiruns with known numbers (tests of mintrl-summary and the analysis notebook): JOBS, one
job per setting; SEEDED_JOBS, settings crossed with seeds (intervals over seeds, hand-computed in
tests/unit/test_summary.py)."""

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


# A seeded multirun: 3 settings x seeds; job -> (overrides, {tag: points} or None, held-out size).
# The held-out size (val_size prompts, val_samples_per_prompt) goes into .hydra/config.yaml.
HELDOUT = (64, 4)  # N = 256 held-out rollouts
SEEDED_JOBS = {
    # MInTRL-Const, 3 seeds: final 0.5 / 0.6 / 0.7; areas 0.375 / 0.45 / 0.525
    "0": (["objective=regression_const", "rollout.progress=false", "seed=0"], {"val/pass@1": [(0, 0.2), (4, 0.4), (8, 0.5)]}),
    "1": (["objective=regression_const", "rollout.progress=False", "seed=1"], {"val/pass@1": [(0, 0.2), (4, 0.5), (8, 0.6)]}),
    "2": (["seed=2", "rollout.progress=false", "objective=regression_const"], {"val/pass@1": [(0, 0.2), (4, 0.6), (8, 0.7)]}),
    # no-intervention, 2 seeds (validation at steps 0 and 8 only): final 0.3 / 0.5; areas 0.25 / 0.35
    "3": (["judge=none", "rollout.progress=false", "seed=0"], {"val/reward": [(0, 0.2), (8, 0.3)]}),
    "4": (["judge=none", "rollout.progress=false", "seed=1"], {"val/reward": [(0, 0.2), (8, 0.5)]}),
    # GRPO: seed 0 ran (final 0.45, area 0.3125), seed 1 has no event files
    "5": (["objective=grpo", "rollout.progress=false", "seed=0"], {"val/pass@1": [(0, 0.2), (4, 0.3), (8, 0.45)]}),
    "6": (["objective=grpo", "rollout.progress=false", "seed=1"], None),
}  # fmt: skip


def write_job(job_dir: Path, overrides: list[str], scalars: dict | None, config: dict | None = None) -> None:
    from torch.utils.tensorboard import SummaryWriter

    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if config is not None:
        (job_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
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


def write_seeded_multirun(root: Path) -> Path:
    """Write SEEDED_JOBS as a Hydra multirun folder under ``root``, each job's config holding the
    held-out size HELDOUT; returns root."""
    prompts, samples = HELDOUT
    config = {"data": {"prompts": {"val_size": prompts}, "val_samples_per_prompt": samples}}
    for name, (overrides, scalars) in SEEDED_JOBS.items():
        write_job(root / name, overrides, scalars, config)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root
