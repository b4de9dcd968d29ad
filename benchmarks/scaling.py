"""Scaling: time of one on-policy GRPO step (generation + update, HF sampler, CPU) as the group size
and the response length double. Prints each time and the fitted exponent ``b`` of ``time ~ x^b``
(1 = linear) from the medians, alternating over ``--repeats``.

    .venv/bin/python benchmarks/scaling.py [--prompts 2 --group 2 --tokens 32 --doublings 2 --sampler hf|vllm --device cpu|cuda]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch
from _common import median, table
from hydra import compose, initialize_config_dir

from mintrl.build.components import build_components
from mintrl.objective.aggregation import step_totals

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--doublings", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sampler", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    overrides = [
        f"paths.output_dir={tempfile.mkdtemp()}",
        "objective=grpo",
        "judge=always_keep",
        "rollout.n_semi=0",
        "rollout.progress=false",
        "data.prompts.train_size=200",
        f"sampler={args.sampler}",
    ]
    if args.sampler == "vllm":
        overrides += ["sampler.max_model_len=2048", f"sampler.enforce_eager={args.device == 'cpu'}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    c = build_components(cfg, trainer=False)
    c.datamodule.setup()
    rollout, module, policy, items = c.rollout, c.module, c.context.policy.to(args.device), c.datamodule.train_items
    module.objective.setup(policy)
    optimizer = module.optimizer_factory(list(policy.parameters()))

    def step(group: int, tokens: int, seed: int) -> None:
        rollout.n_control, rollout.max_response_tokens = group, tokens
        torch.manual_seed(seed)
        batch = rollout.generate(items[seed * args.prompts : (seed + 1) * args.prompts], step=0)
        batch = batch.to(args.device)
        module.objective.prepare(batch, module.frozen_logprobs)
        module.accumulate(batch, step_totals(batch.loss_mask))
        optimizer.zero_grad(set_to_none=True)  # measure the work, keep the weights
        if args.device != "cpu":
            torch.cuda.synchronize()

    points = {
        "group": [(args.group * 2**d, args.tokens) for d in range(args.doublings + 1)],
        "response length": [(args.group, args.tokens * 2**d) for d in range(args.doublings + 1)],
    }
    step(args.group, 8, 99)  # warm-up
    times: dict[tuple[int, int], list[float]] = {p: [] for ps in points.values() for p in ps}
    for r in range(args.repeats):
        for p in times:
            start = time.perf_counter()
            step(*p, seed=r)
            times[p].append(time.perf_counter() - start)
    rows = []
    for axis, ps in points.items():
        x = [math.log(p[0] if axis == "group" else p[1]) for p in ps]
        y = [math.log(median(times[p])) for p in ps]
        mx, my = sum(x) / len(x), sum(y) / len(y)
        slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
        rows.append(
            (
                f"exponent of step time in {axis}",
                slope,
                ", ".join(f"{p[0] if axis == 'group' else p[1]}: {median(times[p]):.1f} s" for p in ps),
            )
        )
    table(
        f"scaling of an on-policy GRPO step ({args.prompts} prompts, {args.sampler} sampler, {args.device}): time ~ x^b",
        rows,
        [
            f"group size from {args.group} at {args.tokens} tokens; length from {args.tokens} at group {args.group}; "
            f"the length budget is a maximum (responses that end early shorten the step); medians of {args.repeats}"
        ],
    )


if __name__ == "__main__":
    main()
