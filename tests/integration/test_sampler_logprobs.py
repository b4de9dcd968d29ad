"""The HF sampler's log-probs and chunked continuation on the embedded model agree with one
teacher-forced forward pass (every sampler's contract: integration/test_sampler_contract.py)."""

import torch

from mintrl.sampler import HFSampler
from mintrl.sampler.hf import score_sequences


def _prompts(tokenizer):
    texts = ["What is 2 + 3?", "Name a colour."]
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for t in texts
    ]


def test_sampler_logprobs_and_chunked_continuation_match_one_forward_pass(embedded, tokenizer):
    sampler = HFSampler(embedded.model, tokenizer, dtype="fp32")
    prompts = _prompts(tokenizer)
    torch.manual_seed(3)
    first = sampler.generate(prompts, 6, temperature=0.8)
    prefixes = [p + ids.tolist() for p, ids in zip(prompts, first.token_ids)]
    second = sampler.generate(prefixes, 6, temperature=0.8)  # continue from the prefix (chunk 2)
    for i, p in enumerate(prompts):
        response = first.token_ids[i].tolist() + second.token_ids[i].tolist()
        sampled = torch.cat([first.logprobs[i], second.logprobs[i]])
        scored = score_sequences(embedded.model, [p + response], [len(p)], temperature=0.8)[0]
        assert scored.shape == sampled.shape
        diff = (scored - sampled).abs()
        assert diff.max().item() < 2e-3, f"row {i}: max |sampler - forward| = {diff.max().item():.2e}"
        assert (sampled <= 0).all()
