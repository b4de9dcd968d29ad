"""Environment time in an agent training step: how a step of a multi-turn run (``rollout=episodes``)
splits into generation (policy sampling, judge, interventions), environment (the environment's
``reset``/``step`` calls) and update (forward, backward, optimizer). Runs ``--steps`` optimizer
steps of an agent row with the usual trainer and reads the logged scalars back:

* ``perf/step_seconds``: wall time of a step (rollouts + update), seconds;
* ``episode/env_seconds``: time inside the environment, summed over the step's turns, seconds;
* ``perf/gen_seconds``: the rollout batch's time without the environment, seconds;
* ``perf/update_seconds``: the update, seconds.

The first step is reported apart (it warms caches); the table gives medians of the rest. Target:
environment <= 10% of the step time on the embedded model.

    .venv/bin/python benchmarks/env_time.py [--row "method=mintrl_const preset=cpu_sql" --steps 4 --device cpu] [override ...]

``--row`` is the row's overrides, space-separated: a method and an agent preset (``method=rail
preset=cpu_shell``), an experiment (``experiment=paper/agent_rail``), or ``+preset=cpu_sql`` alone.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import median, table
from hydra import compose, initialize_config_dir

from mintrl.analysis.tensorboard import load_scalars
from mintrl.build.run import run

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
ROW = "method=mintrl_const preset=cpu_sql"  # MInTRL-Const on the SQL agent, embedded model
PARTS = {
    "generation (policy, judge, interventions)": "perf/gen_seconds",
    "environment": "episode/env_seconds",
    "update": "perf/update_seconds",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default=ROW, help=f"the row's overrides, space-separated (default: {ROW})")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps (the first is reported apart)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda (trainer=gpu)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides, e.g. data=sql_medium")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is a warm-up)")
    out = tempfile.mkdtemp(prefix="mintrl-env-time-")
    overrides = [
        *args.row.split(),
        f"trainer.max_steps={args.steps}",
        "validate_at_start=false",
        "+trainer.limit_val_batches=0",  # no validation
        "callbacks=sweep",
        "callbacks.hf_export=null",
        "rollout.progress=false",
        f"paths.output_dir={out}",
        *(["trainer=gpu"] if args.device == "cuda" else []),
        *args.overrides,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    run(cfg)
    scalars = load_scalars(out)
    series = {name: [v for _, v in scalars[tag]] for name, tag in {**PARTS, "step": "perf/step_seconds"}.items()}
    # perf/step_seconds is logged from the second step on (time between the ends of two steps)
    steps = series["step"]
    parts = {name: values[1:] for name, values in series.items() if name != "step"}
    step_median = median(steps)
    rows = [
        (
            name,
            median(v) / step_median,
            f"median {median(v):.3f} s of {step_median:.2f} s; first step {series[name][0]:.3f} s",
        )
        for name, v in parts.items()
    ]
    env_share = median(parts["environment"]) / step_median
    table(
        f"{args.row}: parts of a step ({args.steps} steps on {args.device}, medians of steps 2..)",
        rows,
        [
            f"environment share {env_share:.1%} (target <= 10%): {'met' if env_share <= 0.10 else 'NOT met'}",
            f"run folder {out}",
        ],
    )


if __name__ == "__main__":
    main()
