"""Code domain: HumanEval/MBPP sources, the unit-test reward (values and outcome counts), a sandbox
failure as no reward, and a 2-step training run on code with the embedded model."""

from __future__ import annotations

import json
import math

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mintrl.data.code import CodePrompts
from mintrl.reward import CodeReward, score_rewards
from mintrl.sandbox import Sandbox

UID_BASE = 62000


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(workers=2, timeout_s=3.0, cpu_s=3, memory_mb=512, uid_base=UID_BASE)


@pytest.fixture(scope="module")
def humaneval_items(tokenizer):
    prompts = CodePrompts()
    return {item.entry["task_id"]: item for split in ("train", "val") for item in prompts.build(split, tokenizer)}


def test_humaneval_split_is_disjoint_documented_and_complete(tokenizer):
    prompts = CodePrompts()
    train, val = prompts.split("train"), prompts.split("val")
    ids = [r["task_id"] for r in train + val]
    assert (len(train), len(val), len(set(ids))) == (124, 40, 164)
    assert [r["task_id"] for r in val[:3]] == ["HumanEval/124", "HumanEval/138", "HumanEval/49"]  # split_seed=0
    items = prompts.build("val", tokenizer)
    assert items[0].question.startswith("Complete this Python function:\n```python\n") and items[0].task == "humaneval"
    assert "```python code block" in tokenizer.decode(items[0].prompt_ids)


def test_mbpp_jsonl_through_datasets_and_bad_rows_are_named(tmp_path, sandbox, tokenizer):
    rows = [
        {
            "task_id": 11,
            "text": "Write a function to add two numbers.",
            "code": "def add(a, b):\n    return a + b",
            "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
            "test_setup_code": "",
        },
        {
            "task_id": 12,
            "text": "Write a function returning the square.",
            "code": "def sq(x):\n    return x * x",
            "test_list": ["assert sq(3) == 9"],
            "test_setup_code": "import math",
        },
    ]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    prompts = CodePrompts(source=str(path), val_size=1, split_seed=0)
    items = prompts.build("train", tokenizer) + prompts.build("val", tokenizer)
    assert sorted(i.entry["task_id"] for i in items) == ["11", "12"]
    item = next(i for i in items if i.entry["task_id"] == "11")
    assert item.question.endswith("Your code should pass these tests:\nassert add(1, 2) == 3\nassert add(0, 0) == 0")
    reward = CodeReward(sandbox)
    answers = ["```python\n" + i.reference + "\n```" for i in items]
    assert reward(answers, items) == [1.0, 1.0]
    rows[1].pop("test_list")
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=r"mbpp.jsonl row 1: neither HumanEval format .* nor MBPP format"):
        CodePrompts(source=str(path), val_size=1).rows()
    with pytest.raises(ValueError, match="no such file"):
        CodePrompts(source=str(tmp_path / "missing.jsonl"))


def test_reward_values_and_outcome_counts(sandbox, humaneval_items):
    item = humaneval_items["HumanEval/0"]  # has_close_elements: 7 asserts, 3 of them expect False
    right = "```python\n" + item.reference + "```"
    always_false = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    loop = "```python\ndef has_close_elements(numbers, threshold):\n    while True:\n        pass\n```"
    responses = [right, always_false, loop, "I don't know."]
    reward = CodeReward(sandbox)
    assert score_rewards(reward, responses, [item] * 4) == [1.0, 0.0, 0.0, 0.0]
    assert reward.metrics() == {
        "code/passed": 1.0,
        "code/failed": 2.0,
        "code/timeout": 1.0,
        "code/crashed": 0.0,
        "code/sandbox_error": 0.0,
        "code/unbounded_check": 0.0,
    }
    assert set(reward.metrics().values()) == {0.0}  # reset
    partial = CodeReward(sandbox, fraction=True)
    assert partial(responses, [item] * 4) == [1.0, pytest.approx(3 / 7), 0.0, 0.0]


@pytest.mark.slow  # 2 steps with sandboxed HumanEval rewards, 1.3 min on 2 cores: make test-slow
def test_two_training_steps_on_code_with_the_embedded_model(tmp_path):
    from test_experiments import _compose

    from mintrl.build.run import run

    cfg = _compose(
        "method=grpo",
        "preset=cpu_code",
        f"paths.output_dir={tmp_path}",
        "trainer.max_steps=2",
        "data.prompts_per_step=2",
        "data.prompts.val_size=2",
        "data.val_samples_per_prompt=1",
        "rollout.max_response_tokens=48",
        "rollout.progress=false",
        f"reward.sandbox.uid_base={UID_BASE}",
        "reward.sandbox.workers=2",
    )
    summary = run(cfg)
    assert summary["steps"] == 2 and (tmp_path / "hf_policy" / "model.safetensors").is_file()
    events = EventAccumulator(str(tmp_path / "tensorboard"))  # all event files of the run
    events.Reload()
    counts = [
        sum(events.Scalars(f"code/{o}")[k].value for o in ("passed", "failed", "timeout", "crashed")) for k in range(2)
    ]
    assert counts == [8.0, 8.0]  # 2 prompts x 4 rollouts per step, each run once in the sandbox
    rewards = [e.value for e in events.Scalars("reward/all")]
    passed = [events.Scalars("code/passed")[k].value for k in range(2)]
    assert rewards == [pytest.approx(p / 8) for p in passed]


def test_a_sandbox_failure_is_no_reward_not_a_zero(tmp_path, humaneval_items):
    box = Sandbox(workers=1, uid_base=UID_BASE, tmp_dir=str(tmp_path))
    box.isolation()  # the self-check passes
    box.tmp_dir = str(tmp_path / "gone")  # then the disk goes away: no folder for the next programs
    reward = CodeReward(box)
    item = humaneval_items["HumanEval/0"]
    rewards = score_rewards(reward, ["```python\n" + item.reference + "```"] * 2, [item] * 2)
    assert len(rewards) == 2 and all(math.isnan(r) for r in rewards)  # missing: no training signal
    assert reward.metrics() == {
        "code/passed": 0.0,
        "code/failed": 0.0,
        "code/timeout": 0.0,
        "code/crashed": 0.0,
        "code/sandbox_error": 2.0,
        "code/unbounded_check": 0.0,
    }
