"""Every option of every config group composes (with the preset it pairs with) and every ``_target_`` node
of the composed config names a class or function that takes exactly the keys it sets: no key the target
lacks (unless it takes ``**kwargs``), every required parameter set, interpolated or passed by the build;
every interpolation resolves. The allocations, rewards and environments are also built (no model needed).
A misspelt key in a config folder makes the check fail (the last tests)."""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import pytest
import yaml
from config_signatures import (
    compose_config,
    config_errors,
    group_options,
    pairing_preset,
    row_options,
    sweep_rows,
    target_errors,
)
from config_snapshots import SNAPSHOT_SWEEPS
from hydra.utils import instantiate
from omegaconf import OmegaConf

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config

# Presets that are a layer under others, not a row alone, with the refusal check_config gives alone:
# paper_agent is the agent rows' scale (rollout=episodes, no environment), which preset=paper_sql,
# paper_shell and paper_python_tool put under an environment's components.
LAYER_PRESETS = {"paper_agent": "rollout=episodes needs an environment: add env=<name>"}
EVAL_ONLY = {("data", "eval")}  # options read only under configs/eval.yaml (with its benchmark)
# Groups whose options are also built, with what the build would pass that needs no model (None for the
# model context and the tokenizer); the options that need a model or an endpoint are not built.
BUILT_WITHOUT_A_MODEL = {
    "allocation": {},
    "reward": {},
    "env": {},
    "sft": {},
    "guide": {"tokenizer": None},
    "objective": {"context": None},
    "judge": {"context": None},
}
NEEDS_A_MODEL = {"judge=self_privileged", "judge=teacher", "judge=api"}  # a policy copy, a teacher, a base_url


def component_overrides(group: str, option: str) -> tuple[str, list[str]]:
    """The root config and overrides that compose one option of a component group: the option,
    after the preset it pairs with (``config_signatures.pairing_preset``); benchmarks under eval.yaml."""
    if group == "benchmark" or (group, option) in EVAL_ONLY:
        return "eval", [f"{group}={option}"]
    preset = pairing_preset(group, option, skip=frozenset(LAYER_PRESETS))
    return "train", [*([f"+preset={preset}"] if preset else []), f"{group}={option}"]


