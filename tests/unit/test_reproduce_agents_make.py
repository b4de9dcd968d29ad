"""`make reproduce-agents`, its smoke target and its report target run the agent sweeps, then
`mintrl-reproduce-agents` (dry runs of the Makefile)."""

from __future__ import annotations

from make_helpers import run_make


def dry(target: str, *extra: str) -> str:
    return run_make(target, "REPRO_DIR=/tmp/r", *extra, dry=True).stdout


def test_reproduce_agents_runs_both_levels_then_the_report():
    out = dry("reproduce-agents")
    sql, shell, report = out.strip().splitlines()
    assert "-m +sweep=reproduce_agents hydra.sweep.dir=/tmp/r/agents_sql" in sql
    assert "-m +sweep=reproduce_agents_shell hydra.sweep.dir=/tmp/r/agents_shell" in shell
    assert report.endswith(
        "mintrl.cli.reproduce_agents /tmp/r/agents_sql --shell /tmp/r/agents_shell --out docs/reproduction.md"
    )


def test_the_smoke_target_is_one_short_step_of_one_seed_and_writes_into_its_folder():
    out = dry("reproduce-agents-smoke")
    assert out.count("trainer.max_steps=1 ") == 2 and out.count("seed=0 ") == 2
    assert "--out /tmp/r/agents_smoke/reproduction.md" in out


def test_the_report_target_reads_the_committed_folders_and_trains_nothing():
    out = dry("reproduce-agents-report", "AGENT_RESULTS=a/ b/", "AGENT_SHELL_RESULTS=c/")
    assert "mintrl.cli.reproduce_agents a/ b/ --shell c/ --out docs/reproduction.md" in out
    assert "mintrl.cli.train" not in out
