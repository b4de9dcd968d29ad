"""The method axis: a row is `method=<name>` (configs/method: objective, judge, intervention, allocation,
guide and their knobs) + a task / scale preset (`preset=<name>`, configs/preset) + at most a few overrides;
configs/experiment keeps only named rows that need more (the paper-scale rows with their papers' values,
configs/experiment/paper/; the reproduction's rows are methods).

ROWS maps each of the 84 former experiment files to its new spelling and records what that spelling
composes to. Before the old files were deleted, a test composed each of them next to its new spelling
(`experiment=<old>` against the spelling, all 84 passed): the two configs were equal key by key, the
`hydra` node and `task_name` aside (method rows name their runs after the method), an interpolation and a
literal counting as equal when they resolve to the same value (code/mentor_cpu's alpha_decay_steps: 12 and
${trainer.max_steps} = 12), apart from DIFFERENCES. The README test composes every row the README's
tables name."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import NamedTuple

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(REPO / "configs")


class Row(NamedTuple):
    """A former experiment's new spelling and, of the config it composes to, the classes (by name, so that
    a module move keeps the record) of its components and its group sizes."""

    spelling: str  # overrides, space-separated
    objective: str
    judge: str
    intervention: str
    allocation: str
    env: str | None
    rollout: str
    n_control: int  # control (on-policy) rollouts per prompt
    n_semi: int  # semi-on-policy rollouts per prompt


# fmt: off
ROWS = {
    # math, embedded model (no preset: one-digit addition)
    "math/base_eval_cpu": Row("method=base_eval", "AdvantageRegression", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "math/bread_cpu": Row("method=bread", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/first_error_cpu": Row("method=first_error", "FirstErrorCredit", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/grpo_cpu": Row("method=grpo", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/grpo_lora_cpu": Row("method=grpo preset=cpu_lora", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/int_cpu": Row("method=int", "GRPO", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/intervention_grpo_cpu": Row("method=intervention_grpo", "InterventionGRPO", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "math/luffy_cpu": Row("method=luffy", "LUFFY", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/mentor_cpu": Row("method=mentor", "InterventionGRPO", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "math/mintrl_const_cpu": Row("method=mintrl_const", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "math/mintrl_const_lora_cpu": Row("method=mintrl_const preset=cpu_lora", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "math/mintrl_proxy_cpu": Row("method=mintrl_proxy", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "math/opd_cpu": Row("method=opd", "OnPolicyDistillation", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/prefix_rft_cpu": Row("method=prefix_rft", "LUFFY", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "math/sft_grpo_cpu": Row("method=sft_grpo", "GRPO", "AlwaysKeepJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    # math, paper scale
    "math/base_eval": Row("method=base_eval preset=paper_math", "AdvantageRegression", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "math/bread": Row("experiment=paper/bread", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "math/first_error": Row("experiment=paper/first_error", "FirstErrorCredit", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "math/grpo": Row("experiment=paper/grpo", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "math/grpo_lora": Row("experiment=paper/grpo preset=paper_math_lora_1gpu", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "math/int": Row("experiment=paper/int", "GRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "math/intervention_grpo": Row("method=intervention_grpo preset=paper_math", "InterventionGRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "math/luffy": Row("experiment=paper/luffy", "LUFFY", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 7, 0),
    "math/mentor": Row("method=mentor preset=paper_math objective.alpha_decay_steps=120", "InterventionGRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "math/mintrl_const": Row("experiment=paper/mintrl_const", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "math/mintrl_const_lora": Row("experiment=paper/mintrl_const preset=paper_math_lora_1gpu", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "math/mintrl_proxy": Row("experiment=paper/mintrl_proxy", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "math/opd": Row("experiment=paper/opd", "OnPolicyDistillation", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "math/prefix_rft": Row("experiment=paper/prefix_rft", "LUFFY", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 7, 0),
    "math/sft_grpo": Row("experiment=paper/sft_grpo", "GRPO", "AlwaysKeepJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    # code, embedded model (preset=cpu_code)
    "code/base_eval_cpu": Row("method=base_eval preset=cpu_code", "AdvantageRegression", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "code/grpo_cpu": Row("method=grpo preset=cpu_code", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "code/intervention_grpo_cpu": Row("method=intervention_grpo preset=cpu_code", "InterventionGRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "code/mentor_cpu": Row("method=mentor preset=cpu_code", "InterventionGRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "code/mintrl_const_cpu": Row("method=mintrl_const preset=cpu_code", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "code/mintrl_proxy_cpu": Row("method=mintrl_proxy preset=cpu_code", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "code/opd_cpu": Row("experiment=code/opd_cpu", "OnPolicyDistillation", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    "code/sft_grpo_cpu": Row("method=sft_grpo preset=cpu_code", "GRPO", "AlwaysKeepJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 4, 0),
    # code, paper scale
    "code/base_eval": Row("method=base_eval preset=paper_code", "AdvantageRegression", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "code/grpo": Row("experiment=paper/grpo preset=paper_code", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "code/intervention_grpo": Row("method=intervention_grpo preset=paper_code", "InterventionGRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "code/mentor": Row("method=mentor preset=paper_code objective.alpha_decay_steps=120", "InterventionGRPO", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "code/mintrl_const": Row("experiment=paper/mintrl_const_code", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "code/mintrl_proxy": Row("experiment=paper/mintrl_proxy preset=paper_code", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 8, 8),
    "code/opd": Row("experiment=paper/opd preset=paper_code", "OnPolicyDistillation", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    "code/sft_grpo": Row("experiment=paper/sft_grpo preset=paper_code", "GRPO", "AlwaysKeepJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 16, 0),
    # agents, embedded model (preset=cpu_<env>)
    "agent/sql_mintrl_const_cpu": Row("method=mintrl_const preset=cpu_sql", "AdvantageRegression", "SqlJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 2, 2),
    "agent/sql_grpo_cpu": Row("method=grpo preset=cpu_sql", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 4, 0),
    "agent/sql_rail_cpu": Row("method=rail preset=cpu_sql", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "RailAllocation", "SqlEnvironment", "EpisodeRollout", 4, 0),
    "agent/sql_entropy_cpu": Row("method=entropy preset=cpu_sql", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "EntropyAllocation", "SqlEnvironment", "EpisodeRollout", 4, 0),
    "agent/shell_mintrl_const_cpu": Row("method=mintrl_const preset=cpu_shell", "AdvantageRegression", "ShellJudge", "RuleIntervention", "UniformAllocation", "ShellEnvironment", "EpisodeRollout", 2, 2),
    "agent/shell_grpo_cpu": Row("method=grpo preset=cpu_shell", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "ShellEnvironment", "EpisodeRollout", 4, 0),
    "agent/shell_rail_cpu": Row("method=rail preset=cpu_shell", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "RailAllocation", "ShellEnvironment", "EpisodeRollout", 4, 0),
    "agent/shell_entropy_cpu": Row("method=entropy preset=cpu_shell", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "EntropyAllocation", "ShellEnvironment", "EpisodeRollout", 4, 0),
    "agent/python_tool_mintrl_const_cpu": Row("method=mintrl_const preset=cpu_python_tool", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", "PythonToolEnvironment", "EpisodeRollout", 2, 2),
    "agent/python_tool_grpo_cpu": Row("method=grpo preset=cpu_python_tool", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "PythonToolEnvironment", "EpisodeRollout", 4, 0),
    "agent/python_tool_rail_cpu": Row("method=rail preset=cpu_python_tool", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "RailAllocation", "PythonToolEnvironment", "EpisodeRollout", 4, 0),
    "agent/python_tool_entropy_cpu": Row("method=entropy preset=cpu_python_tool", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "EntropyAllocation", "PythonToolEnvironment", "EpisodeRollout", 4, 0),
    "agent/sql_mintrl_proxy_cpu": Row("method=mintrl_proxy preset=cpu_sql", "AdvantageRegression", "SqlJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 2, 2),
    # agents, paper scale (preset=paper_<env>)
    "agent/sql_mintrl_const": Row("method=mintrl_const preset=paper_sql", "AdvantageRegression", "SqlJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 8, 8),
    "agent/sql_grpo": Row("method=grpo preset=paper_sql rollout.n_control=16", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 16, 0),
    "agent/sql_grpo8": Row("method=grpo preset=paper_sql rollout.n_control=8", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 8, 0),
    "agent/sql_grpo32": Row("method=grpo preset=paper_sql rollout.n_control=32", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 32, 0),
    "agent/sql_rail": Row("experiment=paper/agent_rail preset=paper_sql", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "RailAllocation", "SqlEnvironment", "EpisodeRollout", 8, 0),
    "agent/sql_entropy": Row("experiment=paper/agent_entropy preset=paper_sql", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "EntropyAllocation", "SqlEnvironment", "EpisodeRollout", 8, 0),
    "agent/shell_mintrl_const": Row("method=mintrl_const preset=paper_shell", "AdvantageRegression", "ShellJudge", "RuleIntervention", "UniformAllocation", "ShellEnvironment", "EpisodeRollout", 8, 8),
    "agent/shell_grpo": Row("method=grpo preset=paper_shell rollout.n_control=16", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "ShellEnvironment", "EpisodeRollout", 16, 0),
    "agent/shell_grpo8": Row("method=grpo preset=paper_shell rollout.n_control=8", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "ShellEnvironment", "EpisodeRollout", 8, 0),
    "agent/shell_grpo32": Row("method=grpo preset=paper_shell rollout.n_control=32", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "ShellEnvironment", "EpisodeRollout", 32, 0),
    "agent/shell_rail": Row("experiment=paper/agent_rail preset=paper_shell", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "RailAllocation", "ShellEnvironment", "EpisodeRollout", 8, 0),
    "agent/shell_entropy": Row("experiment=paper/agent_entropy preset=paper_shell", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "EntropyAllocation", "ShellEnvironment", "EpisodeRollout", 8, 0),
    "agent/python_tool_mintrl_const": Row("method=mintrl_const preset=paper_python_tool", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", "PythonToolEnvironment", "EpisodeRollout", 8, 8),
    "agent/python_tool_grpo": Row("method=grpo preset=paper_python_tool rollout.n_control=16", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "PythonToolEnvironment", "EpisodeRollout", 16, 0),
    "agent/python_tool_grpo8": Row("method=grpo preset=paper_python_tool rollout.n_control=8", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "PythonToolEnvironment", "EpisodeRollout", 8, 0),
    "agent/python_tool_grpo32": Row("method=grpo preset=paper_python_tool rollout.n_control=32", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", "PythonToolEnvironment", "EpisodeRollout", 32, 0),
    "agent/python_tool_rail": Row("experiment=paper/agent_rail preset=paper_python_tool", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "RailAllocation", "PythonToolEnvironment", "EpisodeRollout", 8, 0),
    "agent/python_tool_entropy": Row("experiment=paper/agent_entropy preset=paper_python_tool", "GRPO", "AlwaysKeepJudge", "RuleIntervention", "EntropyAllocation", "PythonToolEnvironment", "EpisodeRollout", 8, 0),
    "agent/sql_mintrl_proxy": Row("method=mintrl_proxy preset=paper_sql", "AdvantageRegression", "SqlJudge", "RuleIntervention", "UniformAllocation", "SqlEnvironment", "EpisodeRollout", 8, 8),
    # single-purpose rows
    "no_intervention": Row("method=no_intervention", "AdvantageRegression", "AlwaysKeepJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "rule_last_number": Row("judge.check_last_number=true", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "self_privileged": Row("judge=self_privileged intervention=self_privileged", "AdvantageRegression", "SelfPrivilegedJudge", "SelfPrivilegedIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "adaptive_stop": Row("experiment=adaptive_stop", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "api_judge": Row("experiment=api_judge", "AdvantageRegression", "ApiJudge", "ApiIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
    "mintrl_const_long": Row("experiment=mintrl_const_long", "AdvantageRegression", "RuleJudge", "RuleIntervention", "UniformAllocation", None, "SingleTurnRollout", 2, 2),
}
# fmt: on

# Rows whose new spelling composes to something other than the old file did, on purpose (config subtree:
# why). Every other key of every row was equal.
DIFFERENCES = {
    row: {"intervention": "self_privileged -> rule: judge=always_keep never calls the intervention, and the rule "
          "intervention loads no frozen policy copy"}
    for row in ("code/base_eval_cpu", "code/grpo_cpu", "code/opd_cpu")
}  # fmt: skip

# What configs/experiment holds now: the rows that need more than method + preset + a few overrides.
EXPERIMENTS = {
    "adaptive_stop", "api_judge", "mintrl_const_long", "code/opd_cpu",
    "paper/agent_entropy", "paper/agent_rail", "paper/bread", "paper/first_error", "paper/grpo", "paper/int",
    "paper/luffy", "paper/mintrl_const", "paper/mintrl_const_code", "paper/mintrl_proxy", "paper/opd",
    "paper/prefix_rft", "paper/sft_grpo",
    "agent/grpo8_cpu", "agent/entropy8_cpu", "agent/rail8_cpu", "agent/random8_cpu",  # reproduce_agents*.yaml's rows
}  # fmt: skip
METHODS = sorted(p.stem for p in (REPO / "configs" / "method").glob("*.yaml"))
PRESETS = sorted(p.stem for p in (REPO / "configs" / "preset").glob("*.yaml"))
# methods that choose judge=always_keep (no judge reviews a chunk, whatever the preset's judge)
NO_JUDGE = {"base_eval", "bread", "entropy", "grpo", "luffy", "no_intervention", "opd", "prefix_rft", "rail", "random_anchor", "sft_grpo"}  # fmt: skip


def _compose(overrides: list[str], hydra_config: bool = False):
    """The composed train config (read-only: one composition serves every test that names the same
    overrides)."""
    return _composed(tuple(overrides), hydra_config)


@functools.cache
def _composed(overrides: tuple[str, ...], hydra_config: bool):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=hydra_config)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def _container(cfg) -> dict:
    out = OmegaConf.to_container(cfg, resolve=False)
    out.pop("hydra", None)
    return out


@functools.cache
def _preset_group_sizes(preset: str) -> tuple[int, int]:
    """(n_control, n_semi) of train.yaml's defaults with the preset appended (no method)."""
    rollout = _compose([f"+preset={preset}"]).rollout
    return rollout.n_control, rollout.n_semi


