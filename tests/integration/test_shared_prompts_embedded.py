"""Shared-prompt forward on the embedded model equals the plain forward."""

import torch

from mintrl.model.logprobs import token_logprobs


def test_shared_prompt_forward_on_the_embedded_model(embedded):
    model, tok = embedded.model, embedded.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}], add_generation_prompt=True, tokenize=True
    )["input_ids"]
    responses = [tok.encode("3 + 4 = 7."), tok.encode("The answer is <answer>7</answer>"), tok.encode("It is 8.")]
    width = len(prompt) + max(map(len, responses))
    ids = torch.full((3, width), tok.pad_token_id)
    attn = torch.zeros_like(ids)
    targets = torch.zeros_like(ids, dtype=torch.bool)
    for i, r in enumerate(responses):
        ids[i, : len(prompt) + len(r)] = torch.tensor(prompt + r)
        attn[i, : len(prompt) + len(r)] = 1
        targets[i, len(prompt) : len(prompt) + len(r)] = True
    with torch.no_grad():
        plain, _ = token_logprobs(model, ids.to(model.device), attn.to(model.device), targets.to(model.device))
        shared, _ = token_logprobs(
            model, ids.to(model.device), attn.to(model.device), targets.to(model.device), share_prompts=True
        )
    assert torch.allclose(shared, plain, atol=1e-4), (shared - plain).abs().max()
    assert (plain[targets.to(plain.device)] < 0).all()
