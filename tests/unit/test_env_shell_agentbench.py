"""env=shell on AgentBench's OS-interaction forms, on rows written here (never AgentBench's own files):
init lists and Python scripts, ``start`` programs, ``match`` objects, check chains, labels from the
initial state (an agent that changes the state cannot change them), the open-files limit, the
coverage helper, and (slow, with AGENTBENCH_DIR) the loader over a local checkout."""

from __future__ import annotations

import json
import os

import pytest
from hydra import compose, initialize_config_dir
from shell_helpers import LOADER_UID, UID_BASE, bash, item, make, sandbox_processes

from mintrl.build.config import CONFIG_DIR
from mintrl.data.base import InvalidRow, RowFilter
from mintrl.env.shell.coverage import command_output, os_coverage, report
from mintrl.env.shell.environment import ShellEnvironment
from mintrl.env.shell.loader import STATE_CHECK, load_os_tasks
from mintrl.env.shell.protocol import answers_match
from mintrl.env.shell.session import ShellLimits

LIMITS = ShellLimits(wall_s=10.0, memory_mb=256, processes=16, tmp_mb=16, open_files=1024)
INTEGER = {"language": "python", "file": "check/integer-match.py"}
STRING = {"language": "python", "file": "check/string-match.py"}


def load(tmp_path, rows, skip=True):
    path = tmp_path / "os.json"
    path.write_text(json.dumps(rows))
    kept = RowFilter(skip=True) if skip else None
    return load_os_tasks(str(path), kept, uid=LOADER_UID, limits=LIMITS), kept


def episode(entry, actions):
    """Observations and rewards of one episode that takes ``actions`` in turn."""
    env = make()
    env.reset([item(entry)])
    seen = []
    for action in actions:
        out = env.step([0], [action])
        seen.append((out.observations[0], out.rewards[0]))
    env.close()
    assert sandbox_processes() == []
    return seen


def test_init_lists_and_python_scripts_run_in_turn(tmp_path):
    (tmp_path / "init").mkdir()
    (tmp_path / "init" / "a.sh").write_text("mkdir -p /home/box && cd /home/box && echo one > f\n")
    init = [
        {"file": "init/a.sh"},
        "echo two >> /home/box/f; pwd > /home/box/cwd",  # a process of its own: the cd above is gone
        {"language": "python", "code": "open('/home/box/g', 'w').write('py\\n')"},
    ]
    rows = [
        {
            "description": "What do the files say?",
            "create": {"init": init},
            "evaluation": {"check": [None, STRING], "example": "cat /home/box/f /home/box/g /home/box/cwd"},
        },
        {
            "description": "py",
            "create": {"init": {"language": "python", "code": "exit(3)"}},
            "evaluation": {"match": "x"},
        },
        {
            "description": "c",
            "create": {"init": {"language": "c", "code": "int main(){}"}},
            "evaluation": {"match": "x"},
        },
    ]
    entries, skip = load(tmp_path, rows)
    assert [(e["label"], e["check"]) for e in entries] == [("one\ntwo\npy\n/tmp/work", "exact")]
    assert [m.split(": ")[0:2] for m in skip.skipped] == [
        ["os.json row 1", "field 'create.init'"],
        ["os.json row 2", "field 'create.init.language'"],
    ]
    assert "exit code 3" in skip.skipped[0]
    (obs, _), (_, reward) = episode(entries[0], [bash("cat /home/box/g"), "<answer>one two py /tmp/work</answer>"])
    assert command_output(obs) == "py" and reward == 1.0


def test_a_start_program_runs_in_the_agents_shell_and_ends_with_it(tmp_path):
    beat = 'python3 -c \'import time\nwhile True:\n\twith open("/root/log", "a") as f:\n\t\tf.write("x")\n\ttime.sleep(0.1)\' &'
    rows = [
        {  # a background program the reference needs: its file grows (at load time too: label 1)
            "description": "Is something writing /root/log? 1 for yes, 0 for no.",
            "start": beat,
            "evaluation": {
                "check": [None, INTEGER],
                "example": "sleep 0.3; a=$(wc -c </root/log); sleep 0.5; b=$(wc -c </root/log); [ $b -gt $a ] && echo 1 || echo 0",
            },
        },
        {  # a variable of the agent's shell; the start's output is not shown
            "description": "What is $var?",
            "start": "var=42; echo hidden-start",
            "evaluation": {"match": "42", "example": {"code": "echo $var"}},
        },
        {"description": "A failing start", "start": "false", "evaluation": {"match": "x"}},
    ]
    entries, skip = load(tmp_path, rows)
    assert [(e["label"], e["check"], e["reference"]) for e in entries] == [
        ("1", "integer", rows[0]["evaluation"]["example"]),
        ("42", "exact", "echo $var"),
    ]
    assert [m.split(": ")[0:2] for m in skip.skipped] == [["os.json row 2", "field 'start'"]]
    (obs, _), (_, reward) = episode(entries[0], [entries[0]["reference_action"], "<answer>1</answer>"])
    assert command_output(obs) == "1" and reward == 1.0
    (obs, _), (_, reward) = episode(entries[1], [entries[1]["reference_action"], "<answer>42</answer>"])
    assert command_output(obs) == "42" and reward == 1.0 and "hidden-start" not in obs


