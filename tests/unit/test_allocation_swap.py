"""Swapping the allocation under a method: a method selects a config file of the ``allocation`` group
(configs/allocation/<name>.yaml holds that allocation's knobs), so ``method=<m> allocation=<other>`` composes
and instantiates the other allocation with its own file's knobs and none of the replaced one's."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate

from mintrl.build.config import CONFIG_DIR

ALLOCATIONS = sorted(p.stem for p in (Path(CONFIG_DIR) / "allocation").glob("*.yaml"))
METHODS_WITH_ALLOCATION = ("rail", "entropy", "random_anchor", "grpo")


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def _own_knobs(option: str) -> dict:
    """The allocation option composed alone (no method): its class and budget-free knobs."""
    return dict(_compose(f"allocation={option}").allocation)


@pytest.mark.parametrize("method", METHODS_WITH_ALLOCATION)
def test_every_allocation_composes_and_instantiates_under_every_method(method):
    for option in ALLOCATIONS:
        cfg = _compose(f"method={method}", f"allocation={option}")
        allocation = instantiate(cfg.allocation)
        assert isinstance(allocation, get_class(cfg.allocation._target_)), (method, option)
        # the composed allocation holds exactly its own file's keys: nothing of the method's default allocation
        assert set(cfg.allocation) == set(_own_knobs(option)), (method, option)


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
