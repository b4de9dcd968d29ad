"""The agent rows: in every environment the GRPO, MInTRL-Const, RAIL and entropy methods compose on the
embedded model (`method=<m> preset=cpu_<env>`) and at paper scale (`preset=paper_<env>`), plus RAIL's uniform
GRPO-8/16/32 baselines; each composes with its own environment and data, and the paper rows run the 1.7B
model on their harder level."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config

ENVS = {  # env row prefix: (environment class, prompt source class, embedded-model data, paper-scale data)
    "sql": ("SqlEnvironment", "SqlTasks", "sql_lookup", "sql_medium"),
    "python_tool": ("PythonToolEnvironment", "PythonToolPrompts", "python_tool_arithmetic", "python_tool_gsm_symbolic"),
    "shell": ("ShellEnvironment", "ShellTasks", "shell_files", "shell_medium"),
}
METHODS = {  # method: (objective class suffix, allocation class suffix, control, semi episodes per task at paper scale)
    "grpo": ("GRPO", "UniformAllocation", 16, 0),
    "grpo8": ("GRPO", "UniformAllocation", 8, 0),
    "grpo32": ("GRPO", "UniformAllocation", 32, 0),
    "mintrl_const": ("AdvantageRegression", "UniformAllocation", 8, 8),
    "entropy": ("GRPO", "EntropyAllocation", 8, 0),
    "rail": ("GRPO", "RailAllocation", 8, 0),
}
PAPER = {  # row: (its overrides at paper scale, {env} the environment; the runs' task_name)
    "grpo": ("method=grpo preset=paper_{env} rollout.n_control=16", "grpo"),
    "grpo8": ("method=grpo preset=paper_{env} rollout.n_control=8", "grpo"),
    "grpo32": ("method=grpo preset=paper_{env} rollout.n_control=32", "grpo"),
    "mintrl_const": ("method=mintrl_const preset=paper_{env}", "mintrl_const"),
    "entropy": ("experiment=paper/agent_entropy preset=paper_{env}", "paper_agent_entropy"),
    "rail": ("experiment=paper/agent_rail preset=paper_{env}", "paper_agent_rail"),
}


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])
    return cfg


@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_paper_scale_agent_rows(env, method):
    env_class, source, _, paper_data = ENVS[env]
    objective, allocation, control, semi = METHODS[method]
    overrides, task_name = PAPER[method]
    cfg = _compose(*overrides.format(env=env).split())
    check_config(cfg)
    assert cfg.task_name == task_name and cfg.model.path == "Qwen/Qwen3-1.7B"
    assert cfg.env._target_.endswith(env_class) and cfg.data.prompts._target_.endswith(source)
    # the harder level's tasks (the preset's chat and size settings on top)
    level = _compose(f"data={paper_data}").data.prompts
    for key in ("task", "task_kwargs", "min_files", "max_files", "max_depth", "kinds", "level"):
        assert cfg.data.prompts.get(key) == level.get(key), key
    assert cfg.rollout._target_.endswith("EpisodeRollout") and cfg.trainer.max_steps == 300
    assert (cfg.rollout.n_control, cfg.rollout.n_semi) == (control, semi)
    assert cfg.objective._target_.endswith(objective) and cfg.allocation._target_.endswith(allocation)


@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("method", ["grpo", "mintrl_const", "entropy", "rail", "random_anchor"])
def test_embedded_agent_rows(env, method):
    # random anchors: RAIL's comparison of anchor choice with chance, on the embedded model only
    objective, allocation = ("GRPO", "RandomAnchorAllocation") if method == "random_anchor" else METHODS[method][:2]
    env_class, source, data, _ = ENVS[env]
    cfg = _compose(f"method={method}", f"preset=cpu_{env}")
    check_config(cfg)
    assert cfg.task_name == method and cfg.model._target_.endswith("embedded_smollm2")
    assert cfg.env._target_.endswith(env_class) and cfg.data.prompts == _compose(f"data={data}").data.prompts
    assert (cfg.rollout.n_control, cfg.rollout.n_semi) == ((2, 2) if method == "mintrl_const" else (4, 0))
    assert cfg.objective._target_.endswith(objective) and cfg.allocation._target_.endswith(allocation)


AGENT_SWEEP_ROWS = {  # experiment row: (objective, allocation class suffix, initial episodes per task, spend_all)
    "agent/grpo8_cpu": ("GRPO", "UniformAllocation", 8, False),
    "agent/entropy8_cpu": ("GRPO", "EntropyAllocation", 4, True),
    "agent/rail8_cpu": ("GRPO", "RailAllocation", 4, True),
    "agent/random8_cpu": ("GRPO", "RandomAnchorAllocation", 4, True),
}


@pytest.mark.parametrize("sweep, preset, data", [("reproduce_agents", "cpu_sql", "sql_schema"), ("reproduce_agents_shell", "cpu_shell", "shell_files")])  # fmt: skip
@pytest.mark.parametrize("row", sorted(AGENT_SWEEP_ROWS))
def test_reproduce_agents_rows_generate_exactly_8_episodes_per_task(sweep, preset, data, row):
    """What the agent sweeps run: every row composes on its level with the sweep's settings, and spends
    exactly 8 episodes per task (GRPO-8 by its group size; RAIL, entropy and random anchors by the cap of 8 per task
    with the rest given to fresh episodes)."""
    objective, allocation, initial, spend_all = AGENT_SWEEP_ROWS[row]
    cfg = _compose(f"+sweep={sweep}", f"experiment={row}", f"preset={preset}", f"data={data}", "seed=1")
    check_config(cfg)
    params = OmegaConf.load(f"{CONFIG_DIR}/sweep/{sweep}.yaml").hydra.sweeper.params
    sql = OmegaConf.load(f"{CONFIG_DIR}/sweep/reproduce_agents.yaml").hydra.sweeper.params
    assert (params.preset, params.data, row in sql.experiment.split(",")) == (preset, data, True)
    assert cfg.objective._target_.endswith(objective) and cfg.allocation._target_.endswith(allocation)
    assert (cfg.rollout.n_control, cfg.rollout.n_semi, cfg.data.prompts_per_step) == (initial, 0, 4)
    assert (cfg.trainer.max_steps, cfg.trainer.val_check_interval, cfg.validate_at_start) == (6, 6, False)
    assert (cfg.data.prompts.val_size, cfg.data.val_samples_per_prompt, cfg.rollout.temperature) == (64, 1, 0.7)
    if allocation != "UniformAllocation":
        assert cfg.allocation.budget_per_step == 8 * 4 and cfg.allocation.spend_all is spend_all
    assert cfg.callbacks.hf_export is None and cfg.callbacks.allocation_decisions.path.endswith(
        "allocation_decisions.jsonl"
    )
    if data == "sql_schema":
        assert cfg.data.prompts.show_rows is False  # the agent must query