def _cls(node) -> str | None:
    target = node.get("_target_") if node is not None else None
    return None if target is None else target.rsplit(".", 1)[-1]


@pytest.mark.parametrize("old", sorted(ROWS))
def test_every_former_row_composes_to_what_it_was(old):
    row = ROWS[old]
    cfg = _compose(row.spelling.split())
    got = (
        _cls(cfg.objective), _cls(cfg.judge), _cls(cfg.intervention), _cls(cfg.allocation), _cls(cfg.get("env")),
        _cls(cfg.rollout), cfg.rollout.n_control, cfg.rollout.n_semi,
    )  # fmt: skip
    assert got == tuple(row[1:]), (old, row.spelling)


@pytest.mark.parametrize("old", sorted(DIFFERENCES))
def test_the_deliberate_differences(old):
    """The old code rows took cpu_code's self-privileged intervention; their methods (judge=always_keep) choose the
    rule intervention, which is never called."""
    assert _cls(_compose(["+preset=cpu_code"]).intervention) == "SelfPrivilegedIntervention"
    assert (ROWS[old].judge, ROWS[old].intervention) == ("AlwaysKeepJudge", "RuleIntervention")
    assert "preset=cpu_code" in ROWS[old].spelling or ROWS[old].spelling == "experiment=code/opd_cpu"


