"""Sharded checkpoints (``trainer=fsdp``, ``state_dict_type=sharded``): a ``last.ckpt/`` folder is
resumed (auto and ``ckpt_path``) and evaluated (``mintrl-eval``), written atomically (a kill
mid-save leaves the previous one), and holds every rank's data-module state, restored to its own
rank, so ranks draw different sampling noise and each continues its own after a resume.

The 2-rank pieces run tests/sharded_checkpoint_worker.py under torchrun (gloo, a tiny Llama, ~30 s
on 2 cores); the whole path through ``mintrl-train trainer=fsdp`` is the slow
tests/integration/test_sharded_resume.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hang_guard import describe
from hydra import compose, initialize_config_dir

TESTS = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(TESTS.parent / "configs")


def _worker(mode: str, out: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run(
        [*cmd, str(TESTS / "sharded_checkpoint_worker.py"), mode, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # the worker's collectives time out after 120 s and name the rank and operation
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The ``save`` phase: ``last.ckpt/`` with weights A at step 2, then a second save killed when
    its shards were written and their index was next."""
    out = tmp_path_factory.mktemp("sharded")
    done = _worker("save", out)
    assert done.returncode != 0 and "the second save was not interrupted" not in done.stderr, done.stderr[-4000:]
    missing = [r for r in (0, 1) if not (out / f"save_rank{r}.json").exists()]
    assert not missing, (
        f"rank(s) {missing} failed before the save:\n{describe(out / 'collectives_save')}\n{done.stderr[-4000:]}"
    )
    ranks = [json.loads((out / f"save_rank{r}.json").read_text()) for r in (0, 1)]
    return out, ranks


@pytest.fixture(scope="module")
def resumed(saved):
    """The ``resume`` phase on the folder the killed save left."""
    out, _ = saved
    done = _worker("resume", out)
    assert done.returncode == 0, f"{describe(out / 'collectives_resume')}\n{done.stderr[-4000:]}"
    return [json.loads((out / f"resume_rank{r}.json").read_text()) for r in (0, 1)]


def _train_cfg(out: Path, *overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=[f"paths.output_dir={out}", *overrides])


def test_ranks_draw_different_sampling_noise(saved):
    _, ranks = saved
    assert ranks[0]["noise_before"] != ranks[1]["noise_before"]
    assert ranks[0]["noise_after"] != ranks[1]["noise_after"]


def test_a_kill_during_a_sharded_save_leaves_the_previous_checkpoint(saved, resumed):
    out, _ = saved
    for found in resumed:
        assert found["global_step"] == 2  # the first save's metadata ...
        assert found["weights_equal_a"]  # ... and its weights, not the killed save's shards
    # the resumed save replaced last.ckpt and removed the killed save's temporary folder
    assert torch.load(out / "last.ckpt" / "meta.pt", weights_only=True)["global_step"] == 3
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".last.ckpt")) == []


def test_every_rank_gets_its_own_data_module_state_back(saved, resumed):
    _, ranks = saved
    for r, found in enumerate(resumed):
        assert found["rollout_state"] == {"rank": r, "calls": 2}
        # each rank continues its own noise: the draws the straight run made after the save
        assert found["noise_after"] == ranks[r]["noise_after"]


def test_auto_resume_and_ckpt_path_take_a_sharded_folder(saved):
    from mintrl.build.run import resume_checkpoint

    out, _ = saved
    run = out / "run"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    folder = run / "checkpoints" / "last.ckpt"
    if not folder.exists():
        folder.symlink_to(out / "last.ckpt", target_is_directory=True)
    assert resume_checkpoint(_train_cfg(run)) == str(folder)
    assert resume_checkpoint(_train_cfg(run, "ckpt_path=last")) == str(folder)
    assert resume_checkpoint(_train_cfg(run, f"ckpt_path={out / 'last.ckpt'}")) == str(out / "last.ckpt")


def test_auto_resume_ignores_an_incomplete_folder_and_finds_one_set_aside(tmp_path):
    """A folder without its index (a save killed mid-write, or a stray folder) is no checkpoint; a
    save killed between moving the previous ``last.ckpt`` aside and renaming the new one in left the
    previous one complete beside it, and that is resumed."""
    from mintrl.build.run import resume_checkpoint

    ckpts = tmp_path / "checkpoints"
    (ckpts / "last.ckpt").mkdir(parents=True)
    (ckpts / "last.ckpt" / "meta.pt").write_bytes(b"x")  # no .metadata: incomplete
    assert resume_checkpoint(_train_cfg(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="ckpt_path=last: no checkpoint at"):
        resume_checkpoint(_train_cfg(tmp_path, "ckpt_path=last"))
    aside = ckpts / ".last.ckpt.old-123"
    aside.mkdir()
    (aside / "meta.pt").write_bytes(b"x")
    (aside / ".metadata").write_bytes(b"x")
    (ckpts / "last.ckpt").rename(ckpts / ".last.ckpt.tmp-123")
    assert resume_checkpoint(_train_cfg(tmp_path)) == str(aside)


def test_mintrl_eval_loads_the_policy_from_a_sharded_folder(saved):
    from conftest import tiny_llama

    from mintrl.eval.evaluate import load_lightning_policy, use_checkpoint

    out, _ = saved
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("eval", overrides=[f"ckpt_path={out / 'last.ckpt'}"])
    model_before = dict(cfg.model)
    assert use_checkpoint(cfg) == "lightning"  # not a Hugging Face folder
    assert dict(cfg.model) == model_before  # the model config builds the architecture
    policy = tiny_llama(vocab=96)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    load_lightning_policy(policy, str(out / "last.ckpt"))
    weights = torch.load(out / "weights_a.pt", weights_only=True)
    state = policy.state_dict()
    assert sorted(state) == sorted(weights)
    for k, v in weights.items():
        assert torch.equal(state[k], v), k
    with pytest.raises(ValueError, match="missing"):  # another architecture: named, not half-loaded
        load_lightning_policy(tiny_llama(vocab=96, attention_bias=True), str(out / "last.ckpt"))