def combined_compositions(options: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """Fewer compositions that still select every option once: the options that pair with the same
    root and preset, the i-th option of each group together in the i-th composition."""
    contexts: dict[tuple[str, tuple[str, ...]], dict[str, list[str]]] = {}
    for group, option in options:
        root, overrides = component_overrides(group, option)
        contexts.setdefault((root, tuple(overrides[:-1])), {}).setdefault(group, []).append(overrides[-1])
    compositions = []
    for (root, preset), groups in sorted(contexts.items()):
        for i in range(max(len(v) for v in groups.values())):
            compositions.append((root, [*preset, *(v[i] for v in groups.values() if i < len(v))]))
    return compositions


COMPONENTS = group_options()
COMBINED = combined_compositions(COMPONENTS)


@pytest.mark.parametrize(("root", "overrides"), COMBINED, ids=[" ".join(o) for _, o in COMBINED])
def test_every_component_option_matches_its_targets(root, overrides):
    cfg = compose_config(overrides, root=root)
    assert config_errors(cfg) == [], f"{root} {' '.join(overrides)}"
    for override in overrides:
        group = override.split("=")[0]
        if group in BUILT_WITHOUT_A_MODEL and override not in NEEDS_A_MODEL:
            assert instantiate(OmegaConf.select(cfg, group), **BUILT_WITHOUT_A_MODEL[group]) is not None, override


@pytest.mark.slow
@pytest.mark.parametrize(("group", "option"), COMPONENTS, ids=[f"{g}={o}" for g, o in COMPONENTS])
def test_each_component_option_alone_matches_its_targets(group, option):
    root, overrides = component_overrides(group, option)
    assert config_errors(compose_config(overrides, root=root)) == [], f"{root} {' '.join(overrides)}"


def test_the_combined_compositions_select_every_option():
    selected = {tuple(o.split("=", 1)) for _, overrides in COMBINED for o in overrides if not o.startswith("+")}
    assert selected == set(COMPONENTS)


ROWS = (
    [f"experiment={name}" for name in row_options("experiment")]
    + [f"method={name}" for name in row_options("method")]
    + [f"+preset={name}" for name in row_options("preset") if name not in LAYER_PRESETS]
)


@pytest.mark.parametrize("row", ROWS)
def test_every_row_option_matches_its_targets(row):
    assert config_errors(compose_config([row])) == [], row


@pytest.mark.parametrize("preset", sorted(LAYER_PRESETS))
@pytest.mark.parametrize("method", [None, "grpo", "rail"])
def test_a_layer_preset_without_its_environment_is_refused_by_name(preset, method):
    overrides = [f"method={method}", f"preset={preset}"] if method else [f"+preset={preset}"]
    with pytest.raises(ValueError, match=re.escape(LAYER_PRESETS[preset])):
        check_config(compose_config(overrides))


def _extended_presets(name: str) -> set[str]:
    """The presets ``name``'s defaults list extends (its plain string entries)."""
    entries = (yaml.safe_load((Path(CONFIG_DIR) / "preset" / f"{name}.yaml").read_text()) or {}).get("defaults") or []
    return {e for e in entries if isinstance(e, str) and e != "_self_"}


def test_every_preset_that_extends_a_layer_matches_its_targets():
    extending = [p for p in row_options("preset") if _extended_presets(p) & set(LAYER_PRESETS)]
    assert extending == ["paper_python_tool", "paper_shell", "paper_sql"]
    for preset in extending:
        assert config_errors(compose_config([f"+preset={preset}"])) == [], preset


SWEEPS = row_options("sweep")
# the reproduce_core* and reproduce_agents* rows are checked with their snapshots (test_config_snapshots.py)
OTHER_SWEEPS = [s for s in SWEEPS if not s.startswith(SNAPSHOT_SWEEPS)]


@pytest.mark.parametrize("sweep", OTHER_SWEEPS)
def test_the_first_row_of_every_sweep_matches_its_targets(sweep, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DIR", "/agentbench")  # the AgentBench sweeps' checkout
    row = sweep_rows(sweep)[0]
    assert config_errors(compose_config(row)) == [], " ".join(row)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_row_of_every_sweep_matches_its_targets(sweep, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DIR", "/agentbench")
    for row in sweep_rows(sweep):
        assert config_errors(compose_config(row)) == [], " ".join(row)


@pytest.mark.parametrize("root", ["train", "eval", "pilot"])
def test_every_root_config_matches_its_targets(root):
    assert config_errors(compose_config([], root=root)) == [], root


METHOD_PRESETS = [
    pytest.param(method, preset, id=f"{method}+{preset}")
    for method, preset in itertools.product(row_options("method"), row_options("preset"))
    if preset not in LAYER_PRESETS
]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "preset"), METHOD_PRESETS)
def test_every_method_on_every_preset_matches_its_targets(method, preset):
    overrides = [f"method={method}", f"preset={preset}"]
    assert config_errors(compose_config(overrides)) == [], " ".join(overrides)


# --- the check fails on a misspelt key ---------------------------------------------------------------


def test_a_misspelt_key_and_a_missing_argument_are_named():
    config = {
        "allocation": {
            "_target_": "mintrl.allocation.uniform.UniformAllocation",
            "budget_per_stepp": 8,
        },
        "callbacks": {"summary": {"_target_": "mintrl.not_a_module.Thing"}},
        "rail": {"_target_": "mintrl.allocation.rail.RailAllocation", "promote_after": 4},
        "later": {"_target_": "mintrl.allocation.rail.RailAllocation", "_partial_": True},
    }
    errors = target_errors(config)
    assert (
        "rail: mintrl.allocation.rail.RailAllocation needs 'budget_per_step', which the config does not set" in errors
    )
    assert not any(e.startswith("later") for e in errors)  # a partial node leaves arguments to its caller
    assert any(e.startswith("allocation.budget_per_stepp:") and "takes no argument" in e for e in errors), errors
    assert any(e.startswith("callbacks.summary: _target_ mintrl.not_a_module.Thing") for e in errors), errors


TYPOS = [  # (file under configs/, text, misspelt text, overrides, the error line expected)
    (
        "rollout/episodes.yaml",
        "\nmax_turns:",
        "\nmax_turn:",
        ["+preset=cpu_sql", "env=sql"],
        "rollout.max_turn: mintrl.rollout.episodes.EpisodeRollout takes no argument 'max_turn'",
    ),  # EpisodeRollout takes **engine, forwarded to RolloutEngine.__init__
    (
        "method/grpo.yaml",
        "  n_control:",
        "  n_controls:",
        ["method=grpo"],
        "rollout.n_controls: mintrl.rollout.single_turn.SingleTurnRollout takes no argument 'n_controls'",
    ),
    (
        "allocation/rail.yaml",
        "\npromote_after:",
        "\npromote_afer:",
        ["allocation=rail"],
        "allocation.promote_afer: mintrl.allocation.rail.RailAllocation takes no argument 'promote_afer'",
    ),  # RailAllocation takes **controller, forwarded to RailController
]


@pytest.fixture(scope="module")
def config_copy(tmp_path_factory):
    """A copy of configs/ for the misspelling tests (each test restores the file it changes)."""
    configs = tmp_path_factory.mktemp("configs") / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    return configs


@pytest.mark.parametrize(("file", "text", "typo", "overrides", "error"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_misspelt_key_in_a_config_folder_fails_the_check(config_copy, file, text, typo, overrides, error):
    """The unchanged copy passes; with one key misspelt the check names it."""
    path = config_copy / file
    original = path.read_text()
    assert original.count(text) >= 1, f"{file} no longer holds {text!r}: pick another key"
    assert config_errors(compose_config(overrides, config_dir=config_copy)) == []
    try:
        path.write_text(original.replace(text, typo, 1))
        assert error in config_errors(compose_config(overrides, config_dir=config_copy))
    finally:
        path.write_text(original)


def test_a_misspelt_interpolation_fails_the_check(config_copy):
    path = config_copy / "objective" / "grpo.yaml"
    original = path.read_text()
    assert "${rollout.max_response_tokens}" in original
    try:
        path.write_text(original.replace("${rollout.max_response_tokens}", "${rollout.max_respons_tokens}"))
        errors = config_errors(compose_config(["objective=grpo"], config_dir=config_copy))
        assert len(errors) == 1 and errors[0].startswith("interpolation:") and "max_respons_tokens" in errors[0]
    finally:
        path.write_text(original)


def test_pairing_follows_the_presets():
    assert pairing_preset("env", "sql") == "cpu_sql"
    assert pairing_preset("judge", "shell_root") == "cpu_agentbench_os"
    assert pairing_preset("data", "sql_easy") == "cpu_sql"  # no preset selects it: its tasks are env=sql's
    assert pairing_preset("data", "python_tool_3terms") == "cpu_python_tool"
    assert pairing_preset("data", "arithmetic_3terms") is None  # the main job's defaults
