"""Evaluation: CHAMP and hub benchmark sources, benchmark configs, and ``mintrl-eval`` on the embedded
model (base, HF folder and Lightning checkpoint give the same numbers)."""

from __future__ import annotations

import json
import os

import hydra
import pytest
import torch
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.cli.keywords import main as keywords_main
from mintrl.data import ChampPrompts, HubPrompts
from mintrl.eval.evaluate import evaluate
from mintrl.model import embedded_smollm2
from mintrl.reward import MathVerifyReward


def test_champ_answerable_subset():
    rows = ChampPrompts().rows()
    assert len(rows) == 129  # of 270 in v0: answers that are one gradable expression
    assert {k: v for k, v in rows[0].items() if k != "solution"} == {
        "id": "P_Combinatorics_1",
        "question": rows[0]["question"],
        "answer": "239",
    }
    # CHAMP's worked solution steps, closed by the answer tag (issue 22: the guide's reference solution)
    assert rows[0]["solution"].startswith("Let x_n, y_n, z_n be the number of length-n strings that end")
    assert rows[0]["solution"].endswith("0=239 such strings.\n<answer>239</answer>")
    assert all(r["solution"] for r in rows)
    assert all("or equivalently" not in r["answer"] and r["answer"] not in ("Yes", "No") for r in rows)


@pytest.mark.slow  # 23 s (the datasets library and its offline hub check)
def test_hub_benchmark_offline_is_a_clear_error_and_a_local_copy_loads(tmp_path, monkeypatch, tokenizer):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="needs the Hugging Face hub .* or a local copy"):
        HubPrompts("openai/gsm8k", name="main", split="test", question_field="question", answer_field="answer").rows()
    local = tmp_path / "gsm8k_test.jsonl"
    local.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
                {"question": "Half of 10?", "answer": "#### 5"},
            ]
        )
    )
    prompts = HubPrompts(str(local), question_field="question", answer_field="answer", answer_pattern=r"####\s*(.+)$")
    items = prompts.build("val", tokenizer)
    assert [(i.question, i.reference) for i in items] == [
        ("Tom has 3 apples and buys 4. How many?", "7"),
        ("Half of 10?", "5"),
    ]
    assert MathVerifyReward()(["<answer>7</answer>", "<answer>6</answer>"], items) == [1.0, 0.0]
    with pytest.raises(ValueError, match="row 0: field 'problem' is missing"):
        HubPrompts(str(local)).rows()


def _eval_cfg(tmp_path, ckpt_path, name):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            "eval",
            overrides=[
                f"ckpt_path={ckpt_path}",
                "n=4",
                "ks=[1,2,4]",
                "limit=6",
                "max_response_tokens=24",
                f"paths.output_dir={tmp_path / name}",
                "seed=3",
            ],
        )


@pytest.mark.slow  # 18 s on 2 cores; the main job's test checks its exported HF folder
def test_mintrl_eval_gives_the_same_pass_at_k_for_base_hf_folder_and_lightning_checkpoint(tmp_path, capsys):
    base = evaluate(_eval_cfg(tmp_path, "base", "base"))
    assert base["problems"] == 6 and base["n"] == 4 and base["benchmark"] == "basic_arithmetic_heldout"
    p = base["pass_at_k"]
    assert 0.0 < p[1] <= p[2] <= p[4] < 1.0  # seed 3: 1/3, 5/9, 5/6 on these 6 problems
    saved = json.loads((tmp_path / "base" / "eval.json").read_text())
    assert saved["pass_at_k"] == {str(k): v for k, v in p.items()}
    assert "| basic_arithmetic_heldout | base | 6 | 4 |" in (tmp_path / "base" / "eval.md").read_text()
    samples = [json.loads(line) for line in (tmp_path / "base" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 24 and sorted({s["problem"] for s in samples}) == list(range(6))
    assert sum(s["reward"] for s in samples) / 24 == pytest.approx(base["mean_reward"])
    # with n = k = 4, a problem's pass@4 is 1 exactly when one of its 4 samples is right
    solved = sum(any(s["reward"] == 1.0 for s in samples if s["problem"] == q) for q in range(6))
    assert p[4] == pytest.approx(solved / 6)
    loaded = embedded_smollm2()  # the same weights as an HF folder and as a mintrl Lightning checkpoint
    folder = tmp_path / "hf"
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    ckpt = tmp_path / "policy.ckpt"
    torch.save({"state_dict": {f"policy.{k}": v for k, v in loaded.model.state_dict().items()}}, ckpt)
    for path, name in ((folder, "from_hf"), (ckpt, "from_ckpt")):
        other = evaluate(_eval_cfg(tmp_path, path, name))
        assert other["pass_at_k"] == pytest.approx(p) and other["mean_reward"] == pytest.approx(base["mean_reward"])
    keywords_main([str(tmp_path / "base" / "samples.jsonl"), str(tmp_path / "from_hf" / "samples.jsonl")])
    table = capsys.readouterr().out
    assert "| wait |" in table and "| we will |" in table
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        evaluate(_eval_cfg(tmp_path, tmp_path / "missing.ckpt", "missing"))


def test_every_benchmark_config_composes():
    names = sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, "benchmark")))
    assert {
        "heldout",
        "arithmetic_hard",
        "gsm_symbolic",
        "humaneval",
        "champ",
        "gsm8k",
        "math500",
        "aime24",
        "livecodebench",
        "humaneval_plus",
        "mbpp_plus",
        "sql_heldout",
        "python_tool_heldout",
        "shell_heldout",
    } <= set(names)
    from mintrl.build.config_checks import check_config

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for name in names:
            # an environment benchmark: the training run's data, no reward
            agent = {
                "sql_heldout": ("sql_lookup", "SqlEnvironment"),
                "python_tool_heldout": ("python_tool_arithmetic", "PythonToolEnvironment"),
                "shell_heldout": ("shell_files", "ShellEnvironment"),
            }.get(name)
            extra = [f"data@train_data={agent[0]}"] if agent else []
            cfg = compose("eval", overrides=[f"benchmark={name}", "ckpt_path=base", *extra])
            check_config(cfg)
            assert cfg.benchmark.name and cfg.data.prompts.source._target_
            if agent:
                assert cfg.reward is None and cfg.env._target_.endswith(agent[1])
                assert cfg.rollout._target_.endswith("EpisodeRollout") and cfg.rollout.max_response_tokens == 256
            else:
                assert cfg.reward._target_ and cfg.get("env") is None and cfg.rollout.max_response_tokens == 64


