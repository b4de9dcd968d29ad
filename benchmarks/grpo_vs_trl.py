"""GRPO optimizer step vs TRL's ``GRPOTrainer`` on the same model, prompts, group size, response
budget, temperature, optimizer, precision and activation checkpointing (embedded SmolLM2-135M,
fp32; by default CPU and Hugging Face ``generate`` on both sides). Each framework runs in its own
fresh process (so peak memory is its own), alternating, ``--repeats`` times; each process makes
one warm-up step and ``--steps`` measured steps. Prints time per step split into generation and
training, and peak memory. Target: step time <= 0.7x TRL's.

TRL's ``GRPOConfig`` turns activation checkpointing on by default and mintrl's config leaves it
off; here both follow ``--gradient-checkpointing`` (off unless given), so the update does the same
work on both sides. ``--sampler vllm --device cuda`` compares a colocated vLLM engine on both
sides (mintrl ``sampler=vllm``, TRL ``use_vllm=True, vllm_mode="colocate"``), 30% of the GPU each.

    make bench     # or: .venv/bin/python benchmarks/grpo_vs_trl.py [--prompts 4 --group 4 --tokens 64]
    .venv-gpu/bin/python benchmarks/grpo_vs_trl.py --device cuda --sampler vllm --prompts 8 --group 8 --tokens 256

TRL comes from the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import median, table

CHILD = r"""
import json, os, sys, tempfile, time
import torch
args = json.loads(sys.argv[1])
torch.manual_seed(0)
def kib(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))
from mintrl.data.base import DEFAULT_INSTRUCTION
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.reward import ReasoningGymReward
P, G, T, K, device = args["prompts"], args["group"], args["tokens"], args["steps"], args["device"]
reward = ReasoningGymReward()
steps = []
if args["framework"] == "trl":
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from mintrl.model import embedded_smollm2
    loaded = embedded_smollm2()
    policy, tok = loaded.model.train(), loaded.tokenizer
    items = ReasoningGymPrompts(train_size=200, val_size=1).build("train", tok)
    by_question = {it.question: it for it in items}
    rows = [{"prompt": [{"role": "user", "content": DEFAULT_INSTRUCTION.format(question=it.question)}], "question": it.question} for it in items]
    def accuracy(completions, question, **kwargs):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return reward(texts, [by_question[q] for q in question])
    vllm = dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, vllm_max_model_length=1024) if args["sampler"] == "vllm" else {}
    config = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=P * G, num_generations=G,
                        max_completion_length=T, temperature=1.0, top_p=1.0, top_k=0, learning_rate=1e-6, beta=0.0,
                        max_steps=K + 1, logging_steps=1, report_to="none", save_strategy="no", bf16=args["precision"] == "bf16", fp16=False,
                        use_cpu=device == "cpu", seed=0, optim="adamw_torch", weight_decay=0.0, max_grad_norm=1.0,
                        lr_scheduler_type="constant", warmup_steps=0, disable_tqdm=True, loss_type="grpo",
                        gradient_checkpointing=args["gradient_checkpointing"],  # TRL's default is on; set like ours
                        dataloader_num_workers=0, shuffle_dataset=False, **vllm)
    open("/proc/self/clear_refs", "w").write("5")
    baseline = kib("VmRSS:")
    trainer = GRPOTrainer(model=policy, reward_funcs=accuracy, args=config, train_dataset=Dataset.from_list(rows), processing_class=tok)
    gen = {"s": 0.0}
    original = trainer._generate
    def timed(prompts):
        start = time.perf_counter(); out = original(prompts); gen["s"] += time.perf_counter() - start; return out
    trainer._generate = timed
    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            gen["s"] = 0.0; self.start = time.perf_counter()
        def on_step_end(self, a, state, control, **kw):
            steps.append((time.perf_counter() - self.start, gen["s"]))
    trainer.add_callback(Timer())
    trainer.train()
