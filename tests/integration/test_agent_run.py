"""The SQL agent row end to end on the embedded model (issue 20): a 2-step MInTRL-Const training run of
`method=mintrl_const preset=cpu_sql` (episodes, SQL judge, rule intervention, environment rewards)
and `mintrl-eval benchmark=sql_heldout` of the base policy."""

import json

import pytest
from hydra import compose, initialize_config_dir

from mintrl.analysis.rollouts import read_records, record_files
from mintrl.analysis.tensorboard import load_scalars
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.eval.evaluate import evaluate

SMALL = [  # 1 prompt x (2 control + 2 semi-on-policy) episodes of up to 2 short turns
    "data.prompts_per_step=1",
    "data.prompts.val_size=2",
    "data.val_samples_per_prompt=1",
    "rollout.max_turns=2",
    "rollout.max_action_tokens=20",
    "rollout.continuation_len=40",
    "rollout.max_response_tokens=128",
    "rollout.progress=false",
    "seed=0",
]


@pytest.mark.slow  # 28 s on 2 cores; the default run evaluates held-out SQL tasks end to end
def test_two_step_sql_mintrl_const_run(tmp_path):
    overrides = [
        "method=mintrl_const",
        "preset=cpu_sql",
        "trainer.max_steps=2",
        "callbacks=sweep",
        "callbacks.hf_export=null",
        f"paths.output_dir={tmp_path}",
        *SMALL,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    summary = run(cfg)
    assert summary["steps"] == 2
    scalars = load_scalars(tmp_path)
    values = {tag: [v for _, v in points] for tag, points in scalars.items()}
    # each batch from the weights it trains, and every episode of a step counted
    assert values["rollout/generated_at_step"] == [0.0, 1.0]
    for tag in ("episode/turns", "episode/env_seconds", "episode/observation_tokens", "train/loss"):
        assert len(values[tag]) == 2, tag
    assert all(1.0 <= t <= 2.0 for t in values["episode/turns"])
    assert all(0.0 <= s <= 1.0 for s in values["episode/success"])
    assert len(values["val/reward"]) == 2  # step 0 and the end
    # the records hold whole episodes: 4 per step, tokens by provenance, turns with their kinds
    files = record_files(tmp_path, "train")
    assert [step for step, _ in files] == [0, 1]
    for step, path in files:
        records = read_records(path)
        assert len(records) == 4
        assert sum(not r["control"] for r in records) == 2
        for r in records:
            assert r["reward"] in (0.0, 1.0)
            assert 1 <= len(r["turns"]) <= 2
            assert all(t["kind"] in ("query", "query_error", "answer", "invalid") for t in r["turns"])
            if len(r["turns"]) == 2:  # an observation turn between the two actions
                assert r["tokens"]["environment"] > 0
        # the control episodes never see the judge; intervention tokens only in semi-on-policy ones
        assert all(r["tokens"]["intervention"] == 0 for r in records if r["control"])


def test_mintrl_eval_on_held_out_sql_tasks(tmp_path):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "eval",
            overrides=[
                "ckpt_path=base",
                "benchmark=sql_heldout",
                "data@train_data=sql_lookup",
                "n=2",
                "ks=[1,2]",
                "limit=3",
                "rollout.max_turns=2",
                "rollout.max_action_tokens=24",
                f"paths.output_dir={tmp_path}",
                "seed=0",
            ],
        )
    assert cfg.rollout.max_response_tokens == 256  # the benchmark's episode budget, not eval's 64
    result = evaluate(cfg)
    assert result["benchmark"] == "sql_heldout" and result["problems"] == 3 and result["n"] == 2
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6 and {s["reward"] for s in samples} <= {0.0, 1.0}
    assert result["pass_at_k"][1] == pytest.approx(sum(s["reward"] for s in samples) / 6)
    solved = sum(any(s["reward"] == 1.0 for s in samples if s["problem"] == q) for q in range(3))
    assert result["pass_at_k"][2] == pytest.approx(solved / 3)
