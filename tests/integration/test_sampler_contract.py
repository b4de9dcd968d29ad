"""One contract suite, run against every sampler backend (``sampler=hf`` and ``sampler=vllm``).

What the rollout loop relies on (:mod:`mintrl.sampler.base`): token ids and log-probs of the same
length within the budget; log-probs are ``log_softmax(logits / T)`` of the sampled token and agree
with the trainer's own teacher-forced computation (mean absolute gap reported and bounded);
continuing from a prefix equals one call; EOS ends a row and is its last token; the prompt ids are
used as given; after an optimizer step the next call samples from the new weights.

The vLLM rows run where vLLM is installed (``make test-vllm``: the CPU build in ``.venv-vllm``; the
GPU check script runs them against official vLLM) and are skipped elsewhere.

The ``-lora`` backends run the same suite on a LoRA policy (``model/lora=default``) whose adapter is
not zero: the HF sampler generates with the adapter active, the vLLM engine receives the merged
weights; every log-prob is compared with the trainer's forward of the adapter model.
"""

from __future__ import annotations

import copy

import pytest
import torch

from mintrl.model.lora import LoraSettings, apply_lora
from mintrl.sampler import HFSampler, VLLMSampler
from mintrl.sampler.hf import score_sequences
from mintrl.sampler.weights import weights_generation

LORA_BACKENDS = ["hf-lora", pytest.param("vllm-lora", marks=pytest.mark.vllm)]
BACKENDS = ["hf", "hf-loop", pytest.param("vllm", marks=pytest.mark.vllm), *LORA_BACKENDS]
GAP_REPORT: dict[str, float] = {}


def lora_policy(model):
    """A LoRA copy of ``model`` (r 8 on every linear layer) with a trained-looking adapter: B drawn
    at random, so the adapter changes the log-probs (~0.03 nats per token: small enough that the
    near-greedy continuation tests meet no new near-ties; B ~ N(0, 0.02) gave 0.13 and one)."""
    torch.manual_seed(0)
    policy = apply_lora(copy.deepcopy(model), LoraSettings(r=8, alpha=16.0))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.005)
    return policy.eval()


def make_sampler(kind: str, model, tokenizer):
    if kind.endswith("-lora"):
        model, kind = lora_policy(model), kind.removesuffix("-lora")
    if kind in ("hf", "hf-loop"):  # hf: Hugging Face generate; hf-loop: the lean decode loop; both fp32 (exact)
        return HFSampler(model, tokenizer, engine="loop" if kind == "hf-loop" else "generate", dtype="fp32")
    # fp32 engine (the policy's dtype), eager: starts in seconds on CPU
    return VLLMSampler(model, tokenizer, max_model_len=1024, cpu_kv_cache_gib=1, enforce_eager=True)


@pytest.fixture(scope="module", params=BACKENDS)
def sampler(request, embedded, tokenizer):
    s = make_sampler(request.param, embedded.model, tokenizer)  # s.model: the policy the trainer scores
    s.kind = request.param
    yield s
    if hasattr(s, "close"):
        s.close()


def _prompts(tokenizer, texts=("What is 2 + 3?", "Name a colour.", "Count to five.")):
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for t in texts
    ]


def _gap(model, prompts, gen, temperature) -> torch.Tensor:
    """Per-token |sampler - trainer| log-prob differences of a generation, concatenated."""
    scored = score_sequences(
        model, [p + ids.tolist() for p, ids in zip(prompts, gen.token_ids)], [len(p) for p in prompts], temperature
    )
    for s, lp in zip(scored, gen.logprobs):
        assert s.shape == lp.shape
    return torch.cat([(s - lp).abs() for s, lp in zip(scored, gen.logprobs)])


def test_shapes_types_and_budget(sampler, tokenizer):
    prompts = _prompts(tokenizer)
    torch.manual_seed(0)
    gen = sampler.generate(prompts, 10, temperature=0.9)
    assert len(gen.token_ids) == len(gen.logprobs) == len(gen.finished) == 3
    for ids, lps in zip(gen.token_ids, gen.logprobs):
        assert ids.dtype == torch.long and lps.dtype == torch.float32
        assert ids.ndim == lps.ndim == 1 and 0 < len(ids) == len(lps) <= 10
        assert (lps <= 0).all() and torch.isfinite(lps).all()
        assert ((ids >= 0) & (ids < len(tokenizer))).all()


def test_logprobs_match_the_trainer(sampler, tokenizer):
    """Mean |sampler - trainer| per token, at two temperatures (processed log-probs, not raw)."""
    prompts = _prompts(tokenizer)
    for temperature in (1.0, 0.6):
        torch.manual_seed(1)
        gap = _gap(sampler.model, prompts, sampler.generate(prompts, 24, temperature=temperature), temperature)
        GAP_REPORT[f"{sampler.kind} T={temperature}"] = gap.mean().item()
        print(
            f"{sampler.kind} T={temperature}: mean |sampler - trainer| log-prob = {gap.mean().item():.2e} nats over {gap.numel()} tokens, max {gap.max().item():.2e}"
        )
        assert gap.mean().item() < 1e-3 and gap.max().item() < 2e-2


