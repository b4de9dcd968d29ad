"""env=python_tool: the action protocol, tool calls in the code sandbox (output, state across cells,
errors, timeouts, the output cap, hostile code), rewards from the reasoning-gym scorer, replay,
failures, and the prompt source and agent rows."""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from transformers import AutoTokenizer

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.data.base import PromptItem
from mintrl.env.base import replay
from mintrl.env.python_tool.environment import PythonToolEnvironment
from mintrl.env.python_tool.program import timeout_text
from mintrl.env.python_tool.protocol import (
    EMPTY_CODE,
    ERROR_HINT,
    NO_ACTION,
    OUTPUT_HINT,
    output_observation,
    parse_action,
    too_long,
)
from mintrl.env.python_tool.source import EXAMPLE_QUESTION, TOOL_INSTRUCTION, PythonToolPrompts
from mintrl.model.loading import embedded_smollm2_folder
from mintrl.sandbox import Outcome, ProgramResult

UID_BASE = 63000  # not the default: a training run elsewhere on this machine uses 61000+
ENTRY = {  # a hand-made reasoning-gym basic_arithmetic entry
    "question": "Calculate 4 + 3.",
    "answer": "7",
    "metadata": {"source_dataset": "basic_arithmetic", "source_index": 0, "expression": "4 + 3"},
}
ITEM = PromptItem(0, ENTRY["question"], ENTRY["answer"], [1], ENTRY, "basic_arithmetic")


def py(code: str) -> str:
    return f"```python\n{code}\n```"


def ok(text: str) -> str:
    return f"Output:\n{text}\n{OUTPUT_HINT}"


def failed(text: str) -> str:
    return f"Output:\n{text}\n{ERROR_HINT}"


def make(**kwargs) -> PythonToolEnvironment:
    return PythonToolEnvironment(**{"timeout_s": 2.0, "workers": 2, "uid_base": UID_BASE, **kwargs})


def run(actions, item=ITEM, **kwargs):
    """The environment and the step results of one episode acting ``actions`` in turn."""
    env = make(**kwargs)
    assert env.reset([item]) == [""]
    return env, [env.step([0], [a]) for a in actions]


