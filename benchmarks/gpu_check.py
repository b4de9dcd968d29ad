"""The offline single-GPU check (``benchmarks/gpu_check.sh`` runs it): main-job steps with the HF
sampler on randomly initialised models of the embedded model's architecture and of a 1.7B one, full
weights and LoRA, and one FSDP update, printing per part the step time split into generation and
update, peak GPU memory, generated tokens/s and the update's MFU.

No weights are downloaded: each model is built from its config with random weights (the timing and
memory of a step do not depend on the values; rewards of a random model are 0, and its responses
run to the length limit, which makes every step the same size). The tokenizer is the embedded
model's (copied into ``.gpu-wheels/tokenizer`` by ``make gpu-wheels``; ids fit both vocabularies).

    python benchmarks/gpu_check.py --device cuda                    # everything (what gpu_check.sh runs)
    python benchmarks/gpu_check.py --device cpu --steps 1 --archs tiny --parts full,lora,fsdp-lora   # the wiring, on CPU

MFU of the update: ``k N T / (update seconds x peak FLOP/s)`` with ``N`` the model's parameters,
``T`` the tokens of the batch's rows (prompt + response, attended), ``k = 6`` for full fine-tuning
(forward 2, backward 4) and ``k = 4`` for LoRA (no weight gradients of the frozen base); prompt
sharing and the chunked LM head change the real work a little, so this is an estimate.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as L
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("MINTRL_CONFIG_DIR", str(ROOT / "configs"))

# architectures (Hugging Face configs, no weights): the embedded SmolLM2-135M-Instruct, Qwen3-1.7B,
# and a tiny Llama for the CPU wiring check
ARCHS = {
    "smollm2_135m": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    ),
    "qwen3_1.7b": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    ),
    "tiny": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    ),
}
# bf16 dense peak FLOP/s by device name (substring), for the MFU
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "4090": 165.0, "L4": 121.0}
# the main job's step at its own sizes: 8 prompts x 4 rollouts, 64-token responses (configs/train.yaml)
# (no validation, no checkpoint / export / records written: the step alone is measured)
STEP = [
    "validate_at_start=false",
    "+trainer.limit_val_batches=0",
    "rollout.progress=false",
    "~logger",
    *(f"callbacks.{name}=null" for name in ("progress", "best", "checkpoint", "hf_export", "records", "summary")),
]


def build_random_model(arch: str, folder: Path, tokenizer_dir: Path, device: str) -> Path:
    """Save a randomly initialised model of ``arch`` (bf16 on CUDA, fp32 on CPU) plus the tokenizer
    into ``folder``; returns it."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    spec = dict(ARCHS[arch])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(folder)
    del model
    return folder


