"""``mintrl-summary``: the table, the seed intervals, the held-out curves and MInTRL Figure 6 of a Hydra
multirun (see :mod:`mintrl.analysis.summary`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from mintrl.analysis.measures import final_pass_at_1
from mintrl.analysis.plots import plot_curves, plot_intensity
from mintrl.analysis.runs import is_no_intervention, read_job, read_multirun
from mintrl.analysis.summary import summarize, summarize_seeds
from mintrl.analysis.tables import fmt, markdown_table, seed_table


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-summary <multirun_dir> [--figure out.png] [--curves out.png] [--json out.json]
    [--seeds-json out.json] [--baseline run_dir]``.

    Prints the per-job markdown table, then the per-setting table over seeds (mean and 95% interval
    of the final held-out pass@1 and of the area under the held-out curve, one run's binomial SE,
    and how the intervals are computed). Returns 0; exits with status 2 (argparse) and a message
    naming the folder when it does not exist or holds no jobs."""
    parser = argparse.ArgumentParser(
        prog="mintrl-summary",
        description="Table, seed intervals, held-out curves and MInTRL Figure 6 (delta pass@1 vs off-policy token "
        "fraction) of a Hydra multirun.",
    )
    parser.add_argument("multirun_dir", help="outputs/<task>/multiruns/<date>: one sub-folder per job")
    parser.add_argument("--figure", metavar="PNG", help="write the Figure 6 scatter plot here")
    parser.add_argument(
        "--curves", metavar="PNG", help="write the held-out curves (mean over seeds, 95%% interval bands) here"
    )
    parser.add_argument("--json", metavar="JSON", help="write the per-job table rows here")
    parser.add_argument("--seeds-json", metavar="JSON", help="write the per-setting rows over seeds here")
    parser.add_argument(
        "--baseline",
        metavar="RUN_DIR",
        help="no-intervention run to compare with (default: the multirun's judge=always_keep / n_semi=0 job)",
    )
    args = parser.parse_args(argv)
    try:
        jobs = read_multirun(args.multirun_dir)
    except FileNotFoundError as e:
        parser.error(str(e))
    baseline = None
    if args.baseline:
        baseline = read_job(args.baseline)
        if baseline.scalars is None:
            parser.error(f"no TensorBoard event files under the baseline {args.baseline}")
        print(f"baseline: {args.baseline} (final val pass@1 {fmt(final_pass_at_1(baseline.scalars))})")
        if not is_no_intervention(baseline.overrides, baseline.config):
            print("note: the baseline does not look like a no-intervention run (judge=always_keep, rollout.n_semi=0)")
        print()
    rows = summarize(jobs, baseline)
    print(markdown_table(rows))
    if not any(r["delta_pass_at_1"] is not None for r in rows):
        print(
            "\nno no-intervention run with a val pass@1: pass --baseline, or add one with "
            f"`mintrl-train method=no_intervention hydra.run.dir={args.multirun_dir}/baseline`"
        )
    seed_rows = summarize_seeds(jobs)
    print("\nover seeds (jobs equal apart from seed=...):\n")
    print(seed_table(seed_rows))
    if args.figure:
        import matplotlib.pyplot as plt

        plt.close(plot_intensity(rows, args.figure, title=f"Off-policy intensity: {Path(args.multirun_dir).name}"))
        print(f"\nfigure: {args.figure}")
    if args.curves:
        import matplotlib.pyplot as plt

        plt.close(plot_curves(seed_rows, args.curves, title=f"Held-out pass@1: {Path(args.multirun_dir).name}"))
        print(f"curves: {args.curves}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=2))
        print(f"rows: {args.json}")
    if args.seeds_json:
        Path(args.seeds_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.seeds_json).write_text(json.dumps(seed_rows, indent=2))
        print(f"rows over seeds: {args.seeds_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