def test_experiment_folder_holds_only_the_named_rows():
    folder = REPO / "configs" / "experiment"
    assert {str(p.relative_to(folder))[:-5] for p in folder.rglob("*.yaml")} == EXPERIMENTS
    assert len(EXPERIMENTS) == 21 and len(ROWS) == 84
    first = [r.spelling.split()[0] for r in ROWS.values()]
    spelled_as_experiment = {o[len("experiment=") :] for o in first if o.startswith("experiment=")}
    assert spelled_as_experiment <= EXPERIMENTS  # every experiment a new spelling names exists


def test_the_reproduction_sweeps_name_methods():
    """configs/sweep/reproduce_*.yaml run `method=<row>` (the one-line experiment aliases math/<method>_cpu
    went after a test composed each next to its method, with and without these sweeps, and found them equal,
    task_name aside); mintrl-reproduce names the rows from the composed config."""
    for sweep in ("reproduce_core", "reproduce_full", "reproduce_intensity"):
        params = _compose([f"+sweep={sweep}"], hydra_config=True).hydra.sweeper.params
        assert "experiment" not in params and set(params.method.split(",")) <= set(METHODS), sweep


def test_the_code_opd_row_is_opd_with_the_code_note():
    row, method = (
        _container(_compose(["experiment=code/opd_cpu"])),
        _container(_compose(["method=opd", "preset=cpu_code"])),
    )
    assert "```python\n{reference}```" in row["objective"].pop("privileged_note")
    assert "{reference}" in method["objective"].pop("privileged_note")
    assert (row.pop("task_name"), method.pop("task_name")) == ("code_opd_cpu", "opd")
    assert row == method


