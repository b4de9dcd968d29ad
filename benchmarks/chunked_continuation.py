"""Chunked continuation: a response generated in k chunks (each call continuing from the prefix, as
the MInTRL rollout loop does between reviews) vs in one call, same rows and total tokens.
Alternating, median of ``--repeats``. Target: ratio <= 1.1 (the KV of the prefix is reused: by
vLLM's prefix cache in whole blocks, by the HF sampler's continuation cache per rollout).

    .venv/bin/python benchmarks/chunked_continuation.py [--sampler hf|vllm --chunks 4 --tokens 64]
"""

from __future__ import annotations

import argparse

import torch
from _common import alternate, median, table

from mintrl.model import embedded_smollm2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sampler", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64, help="response tokens (total over the chunks)")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    loaded = embedded_smollm2()
    policy, tok = loaded.model.to(args.device), loaded.tokenizer
    if args.sampler == "hf":
        from mintrl.sampler import HFSampler

        sampler = HFSampler(policy, tok)
    else:
        from mintrl.sampler import VLLMSampler

        sampler = VLLMSampler(policy, tok, max_model_len=1024, enforce_eager=args.device == "cpu")
    questions = [
        f"Explain why {a} + {b} = {a + b}, step by step." for a, b in zip(range(args.rows), range(50, 50 + args.rows))
    ]
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for q in questions
    ]
    per_chunk = args.tokens // args.chunks

    def generate(n_chunks: int, budget: int) -> None:
        active = [(row, list(p)) for row, p in enumerate(prompts)]  # rows that ended with EOS are not continued
        for _ in range(n_chunks):
            if not active:
                break
            # as the rollout loop does: each row names its rollout, so a backend can continue from its KV
            out = sampler.generate(
                [p for _, p in active], budget, temperature=1.0, cache_keys=[row for row, _ in active]
            )
            active = [
                (row, p + ids.tolist()) for (row, p), ids, done in zip(active, out.token_ids, out.finished) if not done
            ]
        sampler.release()  # end of a rollout batch: kept KV is dropped

    torch.manual_seed(0)
    generate(1, 4)  # warm-up (and the first vLLM weight push)
    times = alternate(
        {
            "one call": lambda: generate(1, per_chunk * args.chunks),
            f"{args.chunks} chunks": lambda: generate(args.chunks, per_chunk),
        },
        args.repeats,
    )
    one, chunked = median(times["one call"]), median(times[f"{args.chunks} chunks"])
    table(
        f"chunked continuation, {args.sampler} sampler, {args.rows} rows x {per_chunk * args.chunks} tokens ({args.device})",
        [
            (
                f"{args.chunks} chunks of {per_chunk} / one call of {per_chunk * args.chunks} (target <= 1.1)",
                chunked / one,
                f"{chunked:.2f} s vs {one:.2f} s",
            )
        ],
        [
            f"medians of {args.repeats} alternating repetitions; a row that ends with EOS is not continued, in both variants"
        ],
    )
    if hasattr(sampler, "close"):
        sampler.close()


if __name__ == "__main__":
    main()
