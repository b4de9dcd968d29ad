"""``mintrl-rollouts``: print a run's rollout records with intervention tokens highlighted (see
:mod:`mintrl.analysis.rollouts`), or write them as one HTML page (``--html``:
:mod:`mintrl.analysis.rollouts_html`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from mintrl.analysis.rollouts import format_run, format_stats
from mintrl.analysis.rollouts_html import write_rollouts_page


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-rollouts RUN [--step N] [--split train|val] [--intervened] [--reward VALUE] [--color WHEN] [--stats]
    [--html OUT]``.

    Prints the records (with ``--html``: writes the page and prints its path and size in bytes);
    exits with status 2 and a message naming the folder when there are none, or when ``--html``
    comes with ``--stats`` or a ``--reward`` other than 0 or 1."""
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
    parser.add_argument(
        "--html",
        metavar="OUT",
        help="instead of printing: write one self-contained HTML page of every step of both splits to OUT "
        "(--split, --step, --intervened and --reward 0|1 set the view it opens on)",
    )
    args = parser.parse_args(argv)
    if args.html is not None:
        return _write_html(parser, args)
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


def _write_html(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--html OUT``: write the page, print ``wrote OUT (N bytes)``; argument errors via ``parser.error``."""
    if args.stats:
        parser.error("--html writes the --stats tables into the page: give one of --html and --stats")
    reward = "any"
    if args.reward is not None:
        if args.reward not in (0.0, 1.0):
            parser.error(
                f"--html filters rewards by = 1, < 1, = 0 or missing: --reward {args.reward:g} is none of them"
            )
        reward = str(int(args.reward))
    try:
        out = write_rollouts_page(
            args.run, args.html, split=args.split, step=args.step, intervened=args.intervened, reward=reward
        )
    except FileNotFoundError as e:
        parser.error(str(e))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