def test_match_objects_answer_strip_and_regex(tmp_path):
    rows = [
        {"description": "a", "evaluation": {"match": {"answer": "yes", "strip": True}}},
        {"description": "b", "evaluation": {"match": {"answer": "Yes  sir", "strip": False}}},
        {"description": "c", "evaluation": {"match": {"regex": "^[0-9]+ files?$"}}},
        {"description": "d", "evaluation": {"match": {"regex": "(unclosed"}}},
        {"description": "e", "evaluation": {"match": {"text": "no"}}},
    ]
    entries, skip = load(tmp_path, rows)
    assert [(e["label"], e["check"]) for e in entries] == [
        ("yes", "exact"),
        ("Yes  sir", "literal"),
        ("^[0-9]+ files?$", "regex"),
    ]
    assert [m.split(": ")[0:2] for m in skip.skipped] == [
        ["os.json row 3", "field 'evaluation.match.regex'"],
        ["os.json row 4", "field 'evaluation.match'"],
    ]
    assert answers_match("'yes'", "yes", "exact") and not answers_match("Yes sir", "Yes  sir", "literal")
    assert answers_match("Yes  sir", "Yes  sir", "literal")
    assert answers_match("3 files", rows[2]["evaluation"]["match"]["regex"], "regex")
    assert not answers_match("three files", rows[2]["evaluation"]["match"]["regex"], "regex")
    assert [r for _, r in episode(entries[2], ["<answer>12 files</answer>"])] == [1.0]
    assert [r for _, r in episode(entries[2], ["<answer>12 files and 3 links</answer>"])] == [0.0]


def test_check_chains_compare_on_the_host_and_state_checks_are_refused(tmp_path):
    rows = [
        {"description": "a", "evaluation": {"check": [None, INTEGER, STRING], "example": "echo 007"}},
        {"description": "b", "evaluation": {"check": [INTEGER], "example": "echo 1"}},
        {"description": "c", "evaluation": {"check": [None], "example": "echo 1"}},
        {"description": "d", "evaluation": {"check": {"code": "test -f /home/x"}, "example": "touch /home/x"}},
        {"description": "e", "evaluation": {"check": {"file": "check/0.sh"}, "example": "ls"}},
        {
            "description": "f",
            "evaluation": {"check": [None, {"language": "python", "code": "exit(0)"}], "example": "ls"},
        },
        {"description": "g", "evaluation": {"check": [None, INTEGER]}},
    ]
    entries, skip = load(tmp_path, rows)
    assert [(e["label"], e["check"]) for e in entries] == [("007", "integer+exact")]
    assert answers_match("007", "007", "integer+exact") and not answers_match("7", "007", "integer+exact")
    reasons = [m.split(": ", 1)[1] for m in skip.skipped]
    assert reasons[0] == "field 'evaluation.check[0]': a comparison before the example's output (null)"
    assert reasons[1] == f"field 'evaluation.check': no comparison script: {STATE_CHECK}"
    assert reasons[2:5] == [
        f"field 'evaluation.check[0]': a code script is not a comparison script: {STATE_CHECK}",
        f"field 'evaluation.check[0]': 'check/0.sh' is not a comparison script: {STATE_CHECK}",
        f"field 'evaluation.check[1]': a code script is not a comparison script: {STATE_CHECK}",
    ]
    assert reasons[5] == "field 'evaluation.example': a check chain needs the example script"
    assert [r for _, r in episode(entries[0], ["<answer>7</answer>"])] == [0.0]
    assert [r for _, r in episode(entries[0], ["<answer>007</answer>"])] == [1.0]


def test_the_label_is_the_examples_stdout_on_the_initial_state(tmp_path):
    rows = [
        {
            "description": "How many files are in /home/box?",
            "create": {"init": "mkdir /home/box && touch /home/box/a /home/box/b"},
            "evaluation": {"check": [None, INTEGER], "example": "ls /nowhere; ls /home/box | wc -l"},
        }
    ]
    (entry,), _ = load(tmp_path, rows)
    assert entry["label"] == "2"  # stdout only: ls's error about /nowhere is not part of it
    # an agent that deletes the files the example counts, then answers what the example now prints
    wipe = episode(entry, [bash("rm -f /home/box/*; ls /home/box | wc -l"), "<answer>0</answer>"])
    assert command_output(wipe[0][0]) == "0" and wipe[1][1] == 0.0
    assert episode(entry, ["<answer>2</answer>"])[0][1] == 1.0


