"""Rollouts as text on real runs of the embedded model: a 2-step training run writes a few rollouts of
each step as markdown to TensorBoard (read back from the event file), and ``mintrl-eval
benchmark=sql_heldout`` keeps each episode's turns apart in ``samples.jsonl`` and counts episodes in
its progress bar (issue 40, items 1 and 4)."""

from __future__ import annotations

import json
import math
import re

import pytest
from hydra import compose, initialize_config_dir
from records_helpers import INTERVENING, RECORDS_ONLY
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

from mintrl.analysis.rollouts import read_records
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.eval.evaluate import evaluate
from mintrl.rollout.markdown import pick_rows, step_markdown
from mintrl.rollout.records import record_path
from mintrl.training.callbacks.rollout_text import TAG


def text_summaries(folder) -> dict[int, str]:
    """``{step: markdown}`` of the rollout text tag in the TensorBoard event files under ``folder``
    (the writer's ``add_text`` stores it as a string tensor of the text plugin, ``<tag>/text_summary``)."""
    acc = EventAccumulator(str(folder), size_guidance={TENSORS: 0})
    acc.Reload()
    assert acc.Tags()["tensors"] == [f"{TAG}/text_summary"]
    events = acc.Tensors(f"{TAG}/text_summary")
    assert all(e.tensor_proto.string_val and len(e.tensor_proto.string_val) == 1 for e in events)
    return {e.step: e.tensor_proto.string_val[0].decode("utf-8") for e in events}


@pytest.mark.slow  # 16 s; tests/unit/test_records_viewer.py and the SQL eval run here cover the rendering
def test_two_step_run_logs_the_picked_rollouts_of_each_step_as_markdown(tmp_path):
    overrides = [
        f"paths.output_dir={tmp_path}",
        "trainer.max_steps=2",
        "validate_at_start=false",
        "data.prompts_per_step=2",
        "data.prompts.val_size=2",
        "data.val_samples_per_prompt=1",
        "rollout.max_response_tokens=16",
        "rollout.chunk_size=8",
        "rollout.continuation_len=8",
        "rollout.progress=false",
        *INTERVENING,  # the rule judge revises chunks at seed 3: there are intervention tokens
        *RECORDS_ONLY,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    assert (cfg.callbacks.rollout_text.rollouts, cfg.callbacks.rollout_text.seed) == (4, 3)
    run(cfg)
    texts = text_summaries(tmp_path / "tensorboard")
    assert sorted(texts) == [0, 1]
    picked = {}
    for step in (0, 1):
        records = read_records(record_path(tmp_path / "rollouts", "train", step))
        assert len(records) == 8  # 2 prompts x (2 control + 2 semi-on-policy)
        rewards = [math.nan if r["reward"] is None else r["reward"] for r in records]
        intervened = [r["tokens"]["intervention"] > 0 for r in records]
        picked[step] = rows = pick_rows(rewards, intervened, 4, 3, step)
        # seed 3: one row with intervention tokens per step (row 7, then row 3), always among the picks
        assert [i for i in range(8) if intervened[i]] == [[7], [3]][step] and intervened.index(True) in rows
        # the text is the rollout records' rows rendered: the same decoding, rewards and advantages
        assert texts[step] == step_markdown([records[i] for i in rows], "train", step, 8)
        assert texts[step].startswith(f"train step {step}: 4 of 8 rollouts\n\n---\n\n#### row {rows[0]}, group ")
        assert texts[step].count("#### row ") == 4
    # step 1's row 3 is also its one rewarded row
    assert picked == {0: [0, 1, 4, 7], 1: [0, 1, 3, 6]}
    assert "#### row 7, group 1, semi-on-policy, truncated" in texts[0] and "[[" in texts[0]
    assert "review 1: revise at step 0, cut at token 8" in texts[0]


def test_sql_eval_samples_keep_the_turns_apart_and_the_bar_counts_episodes(tmp_path, capfd):
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
    result = evaluate(cfg)
    err = capfd.readouterr().err
    assert result["problems"] == 3 and result["n"] == 2
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    records = read_records(record_path(tmp_path / "rollouts", "val", 0))  # the same episodes, in the same order
    assert len(samples) == len(records) == 6
    for sample, record in zip(samples, records):
        expected = []
        for turn in record["turns"]:
            expected.append({"role": "assistant", "kind": turn["kind"], "text": turn["action"]})
            if turn["observation"]:
                expected.append({"role": "environment", "text": turn["observation"]})
        assert sample["turns"] == expected and 1 <= len(record["turns"]) <= 2
        assert sample["turns"][0]["role"] == "assistant"
        assert sample["response"] == "".join(t["text"] for t in expected if t["role"] == "assistant")
    assert any(t["role"] == "environment" for s in samples for t in s["turns"])
    # the bar counts this run's 6 episodes (3 problems x 2) from 0, not Lightning's 1 validation batch
    counts = [int(m) for m in re.findall(r"(\d+)/6 \[", err)]
    assert counts[0] == 0 and counts[-1] == 6 and counts == sorted(counts), err[-2000:]
    assert "episode" in err and "Validation DataLoader" not in err
