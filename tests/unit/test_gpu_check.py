"""The pure parts of the offline GPU check (benchmarks/gpu_check.py): the update's FLOP count behind
its MFU, the bf16 peak by GPU name, the version floors, the batch shape the meter reads, and that a
failing part leaves the others' results. The script runs on CPU in
tests/integration/test_gpu_check_wiring.py (slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check_unit", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# a tiny model: 2 layers, hidden 8, intermediate 16, 2 query heads and 1 KV head of 4 dims, vocab 32;
# per layer q 8x8 = 64, k 8x4 = 32, v 32, o 64, gate 8x16 = 128, up 128, down 128: 576 weights,
# 1152 in the body; a forward costs 2 x 1152 = 2304 FLOPs per token in those matmuls
TINY = dict(layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4, vocab=32, tied=True)
# one group: a 3-token prompt and two rollouts of 2 and 1 response tokens
# shared: body tokens 3 + 2 + 1 = 6 -> 2304 x 6 = 13824
#   attention keys: prompt 1 + 2 + 3 = 6, rollout a 4 + 5 = 9, rollout b 4: 19 -> 4 x 2 layers x 8 x 19 = 1216
#   head on the 3 response positions: 2 x 8 x 32 x 3 = 1536
#   forward 16576; full fine-tuning 3 x 16576 = 49728
# not shared: body tokens 5 + 4 = 9 -> 20736; keys 15 + 10 = 25 -> 1600; head 1536: 3 x 23872 = 71616
SHARED_FULL = 49728
UNSHARED_FULL = 71616


def dims(gc, **change):
    return gc.ModelDims(**{**TINY, **change})


def test_matmul_params_by_hand(gc):
    assert dims(gc).matmul_params == 1152
    # SmolLM2-135M: q, o 576 x 576 = 331776 each, k, v 576 x 192 = 110592 each, gate, up, down
    # 576 x 1536 = 884736 each: 3538944 per layer, x 30 = 106168320 (+ 49152 x 576 = 28311552
    # embedding + 35136 norm weights = the model's 134515008)
    smol = gc.ModelDims.from_config(gc.ARCHS["smollm2_135m"])
    assert (smol.head_dim, smol.kv_heads, smol.matmul_params) == (64, 3, 106168320)
    # Qwen3-1.7B: head_dim 128 given; q 2048 x 2048, k, v 2048 x 1024, o 2048 x 2048, MLP 3 x 2048 x 6144:
    # 4194304 x 2 + 2097152 x 2 + 37748736 = 50331648 per layer, x 28 = 1409286144
    qwen = gc.ModelDims.from_config(gc.ARCHS["qwen3_1.7b"])
    assert (qwen.head_dim, qwen.matmul_params) == (128, 1409286144)


def test_matmul_params_match_a_built_model(gc):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    assert linear == gc.ModelDims.from_config(config.to_dict()).matmul_params == 1152


def test_update_flops_full_shared_by_hand(gc):
    assert gc.update_flops(dims(gc), [3], [[2, 1]], share_prompts=True) == SHARED_FULL
    assert gc.update_flops(dims(gc), [3], [[2, 1]], share_prompts=False) == UNSHARED_FULL


def test_sharing_saves_exactly_the_repeated_prompt(gc):
    # the second rollout's copy of the prompt: 3 tokens of 2304 and keys 1 + 2 + 3 = 6 (4 x 2 x 8 x 6 = 384),
    # forward and backward (x 3): 3 x (6912 + 384) = 21888
    assert UNSHARED_FULL - SHARED_FULL == 21888
    # two groups, the second of 4 rollouts: its prompt (5 tokens: 5 x 2304 = 11520, keys 1 + ... + 5 = 15:
    # 4 x 2 x 8 x 15 = 960) three times more
    shared = gc.update_flops(dims(gc), [3, 5], [[2, 1], [1, 1, 1, 1]], share_prompts=True)
    unshared = gc.update_flops(dims(gc), [3, 5], [[2, 1], [1, 1, 1, 1]], share_prompts=False)
    assert unshared - shared == 21888 + 3 * 3 * (11520 + 960) == 134208
    # a group of one rollout has nothing to share
    assert gc.update_flops(dims(gc), [3], [[2]], share_prompts=True) == gc.update_flops(
        dims(gc), [3], [[2]], share_prompts=False
    )


def test_head_runs_on_response_positions_only(gc):
    # doubling the vocabulary adds 2 x 8 x 32 FLOPs per response position (3 of them), x 3 forward and
    # backward = 4608, whatever the prompt's length
    for prompt in (3, 10):
        small = gc.update_flops(dims(gc), [prompt], [[2, 1]], share_prompts=True)
        large = gc.update_flops(dims(gc, vocab=64), [prompt], [[2, 1]], share_prompts=True)
        assert large - small == 4608
    # a longer prompt changes the body and the attention, never the head: 7 more prompt tokens
    # (7 x 2304 = 16128) and keys 4..10 = 49 more for the prompt plus 7 more for each of the 3
    # response positions (70 x 64 = 4480): 3 x 20608 = 61824
    longer = gc.update_flops(dims(gc), [10], [[2, 1]], share_prompts=True)
    assert longer - SHARED_FULL == 61824


def test_lora_multiplier_and_adapter_terms(gc):
    # frozen base: matmuls and head x 2 (forward + activation gradients), attention still x 3:
    # 2 x 13824 + 3 x 1216 + 2 x 1536 = 27648 + 3648 + 3072 = 34368
    assert gc.update_flops(dims(gc), [3], [[2, 1]], share_prompts=True, lora_params=0) == 34368
    # 100 adapter weights on each of the 6 body tokens: 6 x 100 x 6 (forward 2, backward 4) = 3600
    assert gc.update_flops(dims(gc), [3], [[2, 1]], share_prompts=True, lora_params=100) == 37968
    # full fine-tuning: everything x 3 of the forward
    assert gc.update_flops(dims(gc), [3], [[2, 1]], share_prompts=True) == 3 * 16576


def test_update_flops_refuses_bad_shapes(gc):
    with pytest.raises(ValueError, match="one list of response lengths per group"):
        gc.update_flops(dims(gc), [3, 4], [[2]], share_prompts=True)
    with pytest.raises(ValueError, match="non-negative"):
        gc.update_flops(dims(gc), [3], [[-1]], share_prompts=True)


def test_update_shape_groups_per_micro_batch(gc):
    # rows 0, 1: prompt [5, 6, 7] + 2 / 1 response tokens; rows 2, 3: prompt [8, 9] + 3 each (right padded)
    ids = torch.tensor([[5, 6, 7, 1, 1], [5, 6, 7, 1, 0], [8, 9, 1, 1, 1], [8, 9, 1, 1, 1]])
    attn = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    target = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 1, 0], [0, 0, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert gc.update_shape(ids, attn, target, None, share=True) == [([3, 2], [[2, 1], [3, 3]], True)]
    assert gc.update_shape(ids, attn, target, 3, share=True) == [([3, 2], [[2, 1], [3]], True), ([2], [[3]], False)]
    # not shared: every row its own prompt
    assert gc.update_shape(ids, attn, target, None, share=False) == [([3, 3, 2, 2], [[2], [1], [3], [3]], False)]


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H20", 148.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100-PCIE-40GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10G", 125.0),
        ("NVIDIA GeForce RTX 4090", 165.2),
        ("NVIDIA L40", None),
        ("Tesla T4", None),
        ("NVIDIA GeForce RTX 3090", None),
    ],
)
def test_peak_by_device_name(gc, name, tflops):
    assert gc.peak_tflops_for(name) == tflops


def test_peak_flops_override_cpu_and_unknown(gc, capsys):
    assert gc.peak_flops("cpu", None) is None
    assert gc.peak_flops("cuda", 500.0, name="Tesla T4") == 500.0e12
    assert gc.peak_flops("cuda", None, name="NVIDIA H100 PCIe") == 756.0e12
    assert gc.peak_flops("cuda", None, name="Tesla T4") is None
    assert "Tesla T4" in capsys.readouterr().out


def test_floors_from_pyproject(gc):
    floors = gc.project_floors(ROOT / "pyproject.toml", ("torch", "transformers", "lightning", "peft"))
    assert floors == {"torch": "2.7", "transformers": "4.56", "lightning": "2.4", "peft": "0.17"}


def test_floors_hold_every_api_the_code_calls(gc):
    """pyproject.toml's floor of each package is at least the release that introduced every API of
    it in the table (torch's dcp.load(no_dist=): 2.7, get_total_norm and public FSDP2: 2.6, not
    2.4), and the installed releases have each of them."""
    packages = sorted({entry.package for entry in gc.API_FLOORS})
    floors = gc.project_floors(ROOT / "pyproject.toml", packages)
    below = [
        f"{e.package}>={floors.get(e.package)} < {e.release} ({e.api})"
        for e in gc.API_FLOORS
        if e.package not in floors or Version(floors[e.package]) < Version(e.release)
    ]
    assert below == []
    assert gc.api_failures() == []
    # the APIs that set today's floors
    assert {e.api for e in gc.API_FLOORS if e.release == floors[e.package]} >= {
        "torch.distributed.checkpoint:load(no_dist)",
        "transformers:DynamicCache(config)",
        "lightning.pytorch.strategies:ModelParallelStrategy",
    }


def test_api_failures_name_a_missing_module_attribute_and_keyword(gc):
    table = (
        gc.ApiFloor("torch", "torch.nn.utils:no_such_norm", "9.0", "here"),
        gc.ApiFloor("torch", "torch.no_such_module:x", "9.0", "here"),
        gc.ApiFloor("torch", "torch.nn.utils:clip_grad_norm_(no_such_arg)", "9.0", "here"),
        gc.ApiFloor("torch", "torch.nn.utils:clip_grad_norm_(max_norm)", "1.0", "here"),
    )
    fails = gc.api_failures(table)
    assert len(fails) == 3
    assert fails[0].startswith("torch has no torch.nn.utils:no_such_norm (since 9.0: here)")
    assert fails[1].startswith("torch has no torch.no_such_module:x (since 9.0: here)")
    assert fails[2] == "torch's torch.nn.utils.clip_grad_norm_ takes no no_such_arg= (since 9.0: here)"


def test_main_stops_before_any_work_on_a_missing_api(gc, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gc, "api_failures", lambda: ["torch has no torch.nn.utils:get_total_norm"])
    monkeypatch.setattr(gc, "build_random_model", lambda *a: pytest.fail("built a model"))
    out = tmp_path / "r.json"
    assert gc.main(["--device", "cpu", "--archs", "tiny", "--parts", "lora", "--json", str(out)]) == 2
    assert "get_total_norm" in capsys.readouterr().err and not out.exists()


def test_version_check_refuses_a_floor_above(gc):
    assert gc.version_failures({"torch": "2.4"}) == []  # this venv's torch
    fails = gc.version_failures({"torch": "999.0", "peft": "0.17"}, installed={"torch": "2.13.0+cpu", "peft": None})
    assert fails == [
        "torch 2.13.0+cpu is older than the project's floor >=999.0",
        "peft is not installed (needs >=0.17)",
    ]
    assert gc.version_failures({"torch": "2.4"}, installed={"torch": "2.13.0.dev20250101+cu130"}) == []


def test_main_stops_before_any_work_on_a_failed_floor(gc, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gc, "project_floors", lambda path, names: {"torch": "999.0"})
    monkeypatch.setattr(gc, "build_random_model", lambda *a: pytest.fail("built a model"))
    out = tmp_path / "r.json"
    assert gc.main(["--device", "cpu", "--archs", "tiny", "--parts", "lora", "--json", str(out)]) == 2
    assert "torch" in capsys.readouterr().err and not out.exists()


FAKE_STEPS = {
    "steps": 2,
    "wall_s": 3.0,
    "gen_s": [1.0, 1.0],
    "update_s": [0.5, 0.5],
    "gen_tokens_per_s": [100.0, 100.0],
    "tokens": [50, 50],
    "update_flops": [1.0e12, 1.0e12],
    "update_batches": [],
    "params": 1000,
    "trainable": 10,
    "peak_gib": None,
}


def test_a_failing_part_leaves_the_others(gc, monkeypatch, capsys, tmp_path):
    def boom(*args, **kwargs):
        raise RuntimeError("fsdp went wrong")

    monkeypatch.setattr(gc, "build_random_model", lambda arch, folder, tokenizer, device: folder)
    monkeypatch.setattr(gc, "run_steps", lambda *args, **kwargs: dict(FAKE_STEPS))
    monkeypatch.setattr(gc, "fsdp_step", boom)
    out = tmp_path / "r.json"
    args = ["--device", "cpu", "--archs", "tiny", "--parts", "fsdp-lora,lora", "--peak-tflops", "4", "--json", str(out)]
    assert gc.main(args) == 1
    results = json.loads(out.read_text())
    assert results["tiny/lora"]["update_flops"] == [1.0e12, 1.0e12]
    # 1e12 FLOPs in 0.5 s on a 4 TFLOP/s peak: 50%
    assert results["tiny/lora"]["mfu"] == 0.5
    failed = results["tiny/fsdp-lora"]
    assert failed["error"] == "RuntimeError: fsdp went wrong"
    assert "fsdp went wrong" in failed["traceback_tail"] and "boom" in failed["traceback_tail"]
    printed = capsys.readouterr().out
    assert "tiny/fsdp-lora" in printed and "FAILED" in printed and "update MFU 50.0%" in printed


def test_each_part_is_freed_before_the_next_measures_its_peak(gc, monkeypatch, tmp_path):
    """A part's model is unreachable once the part returns, but Lightning's trainer and module refer
    to each other: only the cycle collector frees them, and it must run before the next part starts
    (its peak would count the previous model). Automatic collection is off here, so only the check's
    own collection can free the cycle."""
    import gc as collector
    import weakref

    class Model:  # stands for a part's trainer <-> module cycle
        pass

    previous = []

    def part(*args, **kwargs):
        assert all(ref() is None for ref in previous), "the previous part's model is still alive"
        model = Model()
        model.cycle = model
        previous.append(weakref.ref(model))
        return dict(FAKE_STEPS)

    monkeypatch.setattr(gc, "build_random_model", lambda arch, folder, tokenizer, device: folder)
    monkeypatch.setattr(gc, "run_steps", part)
    out = tmp_path / "r.json"
    collector.disable()
    try:
        code = gc.main(["--device", "cpu", "--archs", "tiny", "--parts", "full,lora", "--json", str(out)])
    finally:
        collector.enable()
    results = json.loads(out.read_text())
    assert [r.get("error") for r in results.values()] == [None, None] and code == 0
    assert len(previous) == 2 and previous[0]() is None


def fake_python(tmp_path: Path) -> Path:
    """An interpreter for gpu_check.sh: the main job's packages missing (so it installs), ``-m pip``
    recorded in ``pip-called`` instead of run, gpu_check.py not run, anything else the real Python."""
    import sys

    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in\n'
        '  *"import hydra"*) exit 1 ;;\n'
        f'  *"-m pip"*) touch {tmp_path}/pip-called; exit 0 ;;\n'
        '  *gpu_check.py*) echo "gpu_check.py ran"; exit 0 ;;\n'
        f'  *) exec {sys.executable} "$@" ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("fetched_for", ["3.99", None])
def test_wheels_for_another_python_stop_the_script_before_installing(tmp_path, fetched_for):
    import subprocess
    import sys

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "requirements.txt").write_text("rich==13.0\n")
    if fetched_for:
        (wheels / "python-version").write_text(f"{fetched_for}\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake_python(tmp_path)), "GPU_WHEELS": str(wheels)}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"wheels fetched for Python {fetched_for or 'an unrecorded version'}" in done.stderr
    assert f"is Python {here}: nothing was installed" in done.stderr
    assert f"make gpu-wheels GPU_PYTHON={here}" in done.stderr
    assert not (tmp_path / "pip-called").exists() and "gpu_check.py ran" not in done.stdout


def test_wheels_for_this_python_are_installed(tmp_path):
    import subprocess
    import sys

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "requirements.txt").write_text("rich==13.0\n")
    (wheels / "python-version").write_text(f"{sys.version_info[0]}.{sys.version_info[1]}\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake_python(tmp_path)), "GPU_WHEELS": str(wheels)}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "pip-called").exists() and "gpu_check.py ran" in done.stdout


def test_make_gpu_wheels_fetches_for_the_target_python():
    import subprocess

    done = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "gpu-wheels", "GPU_PYTHON=3.12"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "echo 3.12 > .gpu-wheels/python-version" in done.stdout
    assert "--only-binary=:all: --python-version 3.12" in done.stdout
