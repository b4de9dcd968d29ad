"""The memory plan (mintrl.build.memory_plan): hand-computed bytes per part for the embedded
SmolLM2-135M and the paper's Qwen3 models, parameter counts equal to the transformers models' (on the
meta device: no weights), which component holds which model, the refusal of a plan over the device
before any model loads (the loaders patched to fail), CPU runs printed and never refused, and
``mintrl-train --plan`` printing the plan of a paper row without loading a model."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

import mintrl.build.components as components
import mintrl.model.loading as loading
from mintrl.build.config import CONFIG_DIR
from mintrl.build.memory_plan import (
    GIB,
    KNOWN_ARCHITECTURES,
    MemoryPlanError,
    activation_bytes,
    architecture_from_config,
    check_memory_plan,
    device_memory,
    layer_activation_bytes,
    lora_parameter_count,
    memory_plan,
    parameter_count,
    resolve_architecture,
)
from mintrl.intervention.rule import RuleIntervention
from mintrl.intervention.self_privileged import SelfPrivilegedIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.judge.self_privileged import SelfPrivilegedJudge
from mintrl.objective.grpo import GRPO
from mintrl.objective.opd import OnPolicyDistillation
from mintrl.objective.regression import AdvantageRegression

SMOLLM2 = KNOWN_ARCHITECTURES["HuggingFaceTB/SmolLM2-135M-Instruct"]
QWEN3_1_7B = KNOWN_ARCHITECTURES["Qwen/Qwen3-1.7B"]
QWEN3_4B = KNOWN_ARCHITECTURES["Qwen/Qwen3-4B-Instruct-2507"]
ROOT = Path(CONFIG_DIR).parent


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def _parts(plan) -> dict[str, int]:
    return {p.name: p.bytes for p in plan.parts}


def _meta_numel(config) -> int:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


# -- architecture numbers and parameter counts -----------------------------------------------------


def test_parameter_counts_by_hand():
    # SmolLM2-135M: embedding 49,152 x 576 = 28,311,552; per layer q 576x576 + k, v 576x192 each + o 576x576
    # + MLP 3 x 576 x 1,536 + 2 norms x 576 = 3,540,096; x 30 layers + final norm 576 (tied head)
    assert parameter_count(SMOLLM2) == 28_311_552 + 30 * 3_540_096 + 576 == 134_515_008
    # Qwen3-1.7B: 151,936 x 2,048 + 28 x (2048x2048 + 2 x 2048x1024 + 2048x2048 + 3 x 2048x6144 + 2 x 2048 + 2 x 128)
    assert parameter_count(QWEN3_1_7B) == 311_164_928 + 28 * 50_336_000 + 2048 == 1_720_574_976
    assert parameter_count(QWEN3_4B) == 388_956_160 + 36 * 100_930_816 + 2560 == 4_022_468_096


@pytest.mark.parametrize(
    "config",
    [
        LlamaConfig(**{k: getattr(SMOLLM2, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings")}),
        Qwen3Config(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                    head_dim=128, intermediate_size=6144, vocab_size=151936, tie_word_embeddings=True),
        LlamaConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, vocab_size=300, tie_word_embeddings=False, attention_bias=True),
        Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, vocab_size=300, tie_word_embeddings=False),
    ],
    ids=["smollm2-135m", "qwen3-1.7b", "llama-untied-bias", "qwen2-qkv-bias"],
)  # fmt: skip
def test_parameter_count_equals_the_transformers_model_built_on_the_meta_device(config):
    assert parameter_count(architecture_from_config(config)) == _meta_numel(config)


def test_the_table_matches_the_embedded_model_and_a_local_folder_is_read(tmp_path):
    folder = loading.embedded_smollm2_folder()  # the converted GGUF's config.json
    assert architecture_from_config(json.loads((folder / "config.json").read_text())) == SMOLLM2.__class__(
        **{**SMOLLM2.__dict__, "source": ""}
    )
    assert resolve_architecture(None) is SMOLLM2 and resolve_architecture("embedded") is SMOLLM2
    local = tmp_path / "model"
    local.mkdir()
    Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                intermediate_size=96, vocab_size=300).save_pretrained(local)  # fmt: skip
    arch = resolve_architecture(str(local))
    assert (arch.hidden_size, arch.head_dim, arch.qk_norm, arch.source) == (64, 16, True, str(local / "config.json"))
    assert resolve_architecture("nobody/not-a-cached-model-xyz") is None  # unknown: counted as unknown, no download


def test_lora_parameter_count_of_the_paper_adapter():
    # r 64 on q, k, v, o, gate, up, down: 64 x (7 H + 2 q + 2 kv + 3 I) per layer = 64 x 38,912; x 28 layers
    assert lora_parameter_count(QWEN3_1_7B, 64) == 28 * 64 * 38_912 == 69_730_304
    assert lora_parameter_count(QWEN3_1_7B, 16, ["q_proj", "v_proj"]) == 28 * 16 * ((2048 + 2048) + (2048 + 1024))


def test_activation_bytes_by_hand():
    # SmolLM2 under bf16-mixed (fp32 residual r = 4, compute w = 2), H 576, q 576, kv 192, I 1,536:
    # 2*4*576 + 2*2*576 + 2*(3*576 + 3*192) + 4*2*1536 = 4,608 + 2,304 + 4,608 + 12,288 = 23,808 per token and layer
    assert layer_activation_bytes(SMOLLM2, 4, 2) == 23_808
    assert layer_activation_bytes(QWEN3_1_7B, 4, 2) == 92_160
    final = (4 + 2) * 576
    assert activation_bytes(SMOLLM2, 10, 4, 2, checkpointing=False) == 10 * (30 * 23_808 + final)
    assert activation_bytes(SMOLLM2, 10, 4, 2, checkpointing=True) == 10 * (30 * 4 * 576 + 23_808 + final)


# -- which component holds which model --------------------------------------------------------------


def test_components_declare_the_models_they_take_from_the_context():
    assert GRPO.context_models({"kl_coef": 0.0}) == () and GRPO.context_models({"kl_coef": 1e-3}) == ((None, ""),)
    assert OnPolicyDistillation.context_models({"teacher": None}) == ((None, "float32"),)
    assert OnPolicyDistillation.context_models({"teacher": "T", "teacher_dtype": "bfloat16"}) == (("T", "bfloat16"),)
    assert AdvantageRegression.context_models({}) == ()
    for cls in (SelfPrivilegedJudge, SelfPrivilegedIntervention):
        assert cls.context_models({"teacher": None}) == ((None, "float32"),)
        assert cls.context_models({"teacher": "T", "teacher_dtype": "bfloat16"}) == (("T", "bfloat16"),)
    assert RuleJudge.context_models({}) == () and RuleIntervention.context_models({}) == ()


# -- whole plans, hand-computed ---------------------------------------------------------------------

SMALL = (
    "trainer.precision=bf16-mixed",
    "module.micro_batch_rows=2",
    "rollout.max_response_tokens=64",
    "sampler.dtype=fp32",
    "sampler.max_batch_size=8",
    "sampler.continuation_cache_mib=0",
)


def test_the_plan_of_the_embedded_model_by_hand():
    plan = memory_plan(_compose(*SMALL), device_bytes=8 * GIB)
    tokens = 2 * (512 + 64)  # module.micro_batch_rows x (data.prompts.max_prompt_tokens + rollout.max_response_tokens)
    parts = _parts(plan)
    assert parts == {
        "policy weights": 134_515_008 * 4,  # 538,060,032
        "gradients": 134_515_008 * 4,
        "optimizer state": 134_515_008 * 4 * 2,  # AdamW's two moments
        "activations": tokens * (30 * 23_808 + 6 * 576),  # no checkpointing: 826,785,792
        "LM-head block": 3 * 256 * 49_152 * 4,  # 150,994,944
        "HF sampler KV": 8 * 576 * (30 * 3 * 64 * 2 * 4),  # 8 rows x 576 tokens x 46,080 B/token = 212,336,640
    }
    assert plan.phase_bytes("update") == 538_060_032 * 4 + 826_785_792 + 150_994_944 == 3_130_020_864
    assert plan.phase_bytes("rollout") == 538_060_032 * 3 + 212_336_640
    assert plan.peak_phase == "update" and plan.peak_bytes == 3_130_020_864 and plan.fits  # + 2 GiB reserve < 8 GiB
    assert memory_plan(_compose(*SMALL), device_bytes=3_130_020_864 + 2 * GIB).fits  # exactly peak + 2 GiB reserve
    assert not memory_plan(_compose(*SMALL), device_bytes=3_130_020_864 + 2 * GIB - 1).fits
    with_ckpt = memory_plan(_compose(*SMALL, "module.gradient_checkpointing=true"), device_bytes=8 * GIB)
    assert _parts(with_ckpt)["activations"] == tokens * (30 * 4 * 576 + 23_808 + 6 * 576) == 111_034_368


def test_fsdp_divides_weights_gradients_and_optimizer_by_the_ranks():
    overrides = ("trainer=fsdp", "sampler=vllm", "trainer.devices=4", "module.micro_batch_rows=2")
    plan = memory_plan(_compose(*overrides, "rollout.max_response_tokens=64"), device_bytes=80 * GIB)
    parts = _parts(plan)
    assert parts["policy weights"] == 134_515_008 * 4 // 4 and parts["gradients"] == 134_515_008
    assert parts["optimizer state"] == 134_515_008 * 2
    assert parts["FSDP gathered units"] == 2 * 49_152 * 576 * 4  # the embedding is the largest unit, twice
    assert parts["activations"] == 2 * (512 + 64) * (30 * 23_808 + 6 * 576)  # activations are not sharded
    # the main job's whole mini-batch (8 prompts x 4 rollouts) split over 2 data-parallel ranks: 16 rows per rank
    ddp = memory_plan(_compose("trainer=ddp", "trainer.devices=2", "rollout.max_response_tokens=64"), 80 * GIB)
    assert _parts(ddp)["activations"] == 16 * (512 + 64) * (30 * 23_808 + 6 * 576)
    assert _parts(ddp)["policy weights"] == 134_515_008 * 4  # DDP keeps whole weights on every rank
    hf = _parts(memory_plan(_compose("trainer=fsdp", "sampler.dtype=fp32", "trainer.devices=4"), 80 * GIB))
    assert hf["HF sampling copy"] == 134_515_008 * 4  # the HF sampler's full fp32 copy on every rank


def test_the_paper_math_plan_by_hand():
    plan = memory_plan(_compose("experiment=paper/mintrl_const"), device_bytes=80 * GIB)
    parts, rows_tokens = _parts(plan), 4 * (2048 + 16384)
    assert parts["policy weights"] == parts["gradients"] == 1_720_574_976 * 4
    assert parts["activations"] == rows_tokens * (28 * 4 * 2048 + 92_160 + 6 * 2048)  # checkpointing on: 24.6 GB
    assert parts["vLLM engine"] == int(0.3 * 80 * GIB)  # its share, asleep during the update
    assert parts["teacher Qwen/Qwen3-4B-Instruct-2507"] == 4_022_468_096 * 2
    # 16 rows x (2,048 prompt + 4 x 512 + 3 x 64 reviewed + 16 verdict tokens) x 36 x 8 x 128 x 2 x 2 B; prefill
    # 16 x 4,304 tokens x 2 B x (2 x 2,560 + 3 x 9,728)
    assert parts["judge KV + prefill"] == 16 * 4304 * 147_456 + 16 * 4304 * 2 * (2 * 2560 + 3 * 9728)
    assert "step-0 copy" not in parts  # the teacher judges and intervenes; regression_const needs no reference
    # update: fp32 weights, gradients and two AdamW moments (4 x 4 B per parameter), activations, LM head, the teacher
    assert plan.phase_bytes("update") == 1_720_574_976 * 4 * 4 + parts["activations"] + parts["LM-head block"] + (
        4_022_468_096 * 2
    )
    assert plan.fits and plan.peak_phase == "intervention"


def test_the_step0_copy_is_counted_under_full_weights_and_not_under_lora():
    full = _parts(memory_plan(_compose("experiment=paper/grpo"), device_bytes=80 * GIB))
    assert full["step-0 copy"] == 1_720_574_976 * 4
    lora = memory_plan(_compose("experiment=paper/grpo", "preset=paper_math_lora_1gpu"), device_bytes=80 * GIB)
    assert "step-0 copy" not in _parts(lora) and any("adapter off" in n for n in lora.notes)
    # the LoRA policy: bf16 base + fp32 adapter; gradients and AdamW only of the adapter
    assert _parts(lora)["policy weights"] == 1_720_574_976 * 2 + 69_730_304 * 4
    assert _parts(lora)["optimizer state"] == 69_730_304 * 4 * 2
    int_row = _parts(memory_plan(_compose("experiment=paper/int"), device_bytes=80 * GIB))
    assert int_row["step-0 copy"] == 1_720_574_976 * 4  # judge, intervention and KL reference share one copy
    assert sum(name == "step-0 copy" for name in int_row) == 1


# -- refusals ----------------------------------------------------------------------------------------


def test_a_plan_over_the_device_names_its_largest_parts_and_their_knobs():
    plan = memory_plan(_compose("experiment=paper/grpo", "module.gradient_checkpointing=false"), device_bytes=80 * GIB)
    assert not plan.fits and plan.peak_phase == "update"
    with pytest.raises(MemoryPlanError) as err:
        check_memory_plan(plan)
    message = str(err.value)
    assert "the update phase needs" in message and "refused before any model loads" in message
    assert "activations 178.03 GiB (module.gradient_checkpointing=true, module.micro_batch_rows" in message


def test_a_vllm_share_too_small_for_one_row_is_a_problem():
    plan = memory_plan(_compose("experiment=paper/mintrl_const", "sampler.gpu_memory_utilization=0.05"), 80 * GIB)
    assert not plan.fits and "holds less than one sampler.max_model_len=18432 row" in plan.problems[0]
    with pytest.raises(MemoryPlanError, match="raise sampler.gpu_memory_utilization"):
        check_memory_plan(plan)


def test_the_device_memory_comes_from_the_field_without_a_gpu_and_cpu_runs_never_refuse():
    if torch.cuda.is_available():
        pytest.skip("a visible GPU's own memory is used")
    assert device_memory(_compose("trainer=gpu", "plan.device_memory_gib=24")) == (
        24 * GIB,
        "plan.device_memory_gib=24: no GPU visible",
        True,
    )
    assert device_memory(_compose("trainer=gpu", "plan.refuse=false"))[2] is False
    size, source, refuses = device_memory(_compose())  # the CPU main job
    assert size > 0 and "never refused" in source and refuses is False
    plan = memory_plan(_compose("plan.reserve_gib=100000"))  # over any host: printed, not refused
    assert not plan.fits
    check_memory_plan(plan)


def _forbid_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    for module in (components, loading):
        monkeypatch.setattr(module, "load_policy", refuse)
        monkeypatch.setattr(module, "embedded_smollm2", refuse)


def test_a_run_over_the_device_is_refused_before_any_model_loads(monkeypatch, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("needs the plan.device_memory_gib path (no GPU visible)")
    from mintrl.build.run import run

    _forbid_model_loading(monkeypatch)
    cfg = _compose("experiment=paper/mintrl_const", "plan.device_memory_gib=40", f"paths.output_dir={tmp_path}")
    with pytest.raises(ValueError, match=r"memory plan: the .* phase needs .* > 40.00 GiB per device"):
        run(cfg)


def test_mintrl_train_plan_prints_the_plan_in_process_without_loading_a_model(monkeypatch, capsys):
    from mintrl.cli.train import print_plan

    _forbid_model_loading(monkeypatch)
    assert print_plan(["experiment=paper/mintrl_const"]) == 0
    out = capsys.readouterr().out
    assert "80.00 GiB per device (plan.device_memory_gib=80: no GPU visible)" in out and ": fits" in out
    assert print_plan(["experiment=paper/mintrl_const", "sampler.sleep_mode=false"]) == 1  # +24 GiB in the update
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "sampler.sleep_mode=true" in out


def test_mintrl_train_plan_command_is_fast_and_offline():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mintrl.cli.train", "--plan", "experiment=paper/mintrl_const"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - start
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "memory plan (GiB = 2^30 bytes): 80.00 GiB per device" in done.stdout
    assert "peak: 64.73 GiB (intervention) + 2.00 reserve = 66.73 of 80.00 GiB: fits" in done.stdout
    print(f"mintrl-train --plan: {cpu:.1f} s of CPU, {wall:.1f} s wall")
    # imports only (no model, no engine; offline): about 6-7 s of CPU here, 6 s wall on idle cores, ~28 s under load
    assert cpu < 30


def test_a_model_without_a_path_or_with_an_unknown_architecture_is_unknown_and_refuses_nothing():
    plan = memory_plan(_compose("model=hf", "trainer=gpu"), device_bytes=80 * GIB)  # model.path=??? (not set)
    assert plan.parts == [] and "model.path=??? (model.path not set)" in plan.notes[0] and plan.fits
    plan = memory_plan(_compose("model=hf", "model.path=nobody/not-a-cached-model-xyz"), device_bytes=80 * GIB)
    assert plan.parts == [] and "nothing is refused" in plan.notes[0]
    unset = _parts(memory_plan(_compose("judge=teacher", "intervention=teacher"), device_bytes=80 * GIB))
    assert not any(name.startswith(("teacher", "judge", "intervention")) for name in unset)  # the build reports it


def test_the_optimizer_state_follows_the_optimizer():
    sgd = ("module.optimizer._target_=torch.optim.SGD", "+module.optimizer.momentum=0.9")
    assert _parts(memory_plan(_compose(*SMALL, *sgd), 8 * GIB))["optimizer state"] == 134_515_008 * 4
    plain = ("module.optimizer._target_=torch.optim.SGD",)  # no momentum: no state
    assert _parts(memory_plan(_compose(*SMALL, *plain), 8 * GIB))["optimizer state"] == 0
    assert (
        _parts(memory_plan(_compose(*SMALL, "module.optimizer._target_=torch.optim.Adam"), 8 * GIB))["optimizer state"]
        == 134_515_008 * 4 * 2
    )


def test_planning_the_main_job_draws_no_random_numbers():
    """The CPU main job's numbers cannot move: the plan reads the config and touches no generator."""
    import random

    import numpy as np

    cfg = _compose()
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    states = (torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    plan = memory_plan(cfg)
    assert not plan.refuses and plan.parts  # printed only, never refused on CPU
    assert torch.equal(torch.random.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert (np.random.get_state()[1] == states[2]).all()
