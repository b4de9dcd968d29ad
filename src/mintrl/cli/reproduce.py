"""``mintrl-reproduce``: the reproduction report (table with intervals, figures, commit, machine, wall time and
the paper's claims with measured verdicts) of a ``make reproduce`` multirun (see :mod:`mintrl.analysis.report`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from mintrl.analysis.report import write_report


def default_out(multirun_dirs: Sequence[str]) -> str:
    """Where the report goes without ``--out``: ``reproduction.md`` in the first multirun folder (next to the
    runs it reads, not over the committed ``docs/reproduction.md``)."""
    return str(Path(multirun_dirs[0]) / "reproduction.md")


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-reproduce <multirun_dir> [<multirun_dir> ...] [--intensity <dir> [<dir> ...]] [--out <path>]
    [--repo .]``.

    Writes the markdown report (default: :func:`default_out`) and its PNG figures next to it, then prints the path and each claim's
    verdict. Returns 0; exits with status 2 (argparse) and a message naming the folder when a multirun
    folder does not exist or holds no jobs, or two folders run the same row with the same seed."""
    parser = argparse.ArgumentParser(
        prog="mintrl-reproduce",
        description="Reproduction report of the paper's comparison (make reproduce): rows with 95%% intervals over "
        "seeds, MInTRL-Const minus GRPO paired by seed, figures, commit, machine, wall time, claims with verdicts.",
    )
    parser.add_argument(
        "multirun_dir",
        nargs="+",
        help="the +sweep=reproduce_core (or reproduce_full) multirun folder; several folders pool their jobs "
        "(seeds added by a later multirun with the same overrides)",
    )
    parser.add_argument(
        "--intensity",
        metavar="DIR",
        nargs="+",
        help="the +sweep=reproduce_intensity multirun (claim iv); several folders pool their jobs (give the "
        "methods folders before --intensity: every folder after it counts as an intensity folder)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="markdown path, figures next to it (default: <first multirun_dir>/reproduction.md; "
        "--out docs/reproduction.md replaces the committed report)",
    )
    parser.add_argument("--repo", default=".", help="git repository whose HEAD the report names (default: .)")
    args = parser.parse_args(argv)
    out = args.out if args.out is not None else default_out(args.multirun_dir)
    try:
        report = write_report(args.multirun_dir, out, args.intensity, args.repo)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    print(f"report: {report['out']}")
    for path in report["figures"].values():
        print(f"figure: {path}")
    for claim in report["claims"]:
        print(f"({claim.key}) {claim.verdict}: {claim.measure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
