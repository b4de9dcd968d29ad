"""env=shell: the action protocol and answer checks, the task generator (determinism, labels equal
to what the reference commands print in the sandbox, disjoint splits), the prompt source, the
AgentBench OS loader on a file written here, the shell judge, and the agent rows."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from shell_helpers import FILES, JUDGE_UID, LOADER_UID, bash, item, sandbox_processes
from transformers import AutoTokenizer

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.core.verdict import ReviewRequest
from mintrl.data.base import InvalidRow, RowFilter
from mintrl.env.shell.environment import ShellEnvironment
from mintrl.env.shell.loader import load_os_tasks, run_task
from mintrl.env.shell.protocol import EMPTY_COMMAND, NO_ACTION, answers_match, normalize, parse_action, size_bytes
from mintrl.env.shell.session import ShellLimits
from mintrl.env.shell.source import ShellTasks
from mintrl.env.shell.tasks import KINDS, PROTOCOL, Difficulty, generate_task, render_instruction
from mintrl.judge.shell import ShellJudge
from mintrl.model.loading import embedded_smollm2_folder

LIMITS = ShellLimits(wall_s=10.0, memory_mb=256, processes=16, tmp_mb=16)

# -- protocol -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,kind,body",
    [
        ("<answer> 3 </answer>", "answer", "3"),
        (bash("ls") + "\n<answer>3</answer>", "answer", "3"),  # an answer beats a block
        (bash("ls ~/data | wc -l"), "run", "ls ~/data | wc -l"),
        ("```sh\ncat a\n```", "run", "cat a"),
        ("```text\nhi\n```\n```shell\n\npwd\n```", "run", "pwd"),  # not a shell block: skipped
        ("```bash\nls -la", "run", "ls -la"),  # open at the end
        ("```bash\n  \n```", "invalid", EMPTY_COMMAND),
        ("```\nls\n```", "invalid", NO_ACTION),  # no language tag
        ("there are 3 files", "invalid", NO_ACTION),
    ],
)
def test_actions_are_parsed(text, kind, body):
    action = parse_action(text)
    assert (action.kind, action.text) == (kind, body)


@pytest.mark.parametrize(
    "answer,label,check,ok",
    [
        (" two  words\n", "two words", "exact", True),
        ("'notes.txt'", "notes.txt", "exact", True),
        ("Notes.txt", "notes.txt", "exact", False),
        ("007", "7", "integer", True),
        ("7 files", "7", "integer", False),
        ("4K", "4096", "size", True),
        ("1.5M", "1572864", "size", True),
        ("4 KB", "4000", "size", False),
        ("the file says hello world", "hello world", "containing", True),
        ("hello", "hello world", "in", True),
        ("", "hello world", "in", False),
    ],
)
def test_answer_checks(answer, label, check, ok):
    assert answers_match(answer, label, check) is ok


def test_normalize_and_sizes():
    assert normalize('\r\n "a \t b"\r\n') == "a b"
    assert (size_bytes("12 B"), size_bytes("2G"), size_bytes("x")) == (12, 2 << 30, None)
    with pytest.raises(ValueError, match="unknown answer check 'fuzzy'"):
        answers_match("a", "a", "fuzzy")


# -- generator ------------------------------------------------------------------------------------


def test_generated_tasks_are_deterministic_and_their_labels_are_what_the_reference_prints():
    d = Difficulty(min_files=3, max_files=6, max_depth=2, max_lines=5, kinds=KINDS)
    tasks = [generate_task(0, i, d) for i in range(30)]
    assert tasks == [generate_task(0, i, d) for i in range(30)]
    assert tasks != [generate_task(1, i, d) for i in range(30)]
    picked = {t["kind"]: t for t in tasks}
    assert set(picked) == set(KINDS)  # every kind among the first 30
    for kind, t in picked.items():
        result = run_task(t["init"], "", t["reference"], LOADER_UID, LIMITS, 5.0)
        assert result.finished and result.output.strip() == t["label"], kind  # (grep -c exits 1 on 0 lines)
        assert answers_match(t["label"], t["label"], t["check"])
    assert sandbox_processes() == []


def test_a_hand_checked_task():
    t = generate_task(5, 0)  # the default level: count_files or file_content, 2-4 files directly in ~/data
    assert t["kind"] in ("count_files", "file_content") and t["init"].startswith("mkdir -p ~/data\n")
    assert render_instruction(t) == f"Question: {t['question']}\n{PROTOCOL}"
    assert t["reference_action"] == f"```bash\n{t['reference']}\n```"
    files = [line for line in t["init"].split("\n") if line.startswith("printf")]
    assert 2 <= len(files) <= 4
    if t["kind"] == "count_files":
        assert t["label"] == str(len(files))


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="data.prompts.max_files"):
        Difficulty(min_files=5, max_files=3)
    with pytest.raises(ValueError, match="data.prompts.kinds"):
        Difficulty(kinds=("count_users",))
    with pytest.raises(ValueError, match="train_seed and val_seed must differ"):
        ShellTasks(train_seed=3, val_seed=3)


def test_splits_are_disjoint_and_prompts_hold_the_worked_example():
    source = ShellTasks(train_size=200, val_size=64, max_files=2, min_files=1, max_lines=1)
    train, val = source.tasks("train"), source.tasks("val")
    key = lambda t: (t["question"], t["init"])  # noqa: E731
    assert len(train) == 200 and len(val) == 64 and not {key(t) for t in train} & {key(t) for t in val}
    assert source.tasks("val") == val  # the same seed, the same tasks
    tok = AutoTokenizer.from_pretrained(embedded_smollm2_folder())
    items = ShellTasks(train_size=2, val_size=2).build("val", tok)
    bare = ShellTasks(train_size=2, val_size=2, example=False).build("val", tok)
    assert [i.entry for i in items] == [i.entry for i in bare] and items[0].task == "shell"
    assert items[0].reference == items[0].entry["reference_action"]
    assert 100 < len(items[0].prompt_ids) - len(bare[0].prompt_ids) < 250  # the example's tokens


# -- AgentBench OS files --------------------------------------------------------------------------


def test_the_loader_reads_an_agentbench_os_file(tmp_path):
    (tmp_path / "init").mkdir()
    (tmp_path / "init" / "make.sh").write_text("mkdir -p /home/box && echo 1 > /home/box/a && echo 2 > /home/box/.b\n")
    rows = [
        {  # check + example: the label is the example's output on the init state
            "description": "How many hidden files are in /home/box?",
            "create": {"local": "default", "init": {"file": "init/make.sh"}},
            "evaluation": {
                "check": [None, {"language": "python", "file": "check/integer-match.py"}],
                "example": {"code": "ls -a /home/box | grep '^\\.[^.]' | wc -l"},
            },
            "labels": ["file"],
        },
        {"description": "What is the word?", "create": {"init": "echo hi > /root/w"}, "evaluation": {"match": "hi"}},
        {"description": "Background", "start": "sleep 100 &", "evaluation": {"match": "x"}},  # loads: a start
        {"description": "Writes /usr", "create": {"init": {"code": "echo 1 > /usr/x"}}, "evaluation": {"match": "1"}},
        {"description": "A script check", "evaluation": {"check": {"file": "check/0.sh"}, "example": "ls"}},
    ]
    path = tmp_path / "os.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(InvalidRow, match="os.json row 3: field 'create.init'"):
        load_os_tasks(str(path), uid=LOADER_UID, limits=LIMITS)
    skip = RowFilter(skip=True)
    entries = load_os_tasks(str(path), skip, uid=LOADER_UID, limits=LIMITS)
    assert [(e["label"], e["check"], e["index"]) for e in entries] == [
        ("1", "integer", 0),
        ("hi", "exact", 1),
        ("x", "exact", 2),
    ]
    assert entries[2]["start"] == "sleep 100 &" and entries[0]["start"] == ""
    assert entries[0]["reference_action"] == "```bash\nls -a /home/box | grep '^\\.[^.]' | wc -l\n```"
    assert entries[1]["reference_action"] == "<answer>hi</answer>" and entries[0]["source"] == "os.json"
    assert [m.split(":")[0:2] for m in skip.skipped] == [
        ["os.json row 3", " field 'create.init'"],
        ["os.json row 4", " field 'evaluation.check[0]'"],
    ]
    env = ShellEnvironment(command_timeout_s=1.0, max_shells=1, uid_base=JUDGE_UID, memory_mb=256, processes=16)
    env.reset([item(entries[0])])
    assert "1\n" in env.step([0], [bash("cat /home/box/a")]).observations[0]
    assert env.step([0], ["<answer>1</answer>"]).rewards == [1.0]
    env.close()
    assert sandbox_processes() == []


# -- judge ----------------------------------------------------------------------------------------


def test_the_judge_runs_the_command_on_the_initial_state():
    judge = ShellJudge(uid=JUDGE_UID, command_timeout_s=1.0)
    right, wrong = bash("find ~/data -name '*.txt' | wc -l"), bash("ls ~/data")

    def review(steps, final=True, prefix=""):
        return judge.review([ReviewRequest("q", "", prefix, steps, final, FILES)])[0]

    assert not review([right]).revise
    verdict = review(["Let me look.\n\n", wrong])
    assert (verdict.revise, verdict.step, verdict.correction) == (True, 1, FILES["reference_action"])
    assert not review(["<answer>2</answer>"]).revise
    verdict = review(["<answer>3</answer>"])
    assert (verdict.revise, verdict.correction) == (True, "<answer>2</answer>")
    assert review(["no idea"]).correction == FILES["reference_action"]
    assert not review(["```bash\nls"], final=False).revise  # an open block waits
    assert not review(["\n"], prefix=wrong).revise  # judged with the prefix before
    assert not judge.review([ReviewRequest("q", "", "", [wrong], True, None)])[0].revise
    assert not judge.review([ReviewRequest("q", "", "", [wrong], True, {"question": "q"})])[0].revise
    assert judge.metrics() == {"judge/shell_errors": 1.0}
    assert sandbox_processes() == []


# -- configs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ["grpo", "mintrl_const"])
def test_the_agent_rows_compose_and_instantiate(row):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        overrides = ["paths.output_dir=/tmp/mintrl-test", f"method={row}", "preset=cpu_shell"]
        cfg = compose("train", overrides=overrides)
    check_config(cfg)
    assert cfg.get("reward") is None and cfg.rollout._target_ == "mintrl.rollout.episodes.EpisodeRollout"
    env = instantiate(cfg.env)
    assert isinstance(env, ShellEnvironment) and env.command_timeout_s == 2.0 and env.max_shells == 128
    prompts = instantiate(cfg.data.prompts)
    assert isinstance(prompts, ShellTasks) and prompts.difficulty.kinds == ("count_files", "file_content")
    judge = instantiate(cfg.judge, context=None)
    assert type(judge).__name__ == ("AlwaysKeepJudge" if row == "grpo" else "ShellJudge")
    if row == "grpo":
        assert (cfg.rollout.n_control, cfg.rollout.n_semi) == (4, 0)
