"""``mintrl-rollouts``: print a run's rollout records with intervention tokens highlighted (see
:mod:`mintrl.analysis.rollouts`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from mintrl.analysis.rollouts import format_run, format_stats


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-rollouts RUN [--step N] [--split train|val] [--intervened] [--reward VALUE] [--color WHEN] [--stats]``.

    Prints the records; exits with status 2 and a message naming the folder when there are none."""
    parser = argparse.ArgumentParser(
        prog="mintrl-rollouts",
        description="Print the rollout records of a run: responses with intervention tokens highlighted, "
        "the judge's verdicts, rewards and advantages.",
    )
    parser.add_argument("run", help="a run folder (outputs/train/runs/<date>) or its rollouts/ folder")
    parser.add_argument("--step", type=int, help="only this optimizer step (default: every step)")
    parser.add_argument("--split", choices=("train", "val"), default="train", help="default: train")
    parser.add_argument("--intervened", action="store_true", help="only rollouts with intervention tokens")
    parser.add_argument("--reward", type=float, metavar="VALUE", help="only rollouts with this reward (e.g. 0 or 1)")
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="ANSI colour for intervention tokens (auto: when stdout is a terminal; else [[...]])",
    )
    parser.add_argument(
        "--stats",
        action="store_true",
        help="instead of the records: a table per step of what the judge and intervention did (revisions, cuts at "
        "token 0, intervention token shares, rewards)",
    )
    args = parser.parse_args(argv)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    try:
        if args.stats:
            text = format_stats(args.run, args.split, args.step)
        else:
            text = format_run(args.run, args.split, args.step, args.intervened, args.reward, color)
    except FileNotFoundError as e:
        parser.error(str(e))
    try:
        print(text)
    except BrokenPipeError:  # piped into head or less and closed early: not an error
        sys.stdout = open(os.devnull, "w")
    return 0


if __name__ == "__main__":
    sys.exit(main())