def sandbox_processes() -> list[int]:
    """PIDs of live processes owned by this file's sandbox uids (there must be none between calls)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if UID_BASE <= uid < UID_BASE + 8:
                pids.append(int(entry))
    return pids


# -- protocol -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,kind,body",
    [
        ("<answer> 7 </answer>", "answer", "7"),
        ("<answer>6</answer> no, <ANSWER>7</ANSWER>", "answer", "7"),  # the last tag counts
        (py("print(1)") + "\n<answer>7</answer>", "answer", "7"),  # an answer beats a block
        (py("print(2+3)"), "run", "print(2+3)"),
        ("Let me compute.\n```py\nx = 1\nprint(x)\n```\nthen more", "run", "x = 1\nprint(x)"),
        (py("print(1)") + "\n" + py("print(2)"), "run", "print(1)"),  # the first block counts
        ("```text\nhello\n```\n```python\nprint(3)\n```", "run", "print(3)"),  # not Python: skipped
        ("```python\n    a = 2\n    print(a)\n", "run", "a = 2\nprint(a)"),  # open at the end, dedented
        ("```python", "invalid", EMPTY_CODE),
        (py("   "), "invalid", EMPTY_CODE),
        ("```\nprint(1)\n```", "invalid", NO_ACTION),  # no language tag
        ("The sum is 7.", "invalid", NO_ACTION),
        ("", "invalid", NO_ACTION),
    ],
)
def test_actions_are_parsed(text, kind, body):
    action = parse_action(text)
    assert (action.kind, action.text) == (kind, body)


def test_an_open_block_counts_only_when_allowed_and_long_actions_are_invalid():
    assert parse_action("```python\nprint(1)", allow_open=False).kind == "invalid"
    action = parse_action("x" * 30 + py("print(1)"), max_chars=30)
    assert action.kind == "invalid" and action.text == too_long(30 + len(py("print(1)")), 30)
    assert parse_action("x" * 30, max_chars=30).kind == "invalid"  # at the limit: read, no action


# -- tool calls -----------------------------------------------------------------------------------


def test_a_run_shows_what_it_printed():
    env, (out,) = run([py("print(2+3)")])
    assert out.observations == ["Output:\n5\n" + OUTPUT_HINT]
    assert out.observations == [ok("5")] == [output_observation("5")]
    assert (out.rewards, out.done, out.action_kinds, out.invalid, out.error) == (
        [0.0],
        [False],
        ["run"],
        [False],
        [False],
    )
    metrics = env.metrics()
    assert {k: v for k, v in metrics.items() if k != "env/seconds"} == {
        "env/tool_calls": 1.0,
        "env/tool_errors": 0.0,
        "env/timeouts": 0.0,
        "env/invalid_actions": 0.0,
        "env/errors": 0.0,
    }
    assert metrics["env/seconds"] > 0 and env.metrics()["env/tool_calls"] == 0.0  # reset by reading


def test_state_persists_across_cells_and_only_the_new_cell_prints():
    _, out = run(
        [
            py("x = 4\ndef double(v):\n    return 2 * v\nprint('first')"),
            py("y = 1\nraise ValueError('no')"),  # failed: not re-run, y is never defined
            py("print(double(x) + 1)"),
            py("print(y)"),
            py("pass"),
        ]
    )
    assert [o.observations[0] for o in out] == [
        ok("first"),
        failed("ValueError: no"),
        ok("9"),
        failed("NameError: name 'y' is not defined"),
        ok("(nothing was printed: use print() to see a value)"),
    ]
    assert [o.action_kinds[0] for o in out] == ["run", "run_error", "run", "run_error", "run"]


def test_errors_show_the_output_before_them_and_the_episode_goes_on():
    env, out = run([py("print('a')\nprint(1 / 0)"), py("print(1,"), py("import sys\nsys.exit(3)")])
    assert [o.observations[0] for o in out] == [
        failed("a\nZeroDivisionError: division by zero"),
        failed("SyntaxError: '(' was never closed (cell, line 1)"),
        failed("SystemExit: 3"),
    ]
    assert all(o.done == [False] and o.invalid == [False] and o.rewards == [0.0] for o in out)
    assert env.metrics()["env/tool_errors"] == 3.0


def test_a_timeout_is_stopped_at_the_limit():
    start = time.monotonic()
    env, (out,) = run([py("print('started')\nwhile True:\n    pass")], timeout_s=1.0)
    assert time.monotonic() - start < 6.0  # 1 s limit + process start-up on a busy machine
    assert out.observations == [failed("started\n" + timeout_text(1.0))]
    assert timeout_text(1.0) == "TimeoutError: the code ran longer than 1 s and was stopped."
    assert out.action_kinds == ["run_error"] and out.done == [False]
    metrics = env.metrics()
    assert (metrics["env/timeouts"], metrics["env/tool_errors"]) == (1.0, 1.0)
    assert sandbox_processes() == []


def test_output_is_capped():
    _, out = run([py("print('x' * 5000)"), py("import sys\nfor _ in range(1000):\n    sys.stdout.write('y' * 1000)")],
                 max_output_chars=10)  # fmt: skip
    assert out[0].observations == [ok("x" * 10 + "\n... (output cut at 10 characters)")]
    assert out[1].observations == [ok("y" * 10 + "\n... (output cut at 10 characters)")]


# -- answers, turns, replay, failures ---------------------------------------------------------------


@pytest.mark.parametrize("answer,reward", [("7", 1.0), (" 7\n", 1.0), ("8", 0.0), ("seven", 0.0)])
def test_an_answer_ends_the_episode_with_the_task_scorer(answer, reward):
    env, out = run([py("print(4 + 3)"), f"So <answer>{answer}</answer>"])
    assert out[-1].rewards == [reward] and out[-1].done == [True] and out[-1].action_kinds == ["answer"]
    assert out[-1].observations == [""]
    with pytest.raises(ValueError, match="finished"):
        env.step([0], ["<answer>7</answer>"])


def test_invalid_actions_and_the_turn_limit():
    env, out = run(["I think it is 7.", py("print(1)")], max_turns=2)
    assert out[0].observations == [NO_ACTION] and out[0].invalid == [True] and out[0].done == [False]
    assert out[1].observations == [""] and out[1].done == [True] and out[1].rewards == [0.0]
    assert env.metrics()["env/invalid_actions"] == 1.0
    env, _ = run([py("print(1)")])
    assert env.score_final([0]) == [0.0]


def test_replay_is_deterministic():
    actions = [py("import random\nrandom.seed(3)\nr = random.randint(1, 1000)\nprint(r)"), py("print(r * 2)"),
               "hmm", "<answer>7</answer>"]  # fmt: skip
    env = make()
    first, last1 = replay(env, ITEM, actions)
    second, last2 = replay(env, ITEM, actions)
    assert first == second and len(first) == 1 + len(actions)
    assert first[0] == "" and first[-1] == "" and int(first[2].split("\n")[1]) == 2 * int(first[1].split("\n")[1])
    assert last1.rewards == last2.rewards == [1.0]


def test_a_bad_entry_or_a_failed_sandbox_ends_only_that_episode():
    bad = PromptItem(1, "?", "1", [1], {"question": "?", "metadata": {"source_dataset": "no_such_task"}}, "x")
    env = make()
    env.reset([ITEM, bad, ITEM])
    out = env.step([0, 1], [py("print(1)"), py("print(1)")])
    assert out.observations[0] == ok("1") and out.error == [False, True] and out.done == [False, True]
    assert math.isnan(out.rewards[1]) and out.action_kinds[1] == "error"
    env.sandbox.run = lambda programs: [ProgramResult(Outcome.CRASHED, sandbox_error="no temp dir")] * len(programs)
    out = env.step([0, 2], [py("print(2)"), "<answer>7</answer>"])
    assert out.error == [True, False] and math.isnan(out.rewards[0]) and out.rewards[1] == 1.0
    assert env.metrics()["env/errors"] == 2.0
    env.reset([bad])
    assert math.isnan(env.score_final([0])[0])
    with pytest.raises(ValueError, match="unknown"):
        env.step([3], ["x"])


def test_disjoint_episodes_step_in_parallel_threads():
    env = make()
    assert env.thread_safe
    env.reset([ITEM] * 4)
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda e: env.step([e], [py(f"print({e} * 10)")]), range(4)))
    assert [o.observations[0] for o in outs] == [ok(str(10 * e)) for e in range(4)]


# -- hostile code ---------------------------------------------------------------------------------
# Each program stops by itself after bounded damage (as in tests/integration/test_sandbox.py).

FORK_LOOP = """
import os, time
for _ in range(200):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
print("forked 200")
"""


def test_hostile_code_is_contained(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # world-writable: only the sandbox's own mounts and user keep it safe
    canary = outside / "canary"
    canary.write_text("keep me")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted = []

    def accept():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    actions = [
        py(FORK_LOOP),
        py(f"open({str(outside / 'new')!r}, 'w').write('x')"),
        py(f"import os\nos.remove({str(canary)!r})"),
        py(f"import socket\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)"),
    ]
    env = make(processes=16)
    env.reset([ITEM] * len(actions))
    start = time.monotonic()
    out = env.step(list(range(len(actions))), actions)
    elapsed = time.monotonic() - start
    listener.join(timeout=0)
    server.close()
    assert out.done == [False] * 4 and out.error == [False] * 4 and out.action_kinds == ["run_error"] * 4
    first_lines = [o.split("\n")[1] for o in out.observations]
    assert first_lines[0].startswith("BlockingIOError: [Errno 11]")  # the process limit stopped the loop
    # the host's /tmp is hidden behind the sandbox's private one, the rest is read-only
    blocked = ("OSError: [Errno 30] Read-only", "PermissionError", "FileNotFoundError")
    assert first_lines[1].startswith(blocked) and first_lines[2].startswith(blocked)
    assert first_lines[3].startswith("OSError: [Errno 101] Network is unreachable")
    assert canary.read_text() == "keep me" and sorted(os.listdir(outside)) == ["canary"]
    assert not accepted and sandbox_processes() == []
    assert elapsed < 2 * 2.0 + 10
    # the machine and the environment are intact: a plain call still works
    assert env.step([0], [py("print('alive')")]).observations == [ok("alive")]


# -- prompts and agent rows ---------------------------------------------------------------------------


def test_the_prompt_source_adds_the_protocol_and_a_worked_example():
    tok = AutoTokenizer.from_pretrained(str(embedded_smollm2_folder()))
    plain = PythonToolPrompts(train_size=4, val_size=2, example=False).build("val", tok)
    shown = PythonToolPrompts(train_size=4, val_size=2).build("val", tok)
    messages = PythonToolPrompts().history()
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0]["content"] == TOOL_INSTRUCTION.format(question=EXAMPLE_QUESTION)
    # the example's observation is what the environment shows for its code, and its answer scores 1
    example = PromptItem(0, EXAMPLE_QUESTION, "42", [1], {**ENTRY, "answer": "42"}, "basic_arithmetic")
    _, out = run([messages[1]["content"], messages[3]["content"]], item=example)
    assert out[0].observations == [messages[2]["content"]] and out[1].rewards == [1.0]
    for a, b in zip(plain, shown):
        alone = tok.apply_chat_template(
            [{"role": "user", "content": TOOL_INSTRUCTION.format(question=a.question)}],
            tokenize=False,
            add_generation_prompt=True,
        )
        assert a.prompt_ids == tok(alone, add_special_tokens=False)["input_ids"]  # no history without the example
        assert a.question == b.question == b.entry["question"] and b.reference == b.entry["answer"]
        assert b.entry["metadata"]["source_dataset"] == "basic_arithmetic"
        whole = tok.apply_chat_template(
            [*messages, {"role": "user", "content": TOOL_INSTRUCTION.format(question=b.question)}],
            tokenize=False,
            add_generation_prompt=True,
        )
        assert b.prompt_ids == tok(whole, add_special_tokens=False)["input_ids"]
        assert 60 < len(b.prompt_ids) - len(a.prompt_ids) < 200  # the example's tokens


@pytest.mark.parametrize("row", ["grpo", "mintrl_const"])
def test_the_agent_rows_compose_and_instantiate(row):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        overrides = ["paths.output_dir=/tmp/mintrl-test", f"method={row}", "preset=cpu_python_tool"]
        cfg = compose("train", overrides=overrides)
    check_config(cfg)
    assert cfg.get("reward") is None and cfg.rollout._target_ == "mintrl.rollout.episodes.EpisodeRollout"
    env = instantiate(cfg.env)
    assert isinstance(env, PythonToolEnvironment) and env.timeout_s == 2.0 and env.max_output_chars == 300
    prompts = instantiate(cfg.data.prompts)
    assert isinstance(prompts, PythonToolPrompts) and prompts.example and prompts.task == "basic_arithmetic"
    judge = instantiate(cfg.judge, context=None)
    assert type(judge).__name__ == ("AlwaysKeepJudge" if row == "grpo" else "RuleJudge")
    if row == "grpo":
        assert (cfg.rollout.n_control, cfg.rollout.n_semi) == (4, 0)
