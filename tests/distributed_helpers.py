"""Running ``mintrl-train`` on two CPU processes (gloo) for tests/integration/test_ddp.py and
test_fsdp.py, with the ddp_recorder callback, under tests/hang_guard.py (a hang fails, naming each
rank's last collective); and the single-process step they are compared with."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from hang_guard import run_guarded
from hydra import compose, initialize_config_dir

from mintrl.build.components import build_components
from mintrl.core.batch import concat_batches
from mintrl.objective.aggregation import step_totals

TESTS = Path(__file__).resolve().parent  # tests/: its helper modules (ddp_recorder, resume_helpers)
CONFIG_DIR = str(TESTS.parent / "configs")
COMMON = [
    "trainer.max_steps=1",
    "validate_at_start=false",
    "data.prompts_per_step=4",  # prompts per optimizer step on both ranks together: 2 per rank
    "data.prompts.val_size=4",
    "rollout.max_response_tokens=16",
    "rollout.chunk_size=8",
    "rollout.continuation_len=8",
    # SGD: the update is lr x the (clipped) gradient, so equal weights mean equal gradients (Adam's
    # first step is ~lr x sign(gradient) and would hide a wrong gradient scale)
    # and no clipping, which would rescale a wrongly scaled gradient back to the same norm
    "module.optimizer._target_=torch.optim.SGD",
    "module.optimizer.lr=0.5",
    "module.max_grad_norm=null",
    # the exact fp32 path on both sides (the bf16 defaults would compare two roundings)
    "trainer.precision=32-true",
    "sampler.dtype=fp32",
]


def distributed_command(tmp_path: Path, trainer: str, *overrides: str) -> list[str]:
    """The command line of ``mintrl-train`` with ``trainer=<trainer>`` on 2 CPU processes (gloo),
    output in ``tmp_path / "run"``, the ddp_recorder callback (folder ``tmp_path / "record"``) and
    every rank's collectives logged (:class:`hang_guard.CollectiveLog`, in ``tmp_path /
    "collectives"``), then ``overrides``."""
    return [
        sys.executable,
        "-m",
        "mintrl.cli.train",
        f"trainer={trainer}",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        f"paths.output_dir={tmp_path / 'run'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        "+callbacks.record._target_=ddp_recorder.Recorder",
        f"+callbacks.record.out={tmp_path / 'record'}",
        "+callbacks.collectives._target_=hang_guard.CollectiveLog",
        f"+callbacks.collectives.out={tmp_path / 'collectives'}",
        *overrides,
    ]


def distributed_run(
    tmp_path: Path, trainer: str, *overrides: str, common: tuple[str, ...] | list[str] = COMMON, timeout_s: float = 900
) -> Path:
    """Run :func:`distributed_command` with ``common + overrides`` to its end; returns the
    recorder's folder.

    Raises:
        AssertionError: the run failed (its stderr), or did not finish within ``timeout_s`` (a
            hang: each rank's last collective is named).
    """
    cmd = distributed_command(tmp_path, trainer, *common, *overrides)
    done = run_guarded(cmd, tmp_path / "collectives", timeout_s, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    return tmp_path / "record"


def single_process_step(tmp_path: Path, batches, max_grad_norm: float | None = None, *overrides: str):
    """The policy after one SGD step (lr 0.5, as COMMON) of a single process on the union of
    ``batches`` with the config ``COMMON + overrides``, clipped to ``max_grad_norm``; returns
    ``(policy, initial state, unclipped gradient norm)``."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.output_dir={tmp_path / 'single'}", *COMMON, *overrides])
    c = build_components(cfg, trainer=False)
    module, policy = c.module, c.context.policy
    module.objective.setup(policy)
    union = concat_batches(batches)
    module.objective.prepare(union, module.frozen_logprobs)
    module.accumulate(union, step_totals(union.loss_mask))
    initial = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    params = [p for p in policy.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm is not None else float("inf"))
    torch.optim.SGD(params, lr=0.5).step()
    return policy, initial, float(norm)
