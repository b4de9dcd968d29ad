"""``mintrl-reproduce-staleness``: the staleness section of the reproduction report, MInTRL-Const, GRPO and GRPO-TIS
trained on rollouts 0-2 optimizer steps old at seeds fixed in ``configs/sweep/staleness.yaml`` (plan, finished
and missing jobs, commit, per row final held-out pass@1 and off-policy measures, the cost of staleness paired by
seed; interim until every planned job finished at one commit; see :mod:`mintrl.analysis.staleness_study` and
:mod:`mintrl.analysis.staleness_report`)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from mintrl.analysis.staleness_report import write_staleness


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-reproduce-staleness [--runs DIR ...] [--out docs/reproduction.md] [--sweep PATH]``.

    Puts the staleness section into the markdown (between its markers, else appended; the rest of the file kept
    byte for byte), then prints the markdown's path, the jobs finished and whether the numbers are final. Returns
    0; exits with status 2 (argparse) and a message naming the path when the sweep file or a folder does not
    exist, a folder holds no jobs, a planned job is run twice, or the markdown's markers are malformed."""
    parser = argparse.ArgumentParser(
        prog="mintrl-reproduce-staleness",
        description="Staleness section of the reproduction report (make staleness-report): rows trained on stale "
        "rollouts at seeds fixed in configs/sweep/staleness.yaml, final only once every planned job finished at "
        "one commit.",
    )
    parser.add_argument(
        "--runs",
        metavar="DIR",
        nargs="*",
        default=[],
        help="folders of +sweep=staleness jobs (results/staleness/<method>_st<s>_s<seed>_<commit>/); a job without "
        "summary.json is unfinished and not counted",
    )
    parser.add_argument("--out", default="docs/reproduction.md", help="markdown path (default: docs/reproduction.md)")
    parser.add_argument("--sweep", default=None, help="the plan's sweep file (default: configs/sweep/staleness.yaml)")
    args = parser.parse_args(argv)
    try:
        written = write_staleness(args.runs, args.out, args.sweep)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    study = written["study"]
    print(f"report: {written['out']}")
    print(
        f"staleness: {len(study.status.finished)} of {len(study.status.plan.pairs)} planned jobs finished, "
        f"{len(study.status.outside)} not in the plan; numbers {study.blocked or 'final'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