TIE_NATS = 0.2  # top-2 logit gap under which near-greedy sampling (T=0.02: a 10-nat gap) may pick either


def _same_until_a_tie(model, prompt: list[int], got: list[int], want: list[int]) -> None:
    """``got == want`` token for token, except that from the first position where they differ the
    rest is not compared when the policy's two likeliest tokens there are within ``TIE_NATS``
    (a real tie: which one a near-greedy draw picks depends on the random stream)."""
    for j, (a, b) in enumerate(zip(got, want)):
        if a == b:
            continue
        with torch.no_grad():
            ids = torch.tensor([prompt + want[:j]], device=next(model.parameters()).device)
            top = model(input_ids=ids).logits[0, -1].float().topk(2).values
        gap = float(top[0] - top[1])
        assert gap < TIE_NATS, f"token {j}: {a} != {b} where the policy's top-2 gap is {gap:.3f} nats (no tie)"
        return
    assert len(got) == len(want)


def test_continuation_from_a_prefix_equals_one_call(sampler, tokenizer):
    """Near-greedy (T=0.02): 8 tokens in one call = 4 + 4 via continuation, token for token; and
    the continued log-probs are those of the full sequence."""
    prompts = _prompts(tokenizer)
    torch.manual_seed(2)
    one = sampler.generate(prompts, 8, temperature=0.02)
    first = sampler.generate(prompts, 4, temperature=0.02)
    second = sampler.generate([p + ids.tolist() for p, ids in zip(prompts, first.token_ids)], 4, temperature=0.02)
    for i in range(len(prompts)):
        if first.finished[i]:
            continue
        both = torch.cat([first.token_ids[i], second.token_ids[i]])
        _same_until_a_tie(sampler.model, prompts[i], both.tolist(), one.token_ids[i].tolist())
    torch.manual_seed(3)
    first = sampler.generate(prompts, 5, temperature=0.8)
    second = sampler.generate([p + ids.tolist() for p, ids in zip(prompts, first.token_ids)], 5, temperature=0.8)
    for i, p in enumerate(prompts):
        response = first.token_ids[i].tolist() + second.token_ids[i].tolist()
        scored = score_sequences(sampler.model, [p + response], [len(p)], 0.8)[0]
        sampled = torch.cat([first.logprobs[i], second.logprobs[i]])
        assert (scored - sampled).abs().max().item() < 2e-2, f"row {i}"


def test_continuation_with_cache_keys_equals_one_call(sampler, tokenizer):
    """The rollout loop's calls name each row's rollout (``cache_keys``): continuing from kept KV
    gives the same tokens (near-greedy) and the full sequence's log-probs. The HF sampler re-encodes
    one token per row of the second call; the rest of each prefix comes from the first call."""
    prompts = _prompts(tokenizer)
    torch.manual_seed(2)
    one = sampler.generate(prompts, 8, temperature=0.02)
    first = sampler.generate(prompts, 4, temperature=0.02, cache_keys=[10, 11, 12])
    prefixes = [p + ids.tolist() for p, ids in zip(prompts, first.token_ids)]
    reused = getattr(sampler, "reused_tokens", 0)
    second = sampler.generate(prefixes, 4, temperature=0.02, cache_keys=[10, 11, 12])
    if sampler.kind.startswith("hf"):
        assert sampler.reused_tokens - reused == sum(len(p) - 1 for p in prefixes)
    assert not all(first.finished), "a row must continue for the comparison to mean anything"
    for i in range(len(prompts)):
        # a row that ended in the first call is the one call's row (the same EOS); the rest continue
        joined = first.token_ids[i].tolist() + ([] if first.finished[i] else second.token_ids[i].tolist())
        _same_until_a_tie(sampler.model, prompts[i], joined, one.token_ids[i].tolist())
    torch.manual_seed(3)
    first = sampler.generate(prompts, 5, temperature=0.8, cache_keys=[20, 21, 22])
    cut = [p + ids.tolist()[:3] for p, ids in zip(prompts, first.token_ids)]  # truncated, as after a judge's cut
    second = sampler.generate(cut, 5, temperature=0.8, cache_keys=[20, 21, 22])
    for i, p in enumerate(cut):
        scored = score_sequences(sampler.model, [p + second.token_ids[i].tolist()], [len(p)], 0.8)[0]
        assert (scored - second.logprobs[i]).abs().max().item() < 2e-2, f"row {i}"
    sampler.release()
    if sampler.kind.startswith("hf"):
        assert sampler._kept == {}