class UpdateMeter(L.Callback):
    """Per training batch: its attended tokens (prompt + response, all rows) and the update's wall
    time (the training step, after the rollouts were generated; CUDA synchronised)."""

    def __init__(self):
        self.tokens: list[int] = []
        self.seconds: list[float] = []
        self._start = 0.0

    def _sync(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.tokens.append(int(batch.attention_mask.sum()))
        self._sync()
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._sync()
        self.seconds.append(time.perf_counter() - self._start)


def peak_flops(device: str, override: float | None) -> float | None:
    """bf16 dense peak FLOP/s of the device (None on CPU or an unknown GPU without ``--peak-tflops``)."""
    if override:
        return override * 1e12
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((t * 1e12 for key, t in PEAK_TFLOPS.items() if key in name), None)


def run_steps(folder: Path, lora: bool, steps: int, device: str, out: Path) -> dict:
    """``steps`` main-job steps (MInTRL-Const, rule judge, HF sampler) on the model in ``folder``:
    fp32 master weights, bf16 autocast on CUDA (``trainer=gpu``)."""
    from hydra import compose, initialize_config_dir

    from mintrl.build.components import build_components
    from mintrl.model.lora import trainable_parameter_count

    overrides = [
        "model=hf",
        f"model.path={folder}",
        f"trainer={'gpu' if device == 'cuda' else 'cpu'}",
        f"trainer.max_steps={steps}",
        f"paths.output_dir={out}",
        *STEP,
        *(["model/lora=default", "module.optimizer.lr=2e-4"] if lora else []),
    ]
    with initialize_config_dir(config_dir=os.environ["MINTRL_CONFIG_DIR"], version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    torch.manual_seed(0)
    c = build_components(cfg)
    meter = UpdateMeter()
    c.trainer.callbacks.append(meter)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    c.trainer.fit(c.module, datamodule=c.datamodule)
    wall = time.perf_counter() - start
    hist = c.module.history
    trainable, total = trainable_parameter_count(c.context.policy)
    result = {
        "steps": len(hist),
        "wall_s": wall,
        "gen_s": [h.get("perf/gen_seconds", float("nan")) for h in hist],
        "update_s": meter.seconds,
        "gen_tokens_per_s": [h.get("perf/gen_tokens_per_s", float("nan")) for h in hist],
        "tokens": meter.tokens,
        "params": total,
        "trainable": trainable,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "k": 4 if lora else 6,
    }
    del c
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def fsdp_step(folder: Path, lora: bool, device: str, out: Path) -> dict:
    """One FSDP update (Lightning ``FSDPStrategy`` on one device, bf16-mixed) on a fixed batch of 32
    rows (100 prompt + 64 response tokens) and the HF export it gathers; no generation (the HF
    sampler cannot generate from sharded weights, and vLLM is not on this machine)."""
    from torch.utils.data import DataLoader

    from mintrl.core.batch import RolloutBatch
    from mintrl.model.loading import load_policy
    from mintrl.model.lora import LoraSettings
    from mintrl.objective import GRPO
    from mintrl.training.callbacks.export import HFExport
    from mintrl.training.distributed import fsdp_strategy
    from mintrl.training.module import PolicyModule

    loaded = load_policy(str(folder), dtype="float32", lora=LoraSettings() if lora else None)
    n, p, r = 32, 100, 64
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (n, p + r), generator=g)
    resp = torch.zeros(n, p + r, dtype=torch.bool)
    resp[:, p:] = True
    batch = RolloutBatch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        response_mask=resp,
        intervention_mask=torch.zeros_like(resp),
        rollout_logprobs=-torch.rand(n, p + r, generator=g) * resp,
        rewards=torch.tensor([1.0, 0.0] * (n // 2)),
        group_index=torch.arange(n) // 4,
        is_control=torch.ones(n, dtype=torch.bool),
        num_groups=n // 4,
        finished=torch.ones(n, dtype=torch.bool),
        behaviour_logprobs=torch.zeros(n, p + r),
        temperature=1.0,
        step=0,
    )

    class Fixed(L.LightningDataModule):
        def train_dataloader(self):
            return DataLoader([batch] * 4, batch_size=None, collate_fn=lambda x: x)

    module = PolicyModule(
        loaded.model, GRPO(), functools.partial(torch.optim.AdamW, lr=1e-5), micro_batch_rows=8, tokenizer=None
    )
    export = HFExport(str(out / "hf_policy"))
    strategy = fsdp_strategy() if device == "cuda" else "auto"
    trainer = L.Trainer(
        max_steps=1,
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        strategy=strategy,
        precision="bf16-mixed" if device == "cuda" else "32-true",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        callbacks=[export],
    )
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.fit(module, datamodule=Fixed())
    wall = time.perf_counter() - start
    return {
        "strategy": type(trainer.strategy).__name__,
        "wall_s": wall,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "exported": sorted(os.listdir(export.saved_to)),
        "adapter": sorted(os.listdir(export.adapter_saved_to)) if export.adapter_saved_to else None,
    }


def report(name: str, r: dict, flops: float | None) -> str:
    """One line per part: medians over the steps after the first (the first warms kernels up)."""
    import statistics

    def med(xs):
        xs = xs[1:] if len(xs) > 1 else xs
        return statistics.median(xs) if xs else float("nan")

    gen, upd, tok = med(r["gen_s"]), med(r["update_s"]), med(r["tokens"])
    mfu = r["k"] * r["params"] * tok / (upd * flops) if flops else None
    mem = f"{r['peak_gib']:.1f} GiB" if r["peak_gib"] is not None else "n/a (cpu)"
    return (
        f"{name:<22} step {gen + upd:6.2f} s = generation {gen:6.2f} s + update {upd:6.2f} s | "
        f"gen {med(r['gen_tokens_per_s']):8.0f} tok/s | peak {mem} | update MFU "
        + (f"{100 * mfu:.1f}%" if mfu is not None else "n/a")
        + f" | trainable {r['trainable'] / 1e6:.3g}M of {r['params'] / 1e6:.4g}M"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per part (the first is warm-up)")
    parser.add_argument("--archs", default="smollm2_135m,qwen3_1.7b", help=f"comma list of {sorted(ARCHS)}")
    parser.add_argument("--parts", default="full,lora,fsdp-lora", help="comma list of full, lora, fsdp, fsdp-lora")
    parser.add_argument("--tokenizer", default=str(ROOT / ".gpu-wheels" / "tokenizer"))
    parser.add_argument("--peak-tflops", type=float, default=None, help="bf16 peak of the GPU (default: by name)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible", file=sys.stderr)
        return 2
    flops = peak_flops(args.device, args.peak_tflops)
    results, lines = {}, []
    with tempfile.TemporaryDirectory(prefix="mintrl-gpu-check-") as tmp:
        for arch in args.archs.split(","):
            folder = build_random_model(arch, Path(tmp) / arch, Path(args.tokenizer), args.device)
            for part in args.parts.split(","):
                name = f"{arch}/{part}"
                out = Path(tmp) / "runs" / name
                t0 = time.perf_counter()
                if part.startswith("fsdp"):
                    r = fsdp_step(folder, part == "fsdp-lora", args.device, out)
                    line = f"{name:<22} one FSDP update + export {r['wall_s']:6.2f} s | peak " + (
                        f"{r['peak_gib']:.1f} GiB" if r["peak_gib"] is not None else "n/a (cpu)"
                    )
                else:
                    r = run_steps(folder, part == "lora", args.steps, args.device, out)
                    line = report(name, r, flops)
                results[name] = r
                lines.append(line)
                print(line, f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    print("\n== summary (" + (torch.cuda.get_device_name() if args.device == "cuda" else "cpu") + ")")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
