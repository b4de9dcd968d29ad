"""Two-step runs of every agent row on the embedded model: `method={grpo,mintrl_const,entropy,rail}
preset=cpu_{sql,python_tool,shell}` and `method=mintrl_proxy preset=cpu_sql`, each on 1 task per step with
short turns. Three rows have their own, longer
tests (sql_mintrl_const: test_agent_run.py, shell_mintrl_const: test_agent_run_shell.py,
python_tool_rail: test_episode_branches.py); these check what every row must do: train 2 steps from
fresh episodes, log the loss and episode statistics, write records with the row's rollout counts
(4 initial episodes per task, branches up to the allocation's 8), replay every branch to its anchor,
and leave no sandbox process behind."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from shell_helpers import sandbox_processes
from test_agent_run import SMALL as EPISODES

from mintrl.analysis.rollouts import read_records, record_files
from mintrl.analysis.tensorboard import load_scalars
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run

UID_BASE = 65400  # sandbox uids of these runs (python_tool slots, shell slots, the shell judge): no other test's
SMALL = [  # test_agent_run's tiny episodes (1 task x 4 episodes of up to 2 short turns), 2 steps
    *EPISODES,
    "trainer.max_steps=2",
    "callbacks=sweep",
    "callbacks.hf_export=null",
]
ENV = {
    "sql": [],
    "python_tool": [f"env.uid_base={UID_BASE}", "env.workers=2"],
    "shell": [f"env.uid_base={UID_BASE + 20}", "env.max_shells=8"],
}
ALLOCATION = {  # the controller goes live after 1 trace and refits every step, so 2 steps exercise it
    "rail": ["allocation.promote_after=1", "allocation.refit_every=1", "allocation.fit_steps=5"],
    "entropy": [],
}
ROWS = [
    "sql_grpo",
    "sql_mintrl_proxy",
    "sql_entropy",
    "sql_rail",
    "python_tool_grpo",
    "python_tool_mintrl_const",
    "python_tool_entropy",
    "shell_grpo",
    "shell_entropy",
    "shell_rail",
]


@pytest.mark.slow  # 1-4 min per row (62-230 s measured at nice 19 beside a training job on 2 cores; 10 rows 26 min)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("row", ROWS)
def test_every_agent_row_trains_two_steps(row, tmp_path):
    env, method = next((e, row.removeprefix(f"{e}_")) for e in ENV if row.startswith(f"{e}_"))
    overrides = [f"method={method}", f"preset=cpu_{env}", f"paths.output_dir={tmp_path}", *SMALL, *ENV[env]]
    overrides += ALLOCATION.get(method, [])
    if env == "shell" and method.startswith("mintrl"):
        overrides.append(f"judge.uid={UID_BASE + 39}")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    assert run(cfg)["steps"] == 2
    values = {tag: [v for _, v in points] for tag, points in load_scalars(tmp_path).items()}
    assert values["rollout/generated_at_step"] == [0.0, 1.0]  # each batch from the weights it trains
    for tag in ("episode/turns", "episode/env_seconds", "train/loss"):
        assert len(values[tag]) == 2, tag
    semi = 2 if method.startswith("mintrl") else 0
    files = record_files(tmp_path, "train")
    assert [step for step, _ in files] == [0, 1]
    for step, path in files:
        records = read_records(path)
        assert sum(not r["control"] for r in records) == semi
        assert all(r["reward"] in (0.0, 1.0) and 1 <= len(r["turns"]) <= 2 for r in records)
        assert all(r["tokens"]["intervention"] == 0 for r in records if r["control"])
        initial = [r for r in records if r.get("branch") is None]
        assert len(initial) == 4, step  # n_control + n_semi
        if method in ALLOCATION:  # branches within the budget of 8 episodes per task, each a control parent's
            assert len(records) <= 8 and all(records[r["branch"]["parent"]]["branch"] is None for r in records[4:])
            assert len(records) == values["allocation/rollouts_per_prompt"][step]
        else:
            assert len(records) == 4
    if method in ALLOCATION:
        assert values["allocation/replay_mismatches"] == [0.0, 0.0]
    if env in ("python_tool", "shell"):
        assert sandbox_processes(range(UID_BASE, UID_BASE + 40)) == []