def test_heldout_benchmark_follows_the_training_task():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        default = compose("eval", overrides=["ckpt_path=base"])
        gsm = compose("eval", overrides=["ckpt_path=base", "data@train_data=gsm_symbolic"])
    assert default.benchmark.name == "basic_arithmetic_heldout"
    assert default.benchmark.prompts.task_kwargs == default.train_data.prompts.task_kwargs
    assert (default.benchmark.prompts.val_seed, default.benchmark.prompts.val_size) == (2, 64)
    assert gsm.benchmark.name == "gsm_symbolic_heldout" and gsm.benchmark.prompts.task == "gsm_symbolic"
    assert gsm.benchmark.prompts.task_kwargs is None  # not basic_arithmetic's kwargs merged in


def test_gsm_symbolic_data_and_benchmark_build_their_prompts(tokenizer):
    """`data=gsm_symbolic` and `benchmark=gsm_symbolic` once inherited basic_arithmetic's task_kwargs
    (an empty dict merges into the parent's) and reasoning-gym refused `min_terms`."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        train = compose(
            "train", overrides=["data=gsm_symbolic", "data.prompts.train_size=2", "data.prompts.val_size=2"]
        )
        bench = compose("eval", overrides=["ckpt_path=base", "benchmark=gsm_symbolic", "benchmark.prompts.val_size=2"])
    for node in (train.data.prompts, bench.benchmark.prompts):
        prompts = hydra.utils.instantiate(node)
        items = prompts.build("val", tokenizer)
        assert prompts.task == "gsm_symbolic" and prompts.task_kwargs == {}
        assert len(items) == 2 and all(len(item.prompt_ids) > 20 for item in items)


def test_hub_code_benchmark_from_a_local_copy_runs_in_the_sandbox(tmp_path, tokenizer):
    from mintrl.data import CodePrompts
    from mintrl.reward import CodeReward
    from mintrl.sandbox import Sandbox

    raw = [json.loads(line) for line in __import__("gzip").open(CodePrompts().path, "rt")][:2]  # HumanEval rows
    local = tmp_path / "humaneval_plus_copy.jsonl"
    local.write_text("\n".join(json.dumps(r) for r in raw))
    items = HubPrompts(str(local), code=True).build("val", tokenizer)
    assert [i.entry["task_id"] for i in items] == [
        "HumanEval/0",
        "HumanEval/1",
    ] and "```python code block" in tokenizer.decode(items[0].prompt_ids)
    reward = CodeReward(Sandbox(workers=1, uid_base=62000))
    assert reward(["```python\n" + i.reference + "```" for i in items], items) == [1.0, 1.0]
    assert reward(["```python\nreturn None\n```"] * 2, items) == [0.0, 0.0]


HARD_TASKS = {  # data config -> (task_kwargs, terms, digits per term)
    "arithmetic_3terms": (dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1), 3, 1),
    "arithmetic_2digit": (dict(min_terms=2, max_terms=2, min_digits=2, max_digits=2), 2, 2),
}


@pytest.mark.parametrize("name", sorted(HARD_TASKS))
def test_hard_arithmetic_data_and_heldout_benchmark_build_their_prompts(name, tokenizer):
    """`data=arithmetic_3terms` / `arithmetic_2digit` and the held-out benchmark that follows them
    (`data@train_data=<name> benchmark=heldout`): exactly the intended task_kwargs (a partial dict would
    merge into basic_arithmetic's), and every question has that many terms of at most that many digits."""
    import re

    kwargs, terms, digits = HARD_TASKS[name]
    intended = {**kwargs, "operators": ["+"], "allow_parentheses": False, "allow_negation": False}
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        train = compose("train", overrides=[f"data={name}", "data.prompts.train_size=4"])
        bench = compose("eval", overrides=["ckpt_path=base", f"data@train_data={name}", "benchmark=heldout"])
    assert bench.benchmark.name == "basic_arithmetic_heldout" and bench.benchmark.prompts.val_size == 64
    for node, split in ((train.data.prompts, "train"), (bench.benchmark.prompts, "val")):
        prompts = hydra.utils.instantiate(node)
        assert prompts.task == "basic_arithmetic" and prompts.task_kwargs == intended
        items = prompts.build(split, tokenizer)
        assert len(items) == (4 if split == "train" else 64)
        for item in items:
            numbers = re.findall(r"\d+", item.question)
            # reasoning-gym draws each term uniformly from 0..10**digits inclusive (digits: an upper bound)
            assert len(numbers) == terms and all(0 <= int(n) <= 10**digits for n in numbers), item.question
            assert item.question.count("+") == terms - 1 and int(item.reference) == sum(map(int, numbers))
