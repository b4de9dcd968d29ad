"""Swapping the allocation under a method or an experiment: a method or experiment selects a config file of the
``allocation`` group (configs/allocation/<name>.yaml holds that allocation's knobs), so ``method=<m>
allocation=<other>`` (or ``experiment=<e> allocation=<other>``) composes and instantiates the other allocation with
its own file's knobs and none of the replaced one's."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from mintrl.build.config import CONFIG_DIR

ALLOCATIONS = sorted(p.stem for p in (Path(CONFIG_DIR) / "allocation").glob("*.yaml"))
ROWS_WITH_ALLOCATION = (
    "method=rail",
    "method=entropy",
    "method=random_anchor",
    "method=grpo",
    "experiment=agent/rail8_cpu",
    "experiment=agent/entropy8_cpu",
    "experiment=agent/random8_cpu",
    "experiment=paper/agent_rail",
    "experiment=paper/agent_entropy",
)


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


@functools.cache  # composed once per option, compared under every row
def _own_knobs(option: str) -> dict:
    """The allocation option composed alone (no method): its class and knobs, interpolations unresolved (a budget
    per prompt reads the row's prompts per step)."""
    return OmegaConf.to_container(_compose(f"allocation={option}").allocation, resolve=False)


@pytest.mark.parametrize("row", ROWS_WITH_ALLOCATION)
def test_every_allocation_composes_and_instantiates_under_every_row(row):
    for option in ALLOCATIONS:
        cfg = _compose(row, f"allocation={option}")
        allocation = instantiate(cfg.allocation)
        assert isinstance(allocation, get_class(cfg.allocation._target_)), (row, option)
        # the composed allocation holds exactly its own file's keys and values: nothing of the row's default allocation
        assert OmegaConf.to_container(cfg.allocation, resolve=False) == _own_knobs(option), (row, option)


def test_rail_method_with_entropy_allocation_takes_none_of_rails_knobs():
    cfg = _compose("method=rail", "allocation=entropy", "data.prompts_per_step=4")
    allocation = instantiate(cfg.allocation)
    assert type(allocation).__name__ == "EntropyAllocation"
    assert "promote_after" not in cfg.allocation
    # entropy.yaml's own values (not method=entropy's 8-per-prompt budget): 48 rollouts, the 90th percentile
    assert (allocation.budget_per_step, allocation.percentile, allocation.branch_budget) == (48, 0.9, 2)


def test_each_method_keeps_its_allocation_settings():
    rail = _compose("method=rail", "data.prompts_per_step=4").allocation
    assert (rail._target_, rail.budget_per_step, rail.promote_after) == (
        "mintrl.allocation.rail.RailAllocation",
        32,
        16,
    )
    entropy = _compose("method=entropy", "data.prompts_per_step=4").allocation
    assert (entropy.budget_per_step, entropy.percentile, entropy.branch_budget) == (32, 0.75, 2)
    rand = _compose("method=random_anchor", "data.prompts_per_step=4").allocation
    assert (rand._target_, rand.budget_per_step, rand.branch_budget) == (
        "mintrl.allocation.random_anchor.RandomAnchorAllocation",
        32,
        2,
    )


def test_the_agent_experiments_keep_their_allocation_settings():
    rail = _compose("experiment=agent/rail8_cpu", "data.prompts_per_step=4").allocation
    assert (rail.budget_per_step, rail.promote_after, rail.spend_all) == (32, 16, True)
    paper = _compose("experiment=paper/agent_rail").allocation  # 32 tasks per step x 16
    assert (paper.budget_per_step, paper.promote_after, list(paper.budgets), paper.anchors_per_prompt) == (
        512,
        512,
        [2, 4, 8],
        2,
    )
    entropy = _compose("experiment=paper/agent_entropy").allocation
    assert (entropy.budget_per_step, entropy.percentile, entropy.spend_all) == (512, 0.9, False)
