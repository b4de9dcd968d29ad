"""Fabricated multiruns with known numbers (tests of mintrl-summary and the analysis notebook): JOBS, one
job per setting; SEEDED_JOBS, settings crossed with seeds (intervals over seeds, hand-computed in
tests/unit/test_summary.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

# job -> (overrides, {tag: [(step, value), ...]}); None: the job has no event files
JOBS = {
    "0": (
        ["+sweep=intensity", "rollout.progress=false", "judge=always_keep"],
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
    "3": (["judge=always_keep", "rollout.progress=false", "seed=0"], {"val/reward": [(0, 0.2), (8, 0.3)]}),
    "4": (["judge=always_keep", "rollout.progress=false", "seed=1"], {"val/reward": [(0, 0.2), (8, 0.5)]}),
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


# The `make reproduce` multirun (tests/unit/test_reproduce.py): MInTRL-Const, GRPO and no-intervention x seeds
# 0, 1, 2, 6 optimizer steps, held-out pass@1 at steps 0, 3, 6; every job logs 6 perf/step_seconds of 10 s.
# Hand values: final pass@1 Const - GRPO per seed 0.10, 0.15, 0.05 (mean 0.10, sd 0.05: interval
# 0.10 ± 4.3027 * 0.05 / sqrt(3) contains 0, undecided; 4 seeds would decide it); Const reward/gap
# narrowing (mean of the first 2 steps minus the last 2) 0.20, 0.30, 0.25 (mean 0.25, sd 0.05: holds);
# last-step entropy Const - GRPO -0.30, -0.25, -0.20 (mean -0.25, sd 0.05: does not hold).
REPRO_FINALS = {
    "mintrl_const": (0.30, 0.40, 0.35),
    "grpo": (0.20, 0.25, 0.30),
    "no_intervention": (0.22, 0.27, 0.20),
}
REPRO_GAPS = (  # MInTRL-Const reward/gap per step, per seed
    (0.3, 0.3, 0.2, 0.2, 0.1, 0.1),
    (0.4, 0.4, 0.3, 0.2, 0.1, 0.1),
    (0.35, 0.35, 0.2, 0.2, 0.1, 0.1),
)
REPRO_ENTROPY = {
    "mintrl_const": (1.0, 1.1, 1.2),
    "grpo": (1.3, 1.35, 1.4),
    "no_intervention": (1.2,) * 3,
}
REPRO_OFFPOLICY = {"mintrl_const": 0.03, "grpo": 0.0, "no_intervention": 0.0}
# the intensity multirun: MInTRL-Const with rollout.max_reviews=1 (off-policy 1%) and =4 (8%), final pass@1 per
# seed; deltas vs no-intervention: reviews=1 +0.03 +0.03 +0.05, Const (3%) +0.08 +0.13 +0.15, reviews=4 -0.02
# +0.01 +0.02: the best setting (Const) lies inside and beats both ends with intervals above 0 (holds).
REPRO_INTENSITY = {
    "rollout.max_reviews=1": (0.01, (0.25, 0.30, 0.25)),
    "rollout.max_reviews=4": (0.08, (0.20, 0.28, 0.22)),
}


# method -> the objective and judge nodes its composed config holds (what names its row)
REPRO_PARTS = {
    "mintrl_const": ({"_target_": "mintrl.objective.regression.AdvantageRegression", "kappa": -0.2}, "RuleJudge"),
    "grpo": ({"_target_": "mintrl.objective.grpo.GRPO", "scale_std": True}, "AlwaysKeepJudge"),
    "no_intervention": (
        {"_target_": "mintrl.objective.regression.AdvantageRegression", "kappa": -0.2},
        "AlwaysKeepJudge",
    ),
}
JUDGE_MODULES = {"RuleJudge": "mintrl.judge.rule", "AlwaysKeepJudge": "mintrl.judge.always_keep"}


def repro_config(n_control: int, n_semi: int, max_steps: int = 6, method: str = "mintrl_const") -> dict:
    """The part of a job's .hydra/config.yaml that mintrl-reproduce reads: the budget, and the objective,
    judge, allocation and guide that name its row (REPRO_PARTS)."""
    objective, judge = REPRO_PARTS[method]
    return {
        "objective": dict(objective),
        "judge": {"_target_": f"{JUDGE_MODULES[judge]}.{judge}"},
        "allocation": {"_target_": "mintrl.allocation.uniform.UniformAllocation"},
        "guide": {"_target_": "mintrl.guide.base.NoGuide"},
        "trainer": {"max_steps": max_steps},
        "rollout": {"n_control": n_control, "n_semi": n_semi, "max_response_tokens": 64},
        "data": {
            "prompts_per_step": 8,
            "val_samples_per_prompt": 2,
            "prompts": {"val_size": 128, "task_kwargs": {"min_terms": 3, "max_terms": 3}},
        },
    }


def _repro_scalars(final: float, entropy: float, offpolicy: float, gaps=None) -> dict:
    scalars = {
        "val/pass@1": [(0, 0.05), (3, (0.05 + final) / 2), (6, final)],
        "train/policy_entropy": [(s, entropy + 0.1 * (6 - s)) for s in range(1, 7)],
        "rollout/offpolicy_frac": [(s, offpolicy) for s in range(1, 7)],
        "perf/step_seconds": [(s, 10.0) for s in range(1, 7)],
    }
    if gaps is not None:
        scalars["reward/gap"] = list(zip(range(1, 7), gaps))
    return scalars


def write_reproduce_multirun(root: Path) -> Path:
    """The methods multirun of `make reproduce` (REPRO_FINALS ...), jobs 0-8 in Hydra's order
    (method outer, seed inner, as the sweep's `method=` row names them); returns root."""
    job = 0
    for method, finals in REPRO_FINALS.items():
        for seed, final in enumerate(finals):
            gaps = REPRO_GAPS[seed] if method == "mintrl_const" else None
            scalars = _repro_scalars(final, REPRO_ENTROPY[method][seed], REPRO_OFFPOLICY[method], gaps)
            config = repro_config(4, 0, method=method) if method == "grpo" else repro_config(2, 2, method=method)
            write_job(root / str(job), [f"method={method}", f"seed={seed}", "+sweep=reproduce_core"], scalars, config)
            job += 1
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def write_intensity_multirun(root: Path, seeds: tuple[int, ...] = (0, 1, 2), settings: tuple[str, ...] = ()) -> Path:
    """The intensity multirun of `make reproduce-full` (REPRO_INTENSITY), of the given seeds and settings
    (empty: all, else keys of REPRO_INTENSITY: a sweep stopped part-way); returns root."""
    job = 0
    for setting, (offpolicy, finals) in REPRO_INTENSITY.items():
        if settings and setting not in settings:
            continue
        for seed, final in enumerate(finals):
            if seed not in seeds:
                continue
            overrides = ["method=mintrl_const", f"seed={seed}", setting, "+sweep=reproduce_intensity"]
            write_job(root / str(job), overrides, _repro_scalars(final, 1.0, offpolicy), repro_config(2, 2))
            job += 1
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root