def test_eos_ends_a_row_and_is_its_last_token(sampler, tokenizer):
    torch.manual_seed(0)
    out = sampler.generate(_prompts(tokenizer) * 4, 48)
    eos = set(sampler.eos_token_ids)
    assert any(out.finished), "the embedded model ends some short answers within 48 tokens"
    for ids, lps, done in zip(out.token_ids, out.logprobs, out.finished):
        assert len(ids) == len(lps) <= 48
        assert done == (ids[-1].item() in eos)
        assert not any(t in eos for t in ids[:-1].tolist())
        if not done:
            assert len(ids) == 48  # only the budget ends an unfinished row


def test_prompt_ids_are_used_as_given(sampler, tokenizer):
    """A raw prefix without BOS or chat template: the trainer's log-probs of the continuation agree,
    which they would not if the backend added a BOS or a template."""
    raw = tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    torch.manual_seed(4)
    gen = sampler.generate([raw], 6, temperature=1.0)
    assert _gap(sampler.model, [raw], gen, 1.0).max().item() < 2e-2


def test_per_row_budgets_stop_each_row_at_its_own(sampler, tokenizer):
    """Budgets 2, 9 and 5 in one call: no row passes its own; a row cut by its budget is unfinished;
    its tokens are those of a call with that budget alone, where a near-greedy draw makes them equal."""
    prompts = _prompts(tokenizer)
    torch.manual_seed(4)
    gen = sampler.generate(prompts, [2, 9, 5], temperature=0.02)
    for ids, finished, budget in zip(gen.token_ids, gen.finished, [2, 9, 5]):
        assert 0 < len(ids) <= budget
        assert finished or len(ids) == budget
    alone = sampler.generate([prompts[2]], 5, temperature=0.02)
    assert gen.token_ids[2].tolist() == alone.token_ids[0].tolist()


def test_bad_arguments_are_refused(sampler):
    with pytest.raises(ValueError, match="max_new_tokens"):
        sampler.generate([[1, 2]], 0)
    with pytest.raises(ValueError, match="max_new_tokens of row 1 must be positive"):
        sampler.generate([[1, 2], [3]], [4, 0])
    with pytest.raises(ValueError, match="2 budgets for 1 prefixes"):
        sampler.generate([[1, 2]], [4, 4])
    with pytest.raises(ValueError, match="row 1 is empty"):
        sampler.generate([[1, 2], []], 4)
    with pytest.raises(ValueError, match="temperature"):
        sampler.generate([[1, 2]], 4, temperature=0.0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_next_call_after_an_optimizer_step_uses_the_new_weights(kind, embedded, tokenizer):
    """Weight sync: after an SGD step on the policy, the same long prefix (cached by vLLM's prefix
    cache, kept by the HF sampler under its cache key) gives log-probs of the *new* weights, and
    they differ from the old weights' ones."""
    sampler = make_sampler(kind, copy.deepcopy(embedded.model), tokenizer)
    policy = sampler.model  # a LoRA policy for the -lora backends: the step moves only its adapter
    # ~270 tokens: several KV blocks, so a prefix cache that survived the push would be hit
    prompt = _prompts(
        tokenizer,
        [" ".join(["Explain step by step why the sum of two even numbers is always even, then give an example."] * 12)],
    )
    try:
        torch.manual_seed(5)
        before = sampler.generate(prompt, 12, temperature=1.0, cache_keys=[0])  # HF keeps this row's KV
        sequence = prompt[0] + before.token_ids[0].tolist()
        old = score_sequences(policy, [sequence], [len(prompt[0])], 1.0)[0]
        # LoRA: only the adapter moves, and its gradient is small (A B with B ~ 0): a larger step
        lr = 0.5 if kind.endswith("-lora") else 5e-3
        optimizer = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=lr)
        ids = torch.tensor([sequence])
        loss = -policy(input_ids=ids, labels=ids).loss  # push the sampled text away: log-probs move
        loss.backward()
        optimizer.step()
        weights_generation(policy).advance()  # what the training module does after every optimizer step
        optimizer.zero_grad()
        new = score_sequences(policy, [sequence], [len(prompt[0])], 1.0)[0]
        assert (new - old).abs().mean().item() > 0.02, (
            "the step must move the log-probs for this test to see a stale engine"
        )
        torch.manual_seed(5)
        after = sampler.generate(prompt, 12, temperature=1.0, cache_keys=[0])  # ... and must not reuse it now
        gap = _gap(policy, prompt, after, 1.0)
        GAP_REPORT[f"{kind} after a weight sync"] = gap.mean().item()
        print(f"{kind}: mean |sampler - trainer| after an optimizer step = {gap.mean().item():.2e} nats")
        assert gap.mean().item() < 1e-3
        if kind.startswith("vllm"):
            assert sampler.syncs == 2  # the first call and the call after the step; none in between
    finally:
        if hasattr(sampler, "close"):
            sampler.close()


