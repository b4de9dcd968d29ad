"""``mintrl-keywords``: keyword shift between two runs' evaluation samples (MInTRL Figure 5; see
:mod:`mintrl.analysis.keywords`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from mintrl.analysis.keywords import keyword_shift, read_responses, shift_table


def main(argv: Sequence[str] | None = None) -> None:
    """``mintrl-keywords A/samples.jsonl B/samples.jsonl [--first-words 512]``: the keyword-shift
    table of run B against run A (e.g. A = GRPO, B = MInTRL evaluation samples)."""
    parser = argparse.ArgumentParser(prog="mintrl-keywords", description=main.__doc__)
    parser.add_argument("samples_a")
    parser.add_argument("samples_b")
    parser.add_argument("--first-words", type=int, default=512, help="window per response (words)")
    args = parser.parse_args(argv)
    shift = keyword_shift(read_responses(args.samples_a), read_responses(args.samples_b), args.first_words)
    try:
        print(shift_table(shift, args.samples_a, args.samples_b))
    except BrokenPipeError:  # piped into head or less and closed early: not an error
        sys.stdout = open(os.devnull, "w")


if __name__ == "__main__":
    main()
