"""The lean decode loop (``sampler.engine=loop``) on the embedded SmolLM2: near-greedy tokens equal to
Hugging Face ``generate`` row for row while rows end at different lengths, in one call and in
chunks continued from the kept KV; and the bf16 copy's log-probs against the fp32 trainer."""

from __future__ import annotations

import torch

from mintrl.sampler.hf import HFSampler, score_sequences

QUESTIONS = (
    "What is 2 + 3? Answer with the number only.",
    "Say yes.",
    "Name a colour.",
    "Explain why the sky is blue.",
    "What is the capital of France? One word.",
    "Count to ten.",
)


def _prompts(tokenizer):
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for q in QUESTIONS
    ]


def test_loop_equals_generate_near_greedy_on_the_embedded_model(embedded, tokenizer):
    """T = 1e-3: the same tokens and finished flags as ``generate`` for six prompts whose answers
    end at different lengths (some at the 32-token budget), in one call; and in two 16-token chunks
    continued from the kept KV (``cache_keys``)."""
    prompts = _prompts(tokenizer)
    out = {}
    for engine in ("generate", "loop"):
        sampler = HFSampler(embedded.model, tokenizer, engine=engine, dtype="fp32")
        torch.manual_seed(0)
        out[engine] = sampler.generate(prompts, 32, temperature=1e-3)
    assert [t.tolist() for t in out["loop"].token_ids] == [t.tolist() for t in out["generate"].token_ids]
    assert out["loop"].finished == out["generate"].finished
    lengths = [len(t) for t in out["loop"].token_ids]
    print(f"near-greedy lengths {lengths}, finished {out['loop'].finished}")
    assert len(set(lengths)) >= 3 and any(out["loop"].finished) and not all(out["loop"].finished)

    chunked = HFSampler(embedded.model, tokenizer, engine="loop", dtype="fp32")
    first = chunked.generate(prompts, 16, temperature=1e-3, cache_keys=range(len(prompts)))
    rest = [i for i, done in enumerate(first.finished) if not done]
    second = chunked.generate(
        [prompts[i] + first.token_ids[i].tolist() for i in rest], 16, temperature=1e-3, cache_keys=rest
    )
    assert chunked.reused_tokens > 0
    joined = [t.tolist() for t in first.token_ids]
    for j, i in enumerate(rest):
        joined[i] += second.token_ids[j].tolist()
    assert joined == [t.tolist() for t in out["generate"].token_ids]


def test_bf16_loop_logprobs_are_the_trainers_within_bf16_rounding(embedded, tokenizer):
    """``dtype=bf16``: log-probs of the sampled tokens against the fp32 trainer's scoring (mean and
    max gap printed); the bound is loose, bf16 keeps ~3 significant digits."""
    prompts = _prompts(tokenizer)
    sampler = HFSampler(embedded.model, tokenizer, engine="loop", dtype="bf16")
    torch.manual_seed(1)
    gen = sampler.generate(prompts, 24, temperature=1.0)
    scored = score_sequences(
        embedded.model, [p + t.tolist() for p, t in zip(prompts, gen.token_ids)], [len(p) for p in prompts]
    )
    gap = torch.cat([(s - lp).abs() for s, lp in zip(scored, gen.logprobs)])
    print(f"bf16 loop: mean |sampler - fp32 trainer| = {gap.mean().item():.3e} nats, max {gap.max().item():.3e}")
    assert 0 < gap.mean().item() < 0.05
