"""A task whose init draws with bash's $RANDOM (AgentBench's stock-log rows: 400 random lines) lays out the
same files in the load-time run that computes its label, in every episode and in the judge's runs: its
$RANDOM is seeded from the init's text, so the reference command's answer in an episode is the label."""

from __future__ import annotations

import json

from shell_helpers import LOADER_UID, bash, item, make

from mintrl.env.shell.loader import load_os_tasks, seeded
from mintrl.judge.shell import ShellJudge

STOCK_INIT = (
    "names=(Alice Bob); actions=(Purchase Sell)\n"
    "for ((i=1; i<=401; i++)); do\n"
    '  echo "${names[$RANDOM % 2]} | ${actions[$RANDOM % 2]} | $((RANDOM % 100)) | $((RANDOM % 1000))" >> ~/stock.log\n'
    "done\n"
)
ROW = {
    "description": "How many times did Bob sell a stock (~/stock.log)?",
    "create": {"init": STOCK_INIT},
    "evaluation": {"check": [None, {"language": "python", "file": "check/integer-match.py"}],
                   "example": "grep 'Bob | Sell' ~/stock.log | wc -l"},
}  # fmt: skip


def test_a_random_init_gives_the_episode_the_label_computed_at_load_time(tmp_path):
    path = tmp_path / "os.json"
    path.write_text(json.dumps([ROW]))
    (entry,) = load_os_tasks(str(path), uid=LOADER_UID)
    assert entry["init"] == seeded(STOCK_INIT) and entry["init"].startswith("RANDOM=")
    assert load_os_tasks(str(path), uid=LOADER_UID)[0]["label"] == entry["label"]
    assert 50 < int(entry["label"]) < 150  # about a quarter of 401 lines
    env = make()
    try:
        env.reset([item(entry)])
        seen = env.step([0], [bash(entry["reference"])]).observations[0]
        answer = seen.split("Output:\n", 1)[1].split("\n", 1)[0]
        assert answer == entry["label"]
        assert env.step([0], [f"<answer>{answer}</answer>"]).rewards == [1.0]
    finally:
        env.close()
    assert ShellJudge(uid=LOADER_UID).action_ok(entry, entry["reference"]) is True


def test_the_seed_is_the_scripts_own():
    assert seeded("echo $RANDOM") == seeded("echo $RANDOM")
    assert seeded("echo $RANDOM").split("\n")[1:] == ["echo $RANDOM"]
    assert seeded("echo $RANDOM") != seeded("echo $RANDOM # another task")
