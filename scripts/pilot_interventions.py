"""Pilot: does an intervention lift semi-on-policy reward above control? (MInTRL App. H tuning)

Generates rollouts with the base policy (no training) for each intervention and seed and prints
control vs semi-on-policy reward, their difference with a standard error, the off-policy token
fraction and revisions per rollout. Any train-config override applies, e.g.

    .venv/bin/python scripts/pilot_interventions.py --interventions rule self_privileged \
        --seeds 0 1 --prompts 32 rollout.n_control=4 rollout.n_semi=4
"""

from __future__ import annotations

import argparse
import math

import torch
from hydra import compose, initialize_config_dir

from mintrl.build import build_components
from mintrl.train import CONFIG_DIR



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interventions", nargs="+", default=["rule", "self_privileged"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--prompts", type=int, default=32, help="training prompts per seed")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of configs/train.yaml")
    args = parser.parse_args()
    rows = []
    for name in args.interventions:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-pilot", f"intervention={name}", *args.overrides])
        c = build_components(cfg, trainer=False)
        c.datamodule.setup()
        diffs, ctrl, semi, off, revs = [], [], [], [], []
        for seed in args.seeds:
            torch.manual_seed(seed)
            items = c.datamodule.train_items[seed * args.prompts : (seed + 1) * args.prompts]
            batch = c.rollout.generate(items, step=0)
            g = batch.group_index
            for k in range(len(items)):  # per-prompt difference of means (paired by prompt)
                in_g = g == k
                diffs.append((batch.rewards[in_g & ~batch.is_control].mean() - batch.rewards[in_g & batch.is_control].mean()).item())
            ctrl.append(batch.stats["reward/control"])
            semi.append(batch.stats["reward/semi"])
            off.append(batch.stats["rollout/offpolicy_frac_semi"])
            revs.append(batch.stats["judge/interventions_per_rollout"])
            print(f"{name} seed {seed}: control {ctrl[-1]:.3f} semi {semi[-1]:.3f} off-policy {off[-1]:.3f}", flush=True)
        mean = sum(diffs) / len(diffs)
        se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs))
        rows.append((name, sum(ctrl) / len(ctrl), sum(semi) / len(semi), mean, se, sum(off) / len(off), sum(revs) / len(revs)))
    print("\n| intervention | control reward | semi reward | semi - control (± s.e.) | off-policy tokens (semi) | revisions / rollout |")
    print("|---|---|---|---|---|---|")
    for name, c_, s_, m, se, o, r in rows:
        print(f"| {name} | {c_:.3f} | {s_:.3f} | {m:+.3f} ± {se:.3f} | {o:.1%} | {r:.2f} |")


if __name__ == "__main__":
    main()