@pytest.mark.parametrize("method", METHODS)
def test_every_method_composes_alone_and_opens_with_what_runs(method):
    alone = _compose([f"method={method}"])
    assert alone.task_name == method and alone.objective._target_
    text = (REPO / "configs" / "method" / f"{method}.yaml").read_text()
    assert text.startswith("# @package _global_\n# "), "a method file opens with what runs"


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_under_a_method(preset):
    cfg = _compose(["method=mintrl_const", f"preset={preset}"])
    assert _cls(cfg.objective) == "AdvantageRegression" and cfg.rollout.n_semi > 0, preset


@pytest.mark.slow  # every method x every preset: ~190 compositions, ~45 s on 2 cores (make test-slow)
@pytest.mark.parametrize("method", METHODS)
def test_every_method_composes_on_every_preset_and_keeps_its_choices(method):
    alone = _compose([f"method={method}"])
    for preset in PRESETS:
        cfg = _compose([f"method={method}", f"preset={preset}"])
        # the method's choices win over the preset's: the objective always, judge=always_keep where it says so
        assert cfg.objective._target_ == alone.objective._target_, preset
        assert cfg.guide._target_ == alone.guide._target_ and cfg.allocation._target_ == alone.allocation._target_
        if method in NO_JUDGE:
            assert _cls(cfg.judge) == "AlwaysKeepJudge", preset
        # group sizes: a method without semi-on-policy rollouts fixes them; the others take the preset's
        sizes = (alone.rollout.n_control, 0) if alone.rollout.n_semi == 0 else _preset_group_sizes(preset)
        assert (cfg.rollout.n_control, cfg.rollout.n_semi) == sizes, preset


