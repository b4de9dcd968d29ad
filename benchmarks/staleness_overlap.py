"""Rollouts one batch ahead (``rollout.max_staleness=1``) vs each batch from the weights it trains
(``=0``) with a judge served over HTTP with latency: how much of the judge's network wait the
producer thread hides behind the trainer's update.

Serves the embedded model in-process (:class:`mintrl.sampler.chat_server.ChatServer`, loopback),
with ``--latency`` seconds slept per request before it generates (a stand-in for the network and
a remote server's queue; the sleep holds no lock, so concurrent requests wait together, as they
would on a network). Then runs the main job (MInTRL-Const, embedded policy, rule intervention) with
``judge=api`` pointed at that server for ``--steps`` optimizer steps at ``max_staleness=0`` and
``=1``, same seed, one after the other in this process (``--repeats`` alternates them), through the project's own entry
(Hydra compose + :func:`mintrl.build.run.run`), and reads back:

* ``perf/step_seconds``: wall time between the ends of two optimizer steps (the first from the
  start of training), seconds; the first step is left out of every median (a warm-up, and at
  ``s=1`` it generates the first batch with nothing to overlap);
* ``perf/gen_seconds`` and ``perf/update_seconds``: the batch's generation (judge wait included;
  at ``s=1`` in the producer thread, during the previous update) and the update, seconds; their
  sum against the step time within one run shows the overlap whatever the machine's load;
* the judge requests the server answered during each run, per optimizer step (at ``s=1`` the
  producer may have generated one batch past the last step, whose requests count too).

Target: s1 / s0 < 1 (the latency hidden behind the update); at best the step is
``max(generation, update)`` instead of their sum.

    .venv/bin/python benchmarks/staleness_overlap.py [--latency 1.0 --steps 4 --repeats 1 --device cpu] [override ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from _common import median, table
from hydra import compose, initialize_config_dir

from mintrl.analysis.tensorboard import load_scalars
from mintrl.build.run import run
from mintrl.model.loading import embedded_smollm2
from mintrl.sampler.chat_server import ChatServer

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
SERVED_NAME = "smollm2"


class SlowChatServer(ChatServer):
    """:class:`ChatServer` that sleeps ``latency_s`` seconds before each completion (outside the
    generation lock) and counts the completions it answered (``requests``)."""

    def __init__(self, *args, latency_s: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.latency_s = latency_s
        self.requests = 0
        self._count_lock = threading.Lock()

    def complete(self, request: dict) -> dict:
        time.sleep(self.latency_s)
        body = super().complete(request)
        with self._count_lock:
            self.requests += 1
        return body


def overrides_for(staleness: int, steps: int, base_url: str, out: str, device: str, extra: list[str]) -> list[str]:
    """The main job's overrides at ``rollout.max_staleness=staleness``: MInTRL-Const, ``judge=api`` at
    ``base_url``, 2 prompts per step, 32-token responses, no validation, no export."""
    return [
        "method=mintrl_const",
        "judge=api",
        f"judge.base_url={base_url}",
        f"judge.model={SERVED_NAME}",
        "judge.max_new_tokens=8",  # the served judge's own generation stays small next to the latency
        f"rollout.max_staleness={staleness}",
        "rollout.max_response_tokens=32",
        "rollout.progress=false",
        "data.prompts_per_step=2",
        f"trainer.max_steps={steps}",
        "validate_at_start=false",
        "+trainer.limit_val_batches=0",  # no validation
        "callbacks=sweep",
        "callbacks.hf_export=null",
        f"paths.output_dir={out}",
        *(["trainer=gpu"] if device == "cuda" else []),
        *extra,
    ]


TAGS = {"step": "perf/step_seconds", "gen": "perf/gen_seconds", "update": "perf/update_seconds"}


def run_once(server: SlowChatServer, staleness: int, args) -> dict:
    """One run at ``staleness``: its logged step, generation and update seconds (lists, one per
    logged step), the judge requests it made (``calls``) and its folder (``out``)."""
    out = tempfile.mkdtemp(prefix=f"mintrl-staleness{staleness}-")
    overrides = overrides_for(staleness, args.steps, server.base_url, out, args.device, args.overrides)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    before = server.requests
    run(cfg)
    scalars = load_scalars(out)
    return {
        **{name: [v for _, v in scalars[tag]] for name, tag in TAGS.items()},
        "calls": server.requests - before,
        "out": out,
    }


def overlap(result: dict) -> float:
    """Median over steps 2.. of step / (generation + update) within one run: about 1 when the batch
    is generated and then trained (s=0), down to max / sum when generation runs during the update.
    A ratio of the same run's own timings, so it is steadier than step times across runs on a
    machine whose load drifts."""
    pairs = zip(result["step"][1:], result["gen"][1:], result["update"][1:])
    return median([step / (gen + update) for step, gen, update in pairs])


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds slept per judge request")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run (>= 3)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per setting, alternating s=0, s=1, s=0, ...")
    parser.add_argument("--device", default="cpu", help="cpu | cuda (trainer=gpu; the server stays on CPU)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides for both runs")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be >= 3 (the first step is a warm-up)")
    served = embedded_smollm2()
    runs: dict[int, list[dict]] = {0: [], 1: []}
    with SlowChatServer(served.model, served.tokenizer, model_name=SERVED_NAME, latency_s=args.latency) as server:
        for _ in range(args.repeats):
            for staleness in runs:
                runs[staleness].append(run_once(server, staleness, args))

    def pooled(staleness: int, name: str) -> list[float]:  # steps 2.. of every run at that setting
        return [v for r in runs[staleness] for v in r[name][1:]]

    step = {s: median(pooled(s, "step")) for s in runs}
    gen = {s: median(pooled(s, "gen")) for s in runs}
    update = {s: median(pooled(s, "update")) for s in runs}
    calls = {s: sum(r["calls"] for r in runs[s]) / (args.steps * args.repeats) for s in runs}
    fold = {s: median([overlap(r) for r in runs[s]]) for s in runs}
    table(
        f"max_staleness=1 vs 0, judge over HTTP with {args.latency:.1f} s per request "
        f"({args.repeats} x {args.steps} steps each on {args.device}, medians of steps 2..; commit {commit()}, "
        f"{platform.machine()}, {os.cpu_count()} cores)",
        [
            (
                "step time, s=1 / s=0 (perf/step_seconds)",
                step[1] / step[0],
                f"{step[1]:.2f} s vs {step[0]:.2f} s; s=1 {[round(v, 1) for v in pooled(1, 'step')]}, "
                f"s=0 {[round(v, 1) for v in pooled(0, 'step')]}",
            ),
            (
                "step / (generation + update) within a run, s=1 / s=0",
                fold[1] / fold[0],
                f"{fold[1]:.2f} vs {fold[0]:.2f}",
            ),
            (
                "  generation, s=1 / s=0 (perf/gen_seconds, judge wait included)",
                gen[1] / gen[0],
                f"{gen[1]:.2f} s vs {gen[0]:.2f} s",
            ),
            (
                "  update, s=1 / s=0 (perf/update_seconds)",
                update[1] / update[0],
                f"{update[1]:.2f} s vs {update[0]:.2f} s",
            ),
            (
                "judge requests per step, s=1 / s=0",
                calls[1] / calls[0],
                f"{calls[1]:.1f} vs {calls[0]:.1f} (at s=1 a batch past the last step may count)",
            ),
        ],
        [
            f"target step / (generation + update) at s=1 < 1 (the overlap; the step-time ratio also counts a slower "
            f"producer thread and the load of the machine): {'met' if fold[1] < 1 else 'NOT met'}",
            "run folders " + " ".join(r["out"] for s in runs for r in runs[s]),
        ],
    )


if __name__ == "__main__":
    main()
