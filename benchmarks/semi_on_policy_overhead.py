"""Semi-on-policy overhead: the cost per response token of a MInTRL rollout batch (chunks, judge
reviews, truncation, interventions) against a pure on-policy batch of the same prompts and group
size, with the rule judge (the rollout machinery's own overhead) and with the self-privileged LLM
judge (plus the judge model's cost). Alternating, median of ``--repeats``. Target with the rule
judge: ratio <= 1.25.

    .venv/bin/python benchmarks/semi_on_policy_overhead.py [--prompts 8 --repeats 3 --sampler hf|vllm --device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import median, table
from hydra import compose, initialize_config_dir

from mintrl.build.components import build_components

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")


def _rollout(overrides: list[str], sampler: str, device: str):
    if sampler == "vllm":  # three engines side by side: a small share of the GPU each
        overrides = [
            *overrides,
            "sampler=vllm",
            "sampler.gpu_memory_utilization=0.15",
            "sampler.max_model_len=1024",
            f"sampler.enforce_eager={device == 'cpu'}",
        ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-bench", "rollout.progress=false", *overrides])
    c = build_components(cfg, trainer=False)
    c.context.policy.to(device)
    c.datamodule.setup()
    return c.rollout, c.datamodule.train_items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampler", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    group = ["rollout.n_control=2", "rollout.n_semi=2"]
    variants = {
        "on-policy": ["rollout.n_control=4", "rollout.n_semi=0"],
        "MInTRL, rule judge": group,
        "MInTRL, self-privileged judge": [*group, "judge=self_privileged", "intervention=self_privileged"],
    }
    engines = {name: _rollout(o, args.sampler, args.device) for name, o in variants.items()}
    for rollout, items in engines.values():  # warm-up (starts a vLLM engine), on a prompt never measured
        rollout.generate(items[-1:], step=0)
    per_token: dict[str, list[float]] = {name: [] for name in variants}
    absolute: dict[str, list[tuple[float, int, float]]] = {name: [] for name in variants}
    for r in range(args.repeats):
        for name, (rollout, items) in engines.items():
            torch.manual_seed(r)
            batch_items = items[r * args.prompts : (r + 1) * args.prompts]
            start = time.perf_counter()
            batch = rollout.generate(batch_items, step=0)
            seconds = time.perf_counter() - start
            tokens = int(batch.response_mask.sum())
            per_token[name].append(seconds / tokens)
            absolute[name].append((seconds, tokens, batch.stats.get("judge/interventions_per_rollout", 0.0)))
    base = median(per_token["on-policy"])
    rows = []
    for name in ("MInTRL, rule judge", "MInTRL, self-privileged judge"):
        m = median(per_token[name])
        secs = median([a[0] for a in absolute[name]])
        toks = median([a[1] for a in absolute[name]])
        fixes = median([a[2] for a in absolute[name]])
        rows.append(
            (
                f"{name} / on-policy, s per response token" + (" (target <= 1.25)" if "rule" in name else ""),
                m / base,
                f"{secs:.1f} s for {toks:.0f} tokens, {fixes:.2f} interventions per semi rollout",
            )
        )
    on = absolute["on-policy"]
    table(
        f"semi-on-policy overhead, {args.prompts} prompts x 4 rollouts, {args.sampler} sampler ({args.device})",
        rows,
        [
            f"on-policy: {median([a[0] for a in on]):.1f} s for {median([a[1] for a in on]):.0f} tokens; "
            f"medians of {args.repeats} alternating repetitions, each on new prompts"
        ],
    )


if __name__ == "__main__":
    main()
