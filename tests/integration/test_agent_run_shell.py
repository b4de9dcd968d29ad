"""The shell agent row end to end on the embedded model (issue 21): a 2-step MInTRL-Const training run of
`method=mintrl_const preset=cpu_shell` (episodes in sandboxed shells, shell judge, rule intervention,
environment rewards), and no sandbox process left behind."""

import pytest
from hydra import compose, initialize_config_dir
from shell_helpers import sandbox_processes

from mintrl.analysis.rollouts import read_records, record_files
from mintrl.analysis.tensorboard import load_scalars
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run

UIDS = range(65300, 65310)  # the run's shell slots and judge uid (not the defaults: other runs use 64000+)


@pytest.mark.slow  # 12.7 min measured on the shared 2-core machine at load 8 (the model dominates)
def test_two_step_shell_mintrl_const_run(tmp_path):
    overrides = [
        "method=mintrl_const",
        "preset=cpu_shell",
        "trainer.max_steps=2",
        "callbacks=sweep",
        "callbacks.hf_export=null",
        f"paths.output_dir={tmp_path}",
        "env.uid_base=65300",
        "env.max_shells=8",
        "judge.uid=65309",
        "data.prompts_per_step=1",  # 1 prompt x (2 control + 2 semi-on-policy) episodes of up to 2 short turns
        "data.prompts.val_size=2",
        "data.val_samples_per_prompt=1",
        "rollout.max_turns=2",
        "rollout.max_action_tokens=24",
        "rollout.continuation_len=40",
        "rollout.max_response_tokens=160",
        "rollout.progress=false",
        "seed=0",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    summary = run(cfg)
    assert summary["steps"] == 2
    values = {tag: [v for _, v in points] for tag, points in load_scalars(tmp_path).items()}
    assert values["rollout/generated_at_step"] == [0.0, 1.0]
    for tag in ("episode/turns", "episode/env_seconds", "train/loss"):
        assert len(values[tag]) == 2, tag
    assert all(1.0 <= t <= 2.0 for t in values["episode/turns"])
    files = record_files(tmp_path, "train")
    assert [step for step, _ in files] == [0, 1]
    for _, path in files:
        records = read_records(path)
        assert len(records) == 4 and sum(not r["control"] for r in records) == 2
        for r in records:
            assert r["reward"] in (0.0, 1.0)
            assert all(t["kind"] in ("run", "run_error", "answer", "invalid") for t in r["turns"])
        assert all(r["tokens"]["intervention"] == 0 for r in records if r["control"])
    assert sandbox_processes(UIDS) == []