def test_the_open_files_limit_lets_bash_open_fd_123(tmp_path):
    env = ShellEnvironment()
    assert env.limits.open_files == 1024
    rows = [{"description": "a", "create": {"init": "echo 123>/home/.tmp"}, "evaluation": {"match": "x"}}]
    entries, skip = load(tmp_path, rows)
    assert skip.skipped == [] and len(entries) == 1
    seen = episode(entries[0], [bash("echo 123>/home/.f && cat /home/.f; echo $?")])
    assert command_output(seen[0][0]) == "0"  # `123>` is fd 123: echo prints nothing to stdout


def test_the_coverage_helper_counts_rows_and_scores_references(tmp_path):
    data, scripts = tmp_path / "data" / "g", tmp_path / "scripts" / "g"
    data.mkdir(parents=True)
    (scripts / "init").mkdir(parents=True)
    (scripts / "init" / "mk.sh").write_text("mkdir /home/d && touch /home/d/x /home/d/y /home/d/z\n")
    rows = [
        {
            "description": "n",
            "create": {"init": {"file": "init/mk.sh"}},
            "evaluation": {"check": [None, INTEGER], "example": "ls /home/d | wc -l"},
        },
        {
            "description": "t",
            "create": {"init": "date +%N > /home/t"},
            "evaluation": {"check": [None, STRING], "example": "cat /home/t"},
        },
        {"description": "m", "evaluation": {"match": "hi"}},
        {"description": "u", "create": {"init": "echo 1 > /usr/x"}, "evaluation": {"match": "1"}},
    ]
    (data / "a.json").write_text(json.dumps(rows))
    (cov,) = os_coverage(str(tmp_path), uid=LOADER_UID, uid_base=UID_BASE)
    assert (cov.path, cov.rows, cov.loaded, cov.answer_only, cov.scored_1) == ("data/g/a.json", 4, 3, 1, 2)
    assert [i for i, _, _ in cov.failed] == [1]  # its init differs on each run (nanoseconds)
    assert len(cov.refused) == 1 and cov.refused[0].startswith("a.json row 3: field 'create.init'")
    assert report([cov]).splitlines()[1].split() == ["data/g/a.json", "4", "3", "1", "2", "1"]
    assert sandbox_processes() == []


def test_the_agentbench_os_data_config_composes():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        overrides = ["paths.output_dir=/tmp/mintrl-test", "method=grpo", "preset=cpu_shell", "data=agentbench_os"]
        cfg = compose("train", overrides=[*overrides, "data.prompts.path=/x/dev.json"])
    assert cfg.data.prompts._target_ == "mintrl.env.shell.source.ShellTasks"
    assert (cfg.data.prompts.path, cfg.data.prompts.train_size, cfg.data.skip_invalid) == ("/x/dev.json", None, True)


@pytest.mark.slow
def test_the_loader_over_a_local_agentbench_checkout():
    folder = os.environ.get("AGENTBENCH_DIR")
    if not folder:
        pytest.skip("AGENTBENCH_DIR is not set (a local data/os_interaction folder of THUDM/AgentBench)")
    from mintrl.env.shell.coverage import data_files, scripts_dir_of

    files = [p for p in data_files(folder) if "train_" not in p]
    assert files, f"no data/**/*.json under {folder}"
    loaded = 0
    for path in files:
        skip = RowFilter(skip=True)
        entries = load_os_tasks(path, skip, scripts_dir_of(folder, path), LOADER_UID, LIMITS)
        with open(path, encoding="utf-8") as f:
            raw = json.load(f) if path.endswith(".json") else [line for line in f if line.strip()]
        assert len(entries) + len(skip.skipped) == (len(raw) if isinstance(raw, list) else 1), path
        assert all(": field '" in m for m in skip.skipped), skip.skipped  # every refusal names its field
        loaded += len(entries)
    assert loaded >= 124, loaded  # THUDM/AgentBench's 179 rows of data/: 124 load here (55 refused)


def test_a_bad_row_is_named_when_not_skipped(tmp_path):
    with pytest.raises(InvalidRow, match="os.json row 0: field 'evaluation.check\\[0\\]'"):
        load(tmp_path, [{"description": "d", "evaluation": {"check": {"code": "true"}, "example": "ls"}}], skip=False)