@pytest.mark.parametrize("kind", LORA_BACKENDS)
def test_a_lora_policy_samples_with_its_adapter_active(kind, embedded, tokenizer):
    """The sampler's log-probs are the adapter model's (HF: the live PeftModel; vLLM: the merged
    weights pushed at the first call), not the base model's."""
    sampler = make_sampler(kind, embedded.model, tokenizer)
    prompts = _prompts(tokenizer)
    try:
        torch.manual_seed(6)
        gen = sampler.generate(prompts, 24, temperature=1.0)
        to_adapter, to_base = _gap(sampler.model, prompts, gen, 1.0), _gap(embedded.model, prompts, gen, 1.0)
        print(
            f"{kind}: mean gap to the adapter model {to_adapter.mean().item():.2e}, to the base {to_base.mean().item():.2e}"
        )
        assert to_adapter.mean().item() < 1e-3 and to_base.mean().item() > 0.01
    finally:
        if hasattr(sampler, "close"):
            sampler.close()


@pytest.mark.parametrize(
    "field, value",
    [
        ("block_size", 0),
        ("block_size", 24.0),
        ("sleep_level", 3),
        ("score_with", "judge"),
        ("cpu_kv_cache_gib", 0.5),
        ("gpu_memory_utilization", 1.5),
        ("max_model_len", 0),
    ],
)
def test_vllm_sampler_names_a_bad_knob(tiny_model, field, value):
    """Checked when the sampler is built, before the tokenizer is read or any engine starts (runs
    without vLLM installed)."""
    with pytest.raises(ValueError, match=f"sampler.{field}"):
        VLLMSampler(tiny_model, None, **{field: value})


def test_hf_continuation_cache_keeps_unfinished_rows_within_its_budget(tiny_model):
    """Kept KV per row = its tokens minus the last sampled one; a tiny Llama stores 2 layers x (K, V)
    x 2 KV heads x 8 dims x 4 bytes = 256 bytes per token. Finished rows are not kept; a row without
    kept KV of its own borrows another row's shared prefix; the budget
    (``continuation_cache_mib``, here set in bytes) stops keeping rows once full; 0 turns it off."""
    from types import SimpleNamespace

    tok = SimpleNamespace(pad_token_id=0, eos_token_id=2)
    prefixes = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    sampler = HFSampler(tiny_model, tok, engine="generate", dtype="fp32")  # generate: every row draws every step
    torch.manual_seed(0)
    probe = sampler.generate(prefixes, 3)
    sampler.eos_token_ids = (2, int(probe.token_ids[2][0]))  # the same draws again: row "c" now ends at its first token
    torch.manual_seed(0)
    out = sampler.generate(prefixes, 3, cache_keys=["a", "b", "c"])
    assert out.finished[2] and not all(out.finished)
    kept = [k for k, done in zip("abc", out.finished) if not done]
    assert sorted(sampler._kept) == kept
    expected = sum(256 * (len(p) + len(t) - 1) for p, t, done in zip(prefixes, out.token_ids, out.finished) if not done)
    assert sampler._kept_bytes == expected
    assert all(
        sampler._kept[k][1][0][0].shape == (2, len(prefixes[i]) + len(out.token_ids[i]) - 1, 8)
        for i, k in enumerate("abc")
        if k in kept
    )
    # row "a" continues from its own 5 kept tokens; a new row [5, 6, 7, 30] borrows the 3 prompt
    # tokens it shares with "a" (a group's prompt): each re-encodes max(6 - 5, 4 - 3) = 1 token
    assert "a" in kept and len(out.token_ids[0]) == 3
    sampler.generate([prefixes[0] + out.token_ids[0].tolist(), [5, 6, 7, 30]], 2, cache_keys=["a", "new"])
    assert sampler.reused_tokens == 5 + 3
    small = HFSampler(tiny_model, tok, engine="generate", dtype="fp32")
    small.cache_bytes = 256 * 5  # room for row "a" (3 + 3 - 1 tokens) only
    torch.manual_seed(1)
    out = small.generate(prefixes[:2], 3, cache_keys=["a", "b"])
    assert out.finished == [False, False] and list(small._kept) == ["a"] and small._kept_bytes == 256 * 5
    off = HFSampler(tiny_model, tok, continuation_cache_mib=0, dtype="fp32")
    off.generate(prefixes, 3, cache_keys=["a", "b", "c"])
    off.generate([p + [20] for p in prefixes], 3, cache_keys=["a", "b", "c"])
    assert off._kept == {} and off.reused_tokens == 0
    with pytest.raises(ValueError, match="sampler.continuation_cache_mib"):
        HFSampler(tiny_model, tok, continuation_cache_mib=-1)
