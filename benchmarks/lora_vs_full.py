"""LoRA (``model/lora=default``) against full fine-tuning on the main job, side by side in one run:
peak resident memory of the whole process, generation and update time per step.

Each variant is a fresh ``mintrl-train`` process of ``--steps`` main-job steps (same seed, no
validation at start, no final validation), alternating (full, LoRA, full, LoRA, ... for
``--repeats``); peak memory is the process's maximum resident set (``/usr/bin/time -f %M``); speeds
are medians over the steps after the first, per token because the two runs' responses differ in
length: generation ``perf/gen_tokens_per_s``, update ``perf/update_seconds`` per response token
(``rollout/response_len`` x the step's 32 rows).

    .venv/bin/python benchmarks/lora_vs_full.py [--steps 4 --repeats 1]
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import median
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

BIN = Path(sys.executable).parent
ROWS = 32  # rollouts per main-job step: 8 prompts x (2 control + 2 semi-on-policy)


def scalars(folder: str) -> dict[str, list[float]]:
    out: dict[str, dict[int, float]] = {}
    for path in glob.glob(f"{folder}/tensorboard/**/events.out.tfevents.*", recursive=True):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in events.Scalars(tag)})
    return {tag: [v for _, v in sorted(values.items())] for tag, values in out.items()}


def run(lora: bool, steps: int, folder: str) -> dict[str, float]:
    overrides = [
        f"trainer.max_steps={steps}",
        "validate_at_start=false",
        f"trainer.val_check_interval={steps + 1}",
        f"paths.output_dir={folder}",
    ] + (["model/lora=default"] if lora else [])
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%M", str(BIN / "mintrl-train"), *overrides],
        capture_output=True,
        text=True,
        check=True,
    )
    peak_kib = int(result.stderr.strip().splitlines()[-1])
    logged = scalars(folder)
    rows = [length * ROWS for length in logged["rollout/response_len"]]  # response tokens per step
    return {
        "peak_gib": peak_kib / 2**20,
        "gen_tok_s": median(logged["perf/gen_tokens_per_s"][1:]),
        "update_ms_per_token": median([1e3 * u / t for u, t in zip(logged["perf/update_seconds"][1:], rows[1:])]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"full": [], "lora": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name in results:
                results[name].append(run(name == "lora", args.steps, f"{tmp}/{name}{r}"))
    summary = {name: {k: median([x[k] for x in rows]) for k in rows[0]} for name, rows in results.items()}
    print(
        f"\n## LoRA vs full fine-tuning: main job, {args.steps} steps x {args.repeats} runs each, load {os.getloadavg()[0]:.2f}"
    )
    print("\n| measure | LoRA / full | LoRA | full |")
    print("|---|---:|---:|---:|")
    for key, label in (
        ("peak_gib", "peak resident memory (GiB)"),
        ("gen_tok_s", "generation (tokens/s)"),
        ("update_ms_per_token", "update (ms per response token)"),
    ):
        lo, fu = summary["lora"][key], summary["full"][key]
        print(f"| {label} | {lo / fu:.2f} | {lo:.2f} | {fu:.2f} |")


if __name__ == "__main__":
    main()
