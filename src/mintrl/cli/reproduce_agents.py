"""``mintrl-reproduce-agents``: the agents section of the reproduction report (RAIL against uniform GRPO-8 and
entropy branching at 8 episodes per task on agent tasks: rows with intervals, step time split, RAIL's claims R1-R4
with measured verdicts, calibration, RAIL Figure 1 at CPU scale) of a ``make reproduce-agents`` run (see
:mod:`mintrl.analysis.agent_report`)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from mintrl.analysis.agent_report import write_agents_report


def main(argv: Sequence[str] | None = None) -> int:
    """``mintrl-reproduce-agents <sql multirun dir> [<dir> ...] [--shell DIR [DIR ...]] [--out docs/reproduction.md]
    [--repo .]``.

    Puts the agents section into the markdown (between its markers, else appended; the rest of the file kept
    byte for byte) and writes the figure next to it, then prints the markdown's path, the figure's path and each
    claim's verdict. Returns 0; exits with status 2 (argparse) and a message naming the folder when a folder does
    not exist or holds no jobs, or a row runs a seed twice, or the markdown's markers are malformed."""
    parser = argparse.ArgumentParser(
        prog="mintrl-reproduce-agents",
        description="Agents section of the reproduction report (make reproduce-agents): RAIL vs uniform GRPO-8 vs "
        "entropy branching at equal budget, 95%% intervals, RAIL's claims R1-R4 with verdicts, success vs episodes.",
    )
    parser.add_argument(
        "sql_dir",
        nargs="+",
        help="the +sweep=reproduce_agents multirun folder (SQL level); several folders pool their jobs (seeds "
        "added by a later multirun with the same overrides); the claims are measured on this level",
    )
    parser.add_argument(
        "--shell",
        metavar="DIR",
        nargs="+",
        help="the +sweep=reproduce_agents_shell multirun folder(s) (shell level; give the SQL folders before "
        "--shell: every folder after it counts as a shell folder)",
    )
    parser.add_argument("--out", default="docs/reproduction.md", help="markdown path (the figure goes next to it)")
    parser.add_argument("--repo", default=".", help="git repository whose HEAD the report names (default: .)")
    args = parser.parse_args(argv)
    try:
        report = write_agents_report(args.sql_dir, args.out, args.shell, args.repo)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    print(f"report: {report['out']}")
    print(f"figure: {report['figure']}")
    for claim in report["claims"]:
        print(f"({claim.key}) {claim.verdict}: {claim.measure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
