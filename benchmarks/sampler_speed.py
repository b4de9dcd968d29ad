"""Useful tokens/s of ``sampler=hf``'s two engines (``loop``: the lean decode loop; ``generate``:
Hugging Face ``generate``) in fp32 and bf16, on the main job's shapes, side by side in one run.

The main job samples 32 rows (8 prompts x 4 rollouts, ``--group``) in 16-token chunks up to 64 tokens, each
chunk continuing from the kept KV (``cache_keys``). What the engines differ on is the length
spread: ``generate`` runs finished rows on until the longest row of the call ends, the loop drops
them. So that every engine meets the same spread, each row's response length is fixed beforehand,
drawn from the control (pure on-policy) rollouts of real runs' records
(``/tmp/runs/*/rollouts/train/step_*.jsonl.gz``; else :data:`FALLBACK_LENGTHS`), and a forward hook
on the sampling model enforces it: the row samples an EOS at exactly that step and no EOS before
(its other logits are the model's). Prompts are the records' questions in the main job's template.
Useful tokens = tokens returned (each row's length); the wall time covers the four chunk calls.
Engines alternate (``--repeats`` batches, a new length draw per batch, the same for every engine);
one warm-up batch each first. The bf16 copy's refresh (once per optimizer step in training) is
timed separately.

    .venv/bin/python benchmarks/sampler_speed.py [--rows 32 --budget 64 --chunk 16 --repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import time

import torch
from _common import alternate, median

from mintrl.data.base import DEFAULT_INSTRUCTION, prompt_ids
from mintrl.model import embedded_smollm2
from mintrl.sampler import HFSampler
from mintrl.sampler import decode as decode_module
from mintrl.sampler.weights import weights_generation

RECORDS = "/tmp/runs/*/rollouts/train/step_*.jsonl.gz"
# policy tokens of the 16 control rollouts of step 0 of a `make train` run (commit 2011b49), used
# when no records are found
FALLBACK_LENGTHS = [2, 8, 9, 9, 10, 10, 12, 17, 19, 21, 26, 38, 57, 64, 64, 64]
FALLBACK_QUESTIONS = [f"Calculate {a} + {b}." for a in range(1, 10) for b in range(1, 10)]


def real_spread(pattern: str) -> tuple[list[int], list[str], str]:
    """Response lengths (policy tokens) of the control rollouts and the questions of the records
    matching ``pattern``, with where they came from."""
    lengths, questions, files = [], [], sorted(glob.glob(pattern))
    for path in files:
        with gzip.open(path, "rt") as f:
            for line in f:
                record = json.loads(line)
                questions.append(record["question"])
                if record["control"]:
                    lengths.append(int(record["tokens"]["policy"]))
    if not lengths:
        return FALLBACK_LENGTHS, FALLBACK_QUESTIONS, "FALLBACK_LENGTHS (no records found)"
    return lengths, sorted(set(questions)), f"{len(lengths)} control rollouts of {len(files)} record files ({pattern})"


class ForcedLengths:
    """Makes row ``i`` of a sampler call sample an EOS at exactly its ``targets[i]``-th token (None:
    never), and no EOS before, by editing the logits each step before the draw. ``generate`` draws
    from all its rows every step (the hook runs on the model's output); the loop draws from the rows
    still running, in order (the hook runs on :func:`mintrl.sampler.decode.sample`'s input)."""

    def __init__(self, eos_token_ids):
        self.eos = list(eos_token_ids)
        self.targets: list[int | None] = []
        self.alive: list[int] = []
        self.step = 0

    def start(self, targets: list[int | None]) -> None:
        """Before each sampler call: the tokens after which each row ends (None: not in this call)."""
        self.targets, self.alive, self.step = list(targets), list(range(len(targets))), 0

    def force(self, logits: torch.Tensor) -> None:
        """Edit one step's ``[A, V]`` logits in place (``A``: all rows, or those still running)."""
        rows = range(len(self.targets)) if logits.shape[0] == len(self.targets) else self.alive
        assert logits.shape[0] == len(rows), (logits.shape, len(rows), self.targets, self.step, self.alive)
        ending = []
        for j, i in enumerate(rows):
            if self.targets[i] == self.step + 1:
                logits[j] = -1e4
                logits[j, self.eos[0]] = 0.0
                ending.append(i)
            else:
                logits[j, self.eos] = -1e4
        self.alive = [i for i in self.alive if i not in ending]
        self.step += 1


ACTIVE: dict = {"hook": None, "engine": None}  # the engine being timed and its ForcedLengths


def _on_model_output(module, args, output):
    if ACTIVE["engine"] == "generate":
        ACTIVE["hook"].force(output.logits[:, -1])
    return output


_draw = decode_module.sample


def _forced_sample(logits, temperature, top_p):
    if ACTIVE["engine"] == "loop":
        logits = logits.clone()
        ACTIVE["hook"].force(logits)
    return _draw(logits, temperature, top_p)


decode_module.sample = _forced_sample


def run_batch(sampler: HFSampler, hook: ForcedLengths, prompts, lengths, budget: int, chunk: int) -> int:
    """The main job's chunked generation of one batch; returns the tokens sampled (= sum of lengths)."""
    ACTIVE.update(hook=hook, engine=sampler.engine)
    active = [(row, list(p)) for row, p in enumerate(prompts)]
    total = 0
    for done in range(0, budget, chunk):
        if not active:
            break
        hook.start([lengths[row] - done if lengths[row] - done <= chunk else None for row, _ in active])
        out = sampler.generate(
            [p for _, p in active], chunk, temperature=1.0, top_p=1.0, cache_keys=[row for row, _ in active]
        )
        total += sum(len(t) for t in out.token_ids)
        active = [(row, p + t.tolist()) for (row, p), t, f in zip(active, out.token_ids, out.finished) if not f]
    sampler.release()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt (rows share it)")
    parser.add_argument("--budget", type=int, default=64, help="tokens per response")
    parser.add_argument("--chunk", type=int, default=16, help="tokens per generate call")
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per engine")
    parser.add_argument("--records", default=RECORDS)
    args = parser.parse_args()
    loaded = embedded_smollm2()
    policy, tok = loaded.model.eval(), loaded.tokenizer
    pool, questions, source = real_spread(args.records)
    pool = [min(n, args.budget) for n in pool]
    rng = random.Random(0)
    batches = [
        (
            [q for q in rng.sample(questions, args.rows // args.group) for _ in range(args.group)],
            [rng.choice(pool) for _ in range(args.rows)],
        )
        for _ in range(args.repeats + 1)
    ]
    batches = [([prompt_ids(tok, DEFAULT_INSTRUCTION, q, 512, "bench") for q in qs], ls) for qs, ls in batches]
    engines = {
        f"{e} {d}": HFSampler(policy, tok, engine=e, dtype=d) for e in ("loop", "generate") for d in ("fp32", "bf16")
    }
    hooks = {name: ForcedLengths(sampler.eos_token_ids) for name, sampler in engines.items()}
    for module in {id(m): m for m in (sampler.sampling_model() for sampler in engines.values())}.values():
        module.register_forward_hook(_on_model_output)  # bf16: the copies are made before any hook
    tokens: dict[str, list[int]] = {name: [] for name in engines}
    warm = batches[0]
    for name, sampler in engines.items():
        run_batch(sampler, hooks[name], *warm, args.budget, args.chunk)
    position = {"i": 0}

    def runner(name):
        def fn():
            prompts, lengths = batches[1 + position["i"] // len(engines)]
            position["i"] += 1
            tokens[name].append(run_batch(engines[name], hooks[name], prompts, lengths, args.budget, args.chunk))

        return fn

    times = alternate({name: runner(name) for name in engines}, args.repeats)
    for name in engines:  # every engine sampled exactly the drawn lengths
        assert tokens[name] == [sum(ls) for _, ls in batches[1:]], (name, tokens[name])
    bf16 = engines["loop bf16"].copy
    weights_generation(bf16.policy).advance()  # as after an optimizer step
    start = time.perf_counter()
    bf16.current()
    refresh = time.perf_counter() - start

    prompt_len = sum(len(p) for qs, _ in batches for p in qs) / sum(len(qs) for qs, _ in batches)
    useful = {name: sum(tokens[name]) / sum(times[name]) for name in engines}
    reference = useful["generate fp32"]
    print(f"\n## sampler=hf speed: {args.rows} rows, {args.budget}-token budget in {args.chunk}-token chunks")
    print(
        f"lengths from {source}; mean response {sum(pool) / len(pool):.1f} tokens, "
        f"{sum(n >= args.budget for n in pool) / len(pool):.0%} at the budget; mean prompt {prompt_len:.0f} tokens; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}"
    )
    print("\n| engine | dtype | useful tokens/s | vs generate fp32 | s per batch (median) | tokens per batch |")
    print("|---|---|---:|---:|---:|---:|")
    for name in engines:
        engine, dtype = name.split()
        print(
            f"| {engine} | {dtype} | {useful[name]:.0f} | {useful[name] / reference:.2f}x | "
            f"{median(times[name]):.2f} | {sum(tokens[name]) / len(tokens[name]):.0f} |"
        )
    print(f"\nbf16 copy refresh after a weight change: {refresh:.3f} s (once per optimizer step)")


if __name__ == "__main__":
    main()
