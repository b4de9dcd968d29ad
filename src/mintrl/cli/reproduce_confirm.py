"""``mintrl-reproduce-confirm``: the confirmation section of the reproduction report, the claims measured at seeds
fixed in advance in ``configs/sweep/confirm_core.yaml`` and ``confirm_agents_db.yaml`` (plan, finished and missing
jobs, commit, tables, verdicts or ``pending: k of N jobs finished``; see :mod:`mintrl.analysis.confirm` and
:mod:`mintrl.analysis.confirm_report`)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from mintrl.analysis.confirm_report import write_confirmation


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-reproduce-confirm [--core DIR ...] [--agents DIR ...] [--out docs/reproduction.md]
    [--core-sweep PATH] [--agents-sweep PATH]``.

    Puts the confirmation section into the markdown (between its markers, else appended; the rest of the file kept
    byte for byte), then prints the markdown's path and, per sweep, the jobs finished and each claim's verdict (or
    why there is none yet). Returns 0; exits with status 2 (argparse) and a message naming the path when a sweep
    file or a folder does not exist, a folder holds no jobs, a planned job is run twice, or the markdown's markers
    are malformed."""
    parser = argparse.ArgumentParser(
        prog="mintrl-reproduce-confirm",
        description="Confirmation section of the reproduction report (make confirm-report): the claims at seeds "
        "fixed in the confirmation sweep files, verdicts only once every planned job finished at one commit.",
    )
    parser.add_argument(
        "--core",
        metavar="DIR",
        nargs="*",
        default=[],
        help="folders of +sweep=confirm_core jobs (results/confirm_core/<row>_s<seed>_<commit>/); a job without "
        "summary.json is unfinished and not counted",
    )
    parser.add_argument(
        "--agents",
        metavar="DIR",
        nargs="*",
        default=[],
        help="folders of +sweep=confirm_agents_db jobs (results/confirm_agents_db/<row>_s<seed>_<commit>/)",
    )
    parser.add_argument("--out", default="docs/reproduction.md", help="markdown path (default: docs/reproduction.md)")
    parser.add_argument(
        "--core-sweep", default=None, help="the core plan's sweep file (default: configs/sweep/confirm_core.yaml)"
    )
    parser.add_argument(
        "--agents-sweep",
        default=None,
        help="the agents plan's sweep file (default: configs/sweep/confirm_agents_db.yaml)",
    )
    args = parser.parse_args(argv)
    try:
        written = write_confirmation(args.core, args.agents, args.out, args.core_sweep, args.agents_sweep)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    print(f"report: {written['out']}")
    for c in written["confirmations"]:
        done, planned = len(c.status.finished), len(c.status.plan.pairs)
        print(f"{c.sweep}: {done} of {planned} planned jobs finished, {len(c.status.outside)} not in the plan")
        for claim in c.claims:
            print(f"  ({claim.key}) {c.blocked if c.blocked is not None else claim.verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
