"""Time of one update of the main job in fp32 (``trainer.precision=32-true``) and in bf16-mixed
(the CPU trainer's default where the CPU has native bf16), side by side in one run.

One update as :class:`mintrl.training.module.PolicyModule` runs it with one update per rollout
batch (the main job): the forward + backward of :func:`mintrl.model.logprobs.token_logprobs`
(shared prompts, responses in length buckets, LM head in fp32; under bf16-mixed this forward is
also the rollout log-prob recomputation, so no extra pass), gradient clipping and one AdamW step on
fp32 master weights; bf16-mixed runs the forwards
under ``torch.autocast("cpu", bfloat16)`` as Lightning's CPU mixed precision does. Shapes are the
main job's: 8 prompts x 4 rollouts, prompts of the main job's template, response lengths drawn
from real rollout records (``benchmarks/sampler_speed.py``'s source), every row padded to the
batch's longest. Variants alternate (``--repeats``), one warm-up each.

    .venv/bin/python benchmarks/update_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import random

import torch
from _common import alternate, median
from sampler_speed import RECORDS, real_spread

from mintrl.data.base import DEFAULT_INSTRUCTION, prompt_ids
from mintrl.model import embedded_smollm2
from mintrl.model.logprobs import token_logprobs


def make_batch(tok, questions, pool, rng, groups: int, group: int, budget: int):
    """``(input_ids, attention_mask, target_mask)`` ``[N, L]``: right-padded prompt + response rows."""
    prompts = [prompt_ids(tok, DEFAULT_INSTRUCTION, q, 512, "bench") for q in rng.sample(questions, groups)]
    rows = [
        p + [rng.randrange(100, 40000) for _ in range(min(rng.choice(pool), budget))]
        for p in prompts
        for _ in range(group)
    ]
    lengths = [(len(prompts[i // group]), len(r)) for i, r in enumerate(rows)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn, targets = torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
    for i, (r, (p, n)) in enumerate(zip(rows, lengths)):
        ids[i, :n], attn[i, :n] = torch.tensor(r), 1
        targets[i, p:n] = True
    return ids, attn, targets


def update(model, optimizer, batch, mixed: bool) -> None:
    ids, attn, targets = batch
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if mixed else contextlib.nullcontext()
    with autocast:
        logprobs, _ = token_logprobs(model, ids, attn, targets, 1.0, 256, True)
        loss = -(logprobs.sum(-1) / targets.sum(-1).clamp(min=1)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded = embedded_smollm2()
    tok = loaded.tokenizer
    pool, questions, source = real_spread(RECORDS)
    rng = random.Random(0)
    batches = [
        make_batch(tok, questions, pool, rng, args.groups, args.group, args.budget) for _ in range(args.repeats + 1)
    ]
    variants = {}
    for name, mixed in (("fp32", False), ("bf16-mixed", True)):
        model = copy.deepcopy(loaded.model).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        update(model, optimizer, batches[0], mixed)  # warm-up
        it = iter(batches[1:])
        variants[name] = lambda m=model, o=optimizer, mx=mixed, b=it: update(m, o, next(b), mx)
    times = alternate(variants, args.repeats)
    tokens = sum(int(t.sum()) for _, _, t in batches[1:]) / args.repeats
    print(f"\n## update time: {args.groups} prompts x {args.group} rollouts, lengths from {source}")
    print(
        f"mean response tokens per batch {tokens:.0f}; torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}"
    )
    print("\n| precision | s per update (median) | vs fp32 |")
    print("|---|---:|---:|")
    for name in variants:
        print(f"| {name} | {median(times[name]):.2f} | {median(times[name]) / median(times['fp32']):.2f}x |")


if __name__ == "__main__":
    main()