else:
    from hydra import compose, initialize_config_dir
    from mintrl.build.components import build_components
    from mintrl.objective.aggregation import step_totals
    overrides = ["paths.output_dir=" + tempfile.mkdtemp(), "objective=grpo", "judge=always_keep", "rollout.n_semi=0", f"rollout.n_control={G}",
                 f"rollout.max_response_tokens={T}", "rollout.progress=false", f"data.prompts_per_step={P}", "module.optimizer.lr=1e-6",
                 "data.prompts.train_size=200", f"module.gradient_checkpointing={args['gradient_checkpointing']}", f"sampler={args['sampler']}"]
    if args["sampler"] == "hf":
        overrides += [f"sampler.dtype={args['precision']}"]  # bf16: the sampling copy; fp32: the policy itself
    if args["sampler"] == "vllm":
        overrides += ["sampler.gpu_memory_utilization=0.3", "sampler.max_model_len=1024", f"sampler.enforce_eager={device == 'cpu'}"]
    with initialize_config_dir(config_dir=args["configs"], version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    c = build_components(cfg, trainer=False)  # loads the policy once: the sampler samples from the model trained here
    module, policy = c.module, c.context.policy.to(device)
    items = ReasoningGymPrompts(train_size=200, val_size=1).build("train", c.context.tokenizer)
    open("/proc/self/clear_refs", "w").write("5")
    baseline = kib("VmRSS:")
    module.objective.setup(policy)
    optimizer = module.optimizer_factory([p for p in policy.parameters() if p.requires_grad])
    for k in range(K + 1):
        start = time.perf_counter()
        batch = c.rollout.generate(items[k * P:(k + 1) * P], step=k)
        generated = time.perf_counter()
        batch = batch.to(device)
        bf16 = args["precision"] == "bf16"  # bf16-mixed as the Lightning trainer runs it: autocast, fp32 weights
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            module.objective.prepare(batch, module.frozen_logprobs)
            # one update per batch: its forward recomputes the rollout log-probs in the trainer's precision
            adopt = bf16 or not batch.sampler_exact  # staleness 0: the update's weights generated the batch
            module.accumulate(batch, step_totals(batch.loss_mask), own_logprobs="adopt" if adopt else None)
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step(); optimizer.zero_grad(set_to_none=True)
        if device != "cpu":
            torch.cuda.synchronize()
        steps.append((time.perf_counter() - start, generated - start))
cuda_peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0
print(json.dumps({"steps": steps[1:], "peak_mib": kib("VmHWM:") / 1024, "above_model_mib": (kib("VmHWM:") - baseline) / 1024,
                  "cuda_peak_mib": cuda_peak}))
"""


def run_child(framework: str, args) -> dict:
    spec = json.dumps(
        {
            "framework": framework,
            "prompts": args.prompts,
            "group": args.group,
            "tokens": args.tokens,
            "steps": args.steps,
            "device": args.device,
            "sampler": args.sampler,
            "gradient_checkpointing": args.gradient_checkpointing,
            "precision": args.precision,
            "configs": os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"),
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", CHILD, spec],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"},
    )
    if out.returncode:
        raise RuntimeError(f"{framework} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per rollout")
    parser.add_argument("--steps", type=int, default=2, help="measured steps per process (after one warm-up step)")
    parser.add_argument("--repeats", type=int, default=2, help="processes per framework, alternating")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both frameworks)")
    parser.add_argument(
        "--sampler",
        choices=["hf", "vllm"],
        default="hf",
        help="generation on both sides: Hugging Face generate, or a colocated vLLM engine (TRL use_vllm, vllm_mode=colocate)",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="activation checkpointing on both sides (TRL's GRPOConfig default; off in mintrl's default config)",
    )
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="both sides: fp32, or bf16-mixed (TRL bf16=True; mintrl bf16 sampling copy + bf16 autocast update)",
    )
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"mintrl": [], "trl": []}
    for _ in range(args.repeats):
        for framework in runs:
            runs[framework].append(run_child(framework, args))

    def stat(framework, f):
        return median([f(s) for r in runs[framework] for s in r["steps"]])

    ours = {
        k: stat("mintrl", f)
        for k, f in (("step", lambda s: s[0]), ("gen", lambda s: s[1]), ("train", lambda s: s[0] - s[1]))
    }
    trl = {
        k: stat("trl", f)
        for k, f in (("step", lambda s: s[0]), ("gen", lambda s: s[1]), ("train", lambda s: s[0] - s[1]))
    }
    mem_ours, mem_trl = median([r["peak_mib"] for r in runs["mintrl"]]), median([r["peak_mib"] for r in runs["trl"]])
    above_ours, above_trl = (
        median([r["above_model_mib"] for r in runs["mintrl"]]),
        median([r["above_model_mib"] for r in runs["trl"]]),
    )
    extra = [
        (
            "peak resident memory above the loaded model (set-up, steps)",
            above_ours / above_trl,
            f"{above_ours:.0f} MiB vs {above_trl:.0f} MiB",
        )
    ]
    if args.device != "cpu":
        gpu_ours, gpu_trl = (
            median([r["cuda_peak_mib"] for r in runs["mintrl"]]),
            median([r["cuda_peak_mib"] for r in runs["trl"]]),
        )
        extra.append(
            ("peak GPU memory allocated by torch", gpu_ours / gpu_trl, f"{gpu_ours:.0f} MiB vs {gpu_trl:.0f} MiB")
        )
    checkpointing = "activation checkpointing on both" if args.gradient_checkpointing else "no activation checkpointing"
    table(
        f"GRPO step vs TRL GRPOTrainer: {args.prompts} prompts x {args.group} rollouts x <= {args.tokens} tokens, {args.precision}, "
        f"{args.device}, {args.sampler} generation, {checkpointing}",
        [
            (
                "step time, mintrl / TRL (target <= 0.7)",
                ours["step"] / trl["step"],
                f"{ours['step']:.1f} s vs {trl['step']:.1f} s",
            ),
            ("  generation", ours["gen"] / trl["gen"], f"{ours['gen']:.1f} s vs {trl['gen']:.1f} s"),
            (
                "  training (everything else: rewards, log-probs, update)",
                ours["train"] / trl["train"],
                f"{ours['train']:.1f} s vs {trl['train']:.1f} s",
            ),
            (
                "peak resident memory of the process, mintrl / TRL",
                mem_ours / mem_trl,
                f"{mem_ours:.0f} MiB vs {mem_trl:.0f} MiB",
            ),
            *extra,
        ],
        [
            f"medians over {args.repeats} processes x {args.steps} steps per framework (one warm-up step each, not counted)"
        ],
    )


if __name__ == "__main__":
    main()
