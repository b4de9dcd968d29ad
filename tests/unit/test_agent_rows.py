"""The agent experiment grid (issue 21): every environment has the GRPO, MInTRL-Const, RAIL and entropy
rows on the embedded model and at paper scale, plus RAIL's uniform GRPO-8/16/32 baselines; each composes
with its own environment and data, and the paper rows run the 1.7B model on their harder level."""

import pytest
from hydra import compose, initialize_config_dir

from mintrl.training.checks import check_config
from mintrl.training.config import CONFIG_DIR

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


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])
    return cfg


@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_paper_scale_agent_rows(env, method):
    env_class, source, _, paper_data = ENVS[env]
    objective, allocation, control, semi = METHODS[method]
    cfg = _compose(f"experiment=agent/{env}_{method}")
    check_config(cfg)
    assert cfg.task_name == f"agent_{env}_{method}" and cfg.model.path == "Qwen/Qwen3-1.7B"
    assert cfg.env._target_.endswith(env_class) and cfg.data.prompts._target_.endswith(source)
    # the harder level's tasks (the preset's chat and size settings on top)
    level = _compose(f"data={paper_data}").data.prompts
    for key in ("task", "task_kwargs", "min_files", "max_files", "max_depth", "kinds", "level"):
        assert cfg.data.prompts.get(key) == level.get(key), key
    assert cfg.rollout._target_.endswith("EpisodeRollout") and cfg.trainer.max_steps == 300
    assert (cfg.rollout.n_control, cfg.rollout.n_semi) == (control, semi)
    assert cfg.objective._target_.endswith(objective) and cfg.allocation._target_.endswith(allocation)


@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("method", ["grpo", "mintrl_const", "entropy", "rail"])
def test_embedded_agent_rows(env, method):
    objective, allocation, _, _ = METHODS[method]
    env_class, source, data, _ = ENVS[env]
    cfg = _compose(f"experiment=agent/{env}_{method}_cpu")
    check_config(cfg)
    assert cfg.task_name == f"agent_{env}_{method}_cpu" and cfg.model._target_.endswith("embedded_smollm2")
    assert cfg.env._target_.endswith(env_class) and cfg.data.prompts == _compose(f"data={data}").data.prompts
    assert (cfg.rollout.n_control, cfg.rollout.n_semi) == ((2, 2) if method == "mintrl_const" else (4, 0))
    assert cfg.objective._target_.endswith(objective) and cfg.allocation._target_.endswith(allocation)
