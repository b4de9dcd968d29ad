"""The composed config of every row the README and the reproduce sweeps name equals its snapshot under
tests/snapshots/configs/ (regenerate: ``.venv/bin/python tests/config_snapshots.py --update``), and its
``_target_`` nodes pass the signature check of test_config_signatures."""

from __future__ import annotations

import pytest
from config_signatures import config_errors
from config_snapshots import (
    REGENERATE,
    SNAPSHOT_DIR,
    all_rows,
    command_rows,
    composed_row,
    fixed_environment,
    snapshot_difference,
    snapshot_name,
)

ROWS = all_rows()


@pytest.mark.parametrize("row", ROWS, ids=[snapshot_name(r)[: -len(".yaml")] for r in ROWS])
def test_the_composed_row_equals_its_snapshot(row):
    cfg = composed_row(row)
    difference = snapshot_difference(row, cfg=cfg)
    assert difference is None, difference
    with fixed_environment():  # the AgentBench rows resolve AGENTBENCH_DIR
        assert config_errors(cfg) == [], " ".join(row)


def test_no_snapshot_is_left_from_a_row_that_is_gone():
    stale = sorted(p.name for p in SNAPSHOT_DIR.glob("*.yaml"))
    expected = sorted(snapshot_name(r) for r in ROWS)
    assert [n for n in stale if n not in expected] == [], f"stale snapshots: run {REGENERATE}"


def test_a_changed_row_fails_with_the_regenerate_command(tmp_path):
    row = ["method=grpo"]
    stored = (SNAPSHOT_DIR / snapshot_name(row)).read_text()
    (tmp_path / snapshot_name(row)).write_text(stored.replace("n_control: 4", "n_control: 5"))
    difference = snapshot_difference(row, snapshot_dir=tmp_path)
    assert difference is not None and REGENERATE in difference
    assert "-  n_control: 5" in difference and "+  n_control: 4" in difference
    assert "no snapshot" in snapshot_difference(row, snapshot_dir=tmp_path / "none")


def test_readme_commands_become_rows():
    assert command_rows(".venv/bin/mintrl-train --plan experiment=paper/mintrl_const    # memory") == [
        ["experiment=paper/mintrl_const"]
    ]
    assert command_rows(".venv/bin/mintrl-train -m objective=a,b seed=0,1   # Hydra multirun") == [
        ["objective=a", "seed=0"],
        ["objective=b", "seed=0"],
    ]
    assert command_rows("make train") == []