def test_a_preset_without_a_method_is_appended():
    """`preset=` selects the method's task / scale; with no method, `+preset=` appends one."""
    with pytest.raises(ConfigCompositionException, match="Could not override 'preset'"):
        _compose(["preset=paper_math"])
    cfg = _compose(["+preset=cpu_sql"])  # MInTRL-Const, train.yaml's objective, on the SQL agent
    assert (_cls(cfg.objective), _cls(cfg.judge), _cls(cfg.env)) == (
        "AdvantageRegression",
        "SqlJudge",
        "SqlEnvironment",
    )
    assert _container(_compose(["+preset=cpu_math"])) == _container(_compose([]))


def test_no_config_names_an_issue():
    named = [
        f"{p.relative_to(REPO)}:{i}"
        for p in sorted((REPO / "configs").rglob("*.yaml"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bissues? \d", line, re.IGNORECASE)
    ]
    assert named == []


# --- the README's rows ------------------------------------------------------------------------------

ROW_PREFIXES = ("method=", "experiment=", "preset=")


def _readme_cells() -> list[tuple[int, str]]:
    """(line, text) of every backticked span in a README.md table cell that starts with `method=`,
    `experiment=` or `preset=`; spans with a placeholder (`<...>`) are templates, not rows, and are left out."""
    cells = []
    for number, line in enumerate((REPO / "README.md").read_text().splitlines(), 1):
        if not line.lstrip().startswith("|"):
            continue
        for cell in line.strip().strip("|").split("|"):
            for span in re.findall(r"`([^`]+)`", cell):
                if span.strip().startswith(ROW_PREFIXES) and "<" not in span:
                    cells.append((number, span.strip()))
    return cells


README_CELLS = _readme_cells()


def test_the_readme_tables_name_rows():
    assert README_CELLS, "no `method=` / `experiment=` / `preset=` cell in README.md's tables"


@pytest.mark.parametrize("line,cell", README_CELLS, ids=[c for _, c in README_CELLS])
def test_every_row_the_readme_names_composes(line, cell):
    try:
        cfg = _compose(cell.split())
    except Exception as error:  # noqa: BLE001 - any composition error fails with the cell named
        pytest.fail(f"README.md line {line}: `{cell}` does not compose: {type(error).__name__}: {error}")
    if cell.startswith("method="):
        assert cfg.objective._target_, f"README.md line {line}: `{cell}` sets no objective._target_"
