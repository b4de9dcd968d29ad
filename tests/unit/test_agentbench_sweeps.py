"""The AgentBench sweeps compose to RAIL's four rows on AgentBench's own files: the file paths come from
AGENTBENCH_DIR, the OS rows run on a writable root (environment, judge and load-time runs), and every row
keeps the SQL sweep's equal budget (8 episodes per task, 6 steps of 4 tasks)."""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs")
ROWS = ("agent/grpo8_cpu", "agent/entropy8_cpu", "agent/rail8_cpu", "agent/random8_cpu")


@pytest.mark.parametrize(
    ("sweep", "preset", "data", "path", "env"),
    [
        ("reproduce_agents_agentbench_db", "cpu_sql", "agentbench_db", "data/dbbench/standard.jsonl", "sql"),
        ("reproduce_agents_agentbench_os", "cpu_agentbench_os", "agentbench_os", "data/os_interaction/data/7/bootstrap.json", "shell"),
    ],
)  # fmt: skip
def test_each_row_of_an_agentbench_sweep_composes_on_the_named_checkout(monkeypatch, sweep, preset, data, path, env):
    monkeypatch.setenv("AGENTBENCH_DIR", "/checkout")
    for row in ROWS:
        with initialize_config_dir(config_dir=os.path.abspath(CONFIGS), version_base=None):
            cfg = compose(
                "train", overrides=[f"+sweep={sweep}", f"preset={preset}", f"data={data}", f"experiment={row}"]
            )
        assert cfg.data.prompts.path == f"/checkout/{path}"
        assert cfg.env._target_ == f"mintrl.env.{env}.environment.{env.capitalize()}Environment"
        assert (cfg.trainer.max_steps, cfg.data.prompts_per_step, cfg.task_name) == (6, 4, sweep)
        if env == "shell":
            assert cfg.data.prompts.scripts_dir == "/checkout/data/os_interaction/scripts/7"
            assert (cfg.env.writable_root, cfg.data.prompts.writable_root) == (True, True)
            judge = cfg.judge._target_.rsplit(".", 1)[1]
            assert judge == "AlwaysKeepJudge" or (judge, cfg.judge.writable_root) == ("ShellJudge", True), row


def test_a_method_with_a_judge_gets_the_shell_judge_on_a_writable_root():
    with initialize_config_dir(config_dir=os.path.abspath(CONFIGS), version_base=None):
        cfg = compose(
            "train", overrides=["preset=cpu_agentbench_os", "data.prompts.path=/x.json", "method=mintrl_const"]
        )
    assert (cfg.judge._target_, cfg.judge.writable_root, cfg.env.writable_root) == (
        "mintrl.judge.shell.ShellJudge",
        True,
        True,
    )
