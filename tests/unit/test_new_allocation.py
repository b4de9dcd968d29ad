"""Adding an allocation: docs/extending.md's walkthrough controller, in a new module with its own config file,
composes under a method, branches on the model-free :class:`FakeBrancher`, and its own decision kinds (declared
on its class) reach the decisions file and the agents report's table of decisions per kind."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from fake_brancher import FakeBrancher, fake_rollout
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from multirun_helpers import write_job

from mintrl.allocation.budget import RolloutBudget
from mintrl.analysis.agent_report import build_agents_report
from mintrl.analysis.agent_tables import render_agents_section
from mintrl.build.config import CONFIG_DIR
from mintrl.training.callbacks.allocation_decisions import write_decisions

REPO = Path(__file__).resolve().parents[2]

WALKTHROUGH = (REPO / "docs" / "extending.md").read_text().split("### Walkthrough: a new controller end to end")[1]


def _block(language: str) -> str:
    """The walkthrough's first fenced ``language`` block, unindented."""
    return textwrap.dedent(re.search(rf"```{language}\n(.*?)```", WALKTHROUGH, re.S).group(1))


# the docs' controller and config, as a module outside the package (calm_or_bold) on the import path
CONTROLLER = _block("python")
CONFIG = _block("yaml").replace("mintrl.allocation.calm_or_bold.", "calm_or_bold.")


@pytest.fixture
def new_allocation(tmp_path, monkeypatch):
    """The controller's module on the import path and its config file in an extra config folder."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "calm_or_bold.py").write_text(CONTROLLER)
    (tmp_path / "configs" / "allocation").mkdir(parents=True)
    (tmp_path / "configs" / "allocation" / "calm_or_bold.yaml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    return tmp_path


def _compose(configs: Path, *overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            "train", overrides=[f"hydra.searchpath=[file://{configs}]", "paths.output_dir=/tmp/x", *overrides]
        )


def test_a_new_allocation_in_its_own_file_reaches_the_decisions_table(new_allocation):
    cfg = _compose(new_allocation / "configs", "method=rail", "allocation=calm_or_bold", "data.prompts_per_step=2")
    allocation = instantiate(cfg.allocation)
    assert (type(allocation).__name__, allocation.budget_per_step) == ("CalmOrBoldAllocation", 16)

    # group 0 failed both rollouts: its calmest anchor is rollout 1's token 2 (surprisal 0.5); group 1 solved one:
    # its boldest is rollout 2's token 1 (surprisal 3.0). Branches of group 0 succeed, those of group 1 fail.
    rollouts = [
        fake_rollout(0, 0.0, [1.0, 2.0, 1.5]),
        fake_rollout(0, 0.0, [1.0, 1.0, 0.5]),
        fake_rollout(1, 1.0, [1.0, 2.5]),
        fake_rollout(1, 0.0, [1.0, 3.0]),
    ]
    brancher = FakeBrancher(lambda parent, anchor, temperature, i: 1.0 if parent.group == 0 else 0.0)
    budget = RolloutBudget(8)
    budget.take(4)
    new, stats = allocation.allocate(rollouts, [None, None], brancher, budget, ())
    assert stats == {"allocation/branches": 2.0} and len(new) == 4
    assert brancher.calls == [(0, 2, 2, 1.0), (1, 1, 2, 1.0)] and budget.remaining == 0
    assert [c.response_ids for c in new[:1]] == [[100, 101, 7]]  # the parent's first 2 tokens, then its own
    decisions = allocation.take_decisions()
    # realised gains: var(0, 0, 1, 1) - var(0, 0) = 0.25; var(1, 0, 0, 0) - var(1, 0) = 0.1875 - 0.25 = -0.0625
    assert [(d.kind, d.group, d.realized, d.anchor_surprisal) for d in decisions] == [
        ("calm", 0, pytest.approx(0.25), 0.5),
        ("bold", 1, pytest.approx(-0.0625), 3.0),
    ]

    # a job of a multirun: the callback's writer puts the decisions and the declared kinds in its folder
    root = new_allocation / "multirun"
    job = root / "0"
    write_job(job, ["seed=0", "experiment=agent/calm_cpu", "data=sql_schema"], {"val/pass@1": [(0, 0.5)]})
    write_decisions(job / "allocation_decisions.jsonl", allocation, [d.as_record(0) for d in decisions])
    assert json.loads((job / "allocation_kinds.json").read_text())["kinds"][0] == {
        "name": "calm",
        "meaning": "the lowest-surprisal anchor of a group with no success",
    }
    # a second job with no decisions and no kinds file: its kinds come from its config's allocation._target_
    other = root / "1"
    write_job(other, ["seed=0", "experiment=agent/calm_quiet_cpu", "data=sql_schema"], {"val/pass@1": [(0, 0.4)]})
    (other / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump({"allocation": {"_target_": "calm_or_bold.CalmOrBoldAllocation"}})
    )
    (root / "multirun.yaml").write_text("hydra: {}\n")

    text = render_agents_section(build_agents_report(root, repo_dir=REPO), "figure.png")
    table = text.split("### Branch decisions per kind")[1].split("###")[0]
    rows = [line for line in table.splitlines() if line.startswith("| sql_schema")]
    assert rows == [
        "| sql_schema | agent/calm_cpu | `calm` | the lowest-surprisal anchor of a group with no success | 1 | 1 | n/a "
        "| +0.2500 |",
        "| sql_schema | agent/calm_cpu | `bold` | the highest-surprisal anchor of a group with a success | 1 | 1 | n/a "
        "| -0.0625 |",
        "| sql_schema | agent/calm_quiet_cpu | `calm` | the lowest-surprisal anchor of a group with no success | 0 | 0 "
        "| n/a | n/a |",
        "| sql_schema | agent/calm_quiet_cpu | `bold` | the highest-surprisal anchor of a group with a success | 0 | 0 "
        "| n/a | n/a |",
    ]


def test_the_writer_refuses_a_kind_the_allocation_does_not_declare(new_allocation, tmp_path):
    from calm_or_bold import CalmOrBoldAllocation

    record = {"step": 0, "kind": "live", "group": 0, "realized": 0.1}
    with pytest.raises(ValueError, match=r"logged decision kinds \['live'\] it does not declare"):
        write_decisions(tmp_path / "d.jsonl", CalmOrBoldAllocation(8), [record])
    assert not (tmp_path / "d.jsonl").exists()
