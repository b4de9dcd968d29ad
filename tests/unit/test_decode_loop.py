"""The lean decode loop (``sampler.engine=loop``, :mod:`mintrl.sampler.decode`) against Hugging Face
``generate`` (``engine=generate``) on tiny random models: the same sampling distribution
(chi-square), log-probs equal to the trainer's scoring, finished rows dropped from the batch and the
KV cache without changing the others, the kept continuation cache, LoRA, and the bf16 copy."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_llama
from omegaconf import OmegaConf
from scipy.stats import chi2_contingency, chisquare
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaForCausalLM

from mintrl.core.precision import cpu_has_fast_bf16
from mintrl.model.lora import LoraSettings, apply_lora
from mintrl.sampler.decode import decode, distinct_rows, generation_positions, inverse_cdf_draw, left_pad
from mintrl.sampler.hf import HFSampler, score_sequences
from mintrl.sampler.weights import weights_generation

TOKENIZER = SimpleNamespace(pad_token_id=0, eos_token_id=2)
EOS = (2, 3, 4)  # ~8% of the mass per step: rows end at many different lengths
PREFIXES = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]  # three widths: left padding of 2, 3 and 0 columns
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sampler" / "hf.yaml"


def _llama(vocab: int = 24, init: float = 0.2) -> LlamaForCausalLM:
    """A 2-layer random Llama whose next-token distribution depends on the context (weights drawn
    with std ``init``: entropy ~2.5 nats of log(24) = 3.2, top token 0.2-0.4)."""
    return tiny_llama(vocab, 64, initializer_range=init)


def _gpt2() -> GPT2LMHeadModel:
    """A 2-layer random GPT-2: absolute position embeddings, so wrong positions change the logits."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=24, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    config.initializer_range = 0.2
    return GPT2LMHeadModel(config).eval()


def _sampler(model, engine: str, **kwargs) -> HFSampler:
    kwargs.setdefault("dtype", "fp32")
    sampler = HFSampler(model, TOKENIZER, max_batch_size=4096, engine=engine, **kwargs)
    sampler.eos_token_ids = EOS
    return sampler


def _outcome(ids: torch.Tensor, step: int) -> int:
    """The token a row sampled at ``step`` (0-based), or -1 when it had ended before."""
    return int(ids[step]) if step < len(ids) else -1


def _contingency(a: list[int], b: list[int], min_count: int = 10) -> list[list[int]]:
    """2 x K counts of two samples of outcomes; outcomes seen fewer than ``min_count`` times in
    both together are pooled into one column (the chi-square approximation needs ~5 expected)."""
    values = sorted(set(a) | set(b))
    common = [v for v in values if a.count(v) + b.count(v) >= min_count]
    rare = [v for v in values if v not in common]
    rows = [[s.count(v) for v in common] + ([sum(s.count(v) for v in rare)] if rare else []) for s in (a, b)]
    return rows


def _draws(model, engine: str, temperature: float, top_p: float, per_prefix: int, seed: int):
    sampler = _sampler(model, engine)
    torch.manual_seed(seed)
    prefixes = [p for p in PREFIXES for _ in range(per_prefix)]
    return sampler.generate(prefixes, 6, temperature=temperature, top_p=top_p)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_loop_samples_the_distribution_of_generate(temperature, top_p):
    """6000 rows per engine (2000 per prefix, >= 20k tokens each, rows of three widths ending at EOS
    anywhere in 6 steps): per prefix and for steps 1 and 5, the outcome (token, or ended) of the loop and of
    ``generate`` pass a chi-square test of homogeneity at 1%. The same test rejects ``generate`` at
    another temperature (power check: the test sees a distribution change of that size)."""
    model = _llama()
    loop = _draws(model, "loop", temperature, top_p, 2000, seed=0)
    reference = _draws(model, "generate", temperature, top_p, 2000, seed=1)
    other = _draws(model, "generate", temperature * 1.25, top_p, 2000, seed=2)
    assert sum(len(t) for t in loop.token_ids) >= 20_000 and sum(len(t) for t in reference.token_ids) >= 20_000
    assert 0.2 < sum(loop.finished) / len(loop.finished) < 0.8  # many rows leave the batch early
    p_values, p_other = [], []
    for g in range(len(PREFIXES)):
        rows = range(g * 2000, (g + 1) * 2000)
        for step in (1, 5):
            a = [_outcome(loop.token_ids[i], step) for i in rows]
            b = [_outcome(reference.token_ids[i], step) for i in rows]
            c = [_outcome(other.token_ids[i], step) for i in rows]
            p_values.append(chi2_contingency(_contingency(a, b)).pvalue)
            p_other.append(chi2_contingency(_contingency(c, b)).pvalue)
    print(f"T={temperature} top_p={top_p}: p loop vs generate {[round(p, 3) for p in p_values]}, other T {p_other}")
    assert min(p_values) > 0.01
    assert min(p_other) < 0.01


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_loop_logprobs_equal_the_trainers_scoring(kind):
    """Each sampled token's log-prob is ``log_softmax(logits / T)`` as the trainer computes it
    (teacher-forced, each row alone): rotary and absolute positions, left padding, compaction."""
    model = _llama() if kind == "llama" else _gpt2()
    sampler = _sampler(model, "loop")
    prefixes = PREFIXES * 4
    torch.manual_seed(3)
    gen = sampler.generate(prefixes, 8, temperature=0.7, top_p=0.9)
    assert any(gen.finished) and not all(gen.finished)
    scored = score_sequences(
        model, [p + t.tolist() for p, t in zip(prefixes, gen.token_ids)], [len(p) for p in prefixes], 0.7
    )
    gap = max((s - lp).abs().max().item() for s, lp in zip(scored, gen.logprobs))
    assert gap < 1e-5, gap


def test_finished_rows_leave_the_batch_and_the_others_are_unchanged():
    """Near-greedy (T = 1e-4): the loop gives ``generate``'s tokens row for row while rows of four
    widths end at steps 2, 3 and 6 (the widest first) and three run to the budget; each row is cut
    after its EOS; the cache keeps only the unfinished rows, with the columns that became padding
    in every one of them cut."""
    model = _llama()
    prefixes = [
        [5, 6, 7],
        [8, 9],
        [10, 11, 12, 13, 14],
        [15, 16, 17, 18, 19, 20, 21],
        [9, 8],
        [3, 3, 3, 3],
        [12, 1, 7, 22],
    ]
    eos = (3, 10, 14)  # chosen from the greedy continuations of these prefixes
    out = {}
    for engine in ("generate", "loop"):
        sampler = _sampler(model, engine)
        sampler.eos_token_ids = eos
        out[engine] = sampler.generate(prefixes, 8, temperature=1e-4)
    assert [t.tolist() for t in out["loop"].token_ids] == [t.tolist() for t in out["generate"].token_ids]
    assert out["loop"].finished == out["generate"].finished
    lengths = [len(t) for t in out["loop"].token_ids]
    assert lengths == [8, 8, 3, 2, 8, 6, 3]
    assert out["loop"].finished == [False, False, True, True, False, True, True]
    for ids, done in zip(out["loop"].token_ids, out["loop"].finished):
        assert done == (int(ids[-1]) in eos) and not set(ids[:-1].tolist()) & set(eos)

    ids, mask = left_pad(prefixes, 0)
    result = decode(model, ids, mask, 8, eos, 1e-4, 1.0, 0)
    assert result.lengths.tolist() == lengths
    assert result.cache_rows.tolist() == [0, 1, 4]
    # the 7-token row ended: rows of 3, 2, 2 tokens + 7 sampled need 10 columns, not 7 + 7
    assert result.cache.layers[0].keys.shape == (3, 2, 10, 8)
    assert result.cache_pad.tolist() == [0, 1, 1]
    assert (result.tokens[3, 2:] == 0).all() and (result.logprobs[3, 2:] == 0).all()


def test_loop_keeps_and_reuses_the_continuation_cache():
    """With ``cache_keys``: unfinished rows' KV kept (its tokens minus the last sampled one; 2 layers
    x (K, V) x 2 KV heads x 8 dims x 4 bytes = 256 bytes per token), finished rows not kept; the
    next call continues from it (``reused_tokens``) with log-probs equal to scoring the whole
    sequence, and near-greedy tokens equal to one uncached call."""
    model = _llama()
    sampler = _sampler(model, "loop")
    prefixes = PREFIXES * 2
    keys = list(range(len(prefixes)))
    torch.manual_seed(4)
    first = sampler.generate(prefixes, 4, temperature=0.9, cache_keys=keys)
    assert any(first.finished) and not all(first.finished)
    kept = [k for k, done in zip(keys, first.finished) if not done]
    assert sorted(sampler._kept) == kept
    assert sampler._kept_bytes == sum(256 * (len(prefixes[k]) + 4 - 1) for k in kept)
    nexts = [prefixes[k] + first.token_ids[k].tolist() for k in kept]
    second = sampler.generate(nexts, 5, temperature=0.9, cache_keys=kept)
    assert sampler.reused_tokens == sum(len(p) - 1 for p in nexts)
    scored = score_sequences(
        model, [p + t.tolist() for p, t in zip(nexts, second.token_ids)], [len(p) for p in nexts], 0.9
    )
    assert max((s - lp).abs().max().item() for s, lp in zip(scored, second.logprobs)) < 1e-5
    sampler.release()
    assert sampler._kept == {} and sampler._kept_bytes == 0

    one = _sampler(model, "loop").generate(PREFIXES, 9, temperature=1e-4)
    cached = _sampler(model, "loop")
    a = cached.generate(PREFIXES, 4, temperature=1e-4, cache_keys=[0, 1, 2])
    rest = [i for i, done in enumerate(a.finished) if not done]
    b = cached.generate([PREFIXES[i] + a.token_ids[i].tolist() for i in rest], 5, temperature=1e-4, cache_keys=rest)
    assert cached.reused_tokens > 0
    for j, i in enumerate(rest):
        assert a.token_ids[i].tolist() + b.token_ids[j].tolist() == one.token_ids[i].tolist()


def test_loop_samples_a_lora_policy_with_its_adapter_active():
    """A peft model with a non-zero adapter: the loop's log-probs are the adapter model's."""
    torch.manual_seed(0)
    policy = apply_lora(_llama(), LoraSettings(r=4, alpha=8.0))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.3)
    policy.eval()
    torch.manual_seed(5)
    gen = _sampler(policy, "loop").generate(PREFIXES, 6, temperature=1.0)
    sequences = [p + t.tolist() for p, t in zip(PREFIXES, gen.token_ids)]
    lengths = [len(p) for p in PREFIXES]
    adapter = score_sequences(policy, sequences, lengths)
    with policy.disable_adapter():
        base = score_sequences(policy, sequences, lengths)
    assert max((s - lp).abs().max().item() for s, lp in zip(adapter, gen.logprobs)) < 1e-5
    assert max((s - lp).abs().max().item() for s, lp in zip(base, gen.logprobs)) > 0.05


@pytest.mark.parametrize("engine", ["loop", "generate"])
def test_bf16_copy_follows_the_policy_weights(engine):
    """``dtype="bf16"``: the sampler samples from a bfloat16 copy (the policy stays fp32), whose
    log-probs are the fp32 trainer's within bf16 rounding, and which is refreshed exactly when the
    weights changed (an optimizer step), then equal to the new weights rounded to bf16."""
    policy = copy.deepcopy(_llama(vocab=128, init=0.02))
    sampler = _sampler(policy, engine, dtype="bf16")
    torch.manual_seed(6)
    gen = sampler.generate(PREFIXES, 6, temperature=1.0)
    sampler.generate(PREFIXES, 2)
    assert sampler.copy.refreshes == 1 and next(policy.parameters()).dtype == torch.float32
    assert all(p.dtype == torch.bfloat16 for p in sampler.sampling_model().parameters())
    scored = score_sequences(
        policy, [p + t.tolist() for p, t in zip(PREFIXES, gen.token_ids)], [len(p) for p in PREFIXES]
    )
    gap = torch.cat([(s - lp).abs() for s, lp in zip(scored, gen.logprobs)])
    assert 0 < gap.max().item() < 0.05, gap.max().item()

    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    ids = torch.tensor([PREFIXES[2]])
    policy(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    weights_generation(policy).advance()  # what the training module does after every optimizer step
    sampler.generate(PREFIXES, 2)
    assert sampler.copy.refreshes == 2
    for copied, live in zip(sampler.sampling_model().parameters(), policy.parameters()):
        assert torch.equal(copied, live.detach().to(torch.bfloat16))


def test_engine_and_dtype_knobs():
    """The config runs the loop with ``dtype: auto``: bf16 exactly where the CPU has native bf16
    (then the log-probs are not the trainer's: ``exact_logprobs`` False), the policy itself
    otherwise; an explicit fp32 samples from the policy; bad values are named."""
    cfg = OmegaConf.load(CONFIG)
    assert (cfg.engine, cfg.dtype) == ("loop", "auto")
    model = _llama()
    with pytest.raises(ValueError, match=r"sampler.engine must be one of \('generate', 'loop'\), got 'vllm'"):
        HFSampler(model, TOKENIZER, engine="vllm")
    with pytest.raises(ValueError, match=r"sampler.dtype must be one of \('auto', 'fp32', 'bf16'\), got 'fp16'"):
        HFSampler(model, TOKENIZER, dtype="fp16")
    sampler = HFSampler(model, TOKENIZER, **{k: v for k, v in cfg.items() if k != "_target_"})
    fast = cpu_has_fast_bf16()
    assert (
        sampler.engine == "loop"
        and (sampler.copy is not None) == fast
        and sampler.dtype == ("bf16" if fast else "fp32")
    )
    assert sampler.exact_logprobs == (not fast) and (sampler.sampling_model() is model) == (not fast)
    exact = HFSampler(model, TOKENIZER, dtype="fp32")
    assert exact.exact_logprobs and exact.sampling_model() is model
    assert not HFSampler(model, TOKENIZER, dtype="bf16").exact_logprobs
    half = copy.deepcopy(model).to(torch.bfloat16)  # a bf16 policy: auto samples from it as it is
    assert HFSampler(half, TOKENIZER, dtype="auto").exact_logprobs


def test_distinct_rows_names_each_prefix_once():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 5, 6], [0, 5, 6], [7, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1]])  # row 3: same ids, pad 0 is a token
    first, inverse = distinct_rows(ids, mask)
    assert sorted(first.tolist()) == [0, 2, 3]
    assert [int(first[j]) for j in inverse.tolist()] == [0, 0, 2, 3, 2]


def test_shared_prefill_gives_every_row_the_kv_and_draws_of_a_prefill_per_row():
    """Rows with the same prefix are encoded once (3 distinct of 6 rows); every row's KV equals that
    of a plain prefill of all 6 rows."""
    model = _llama()
    prefixes = [PREFIXES[0], PREFIXES[1], PREFIXES[0], PREFIXES[2], PREFIXES[1], PREFIXES[0]]
    ids, mask = left_pad(prefixes, 0)
    calls = []
    handle = model.model.register_forward_pre_hook(lambda m, a, k: calls.append(k["input_ids"].shape), with_kwargs=True)
    torch.manual_seed(9)
    out = decode(model, ids, mask, 1, [], 1.0, 1.0, 0)
    handle.remove()
    assert calls[0][0] == 3  # the prefill ran on the 3 distinct prefixes
    plain = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, position_ids=generation_positions(mask), past_key_values=plain)
    for shared, alone in zip(out.cache.layers, plain.layers):
        torch.testing.assert_close(shared.keys, alone.keys, rtol=0, atol=1e-6)
        torch.testing.assert_close(shared.values, alone.values, rtol=0, atol=1e-6)


def test_inverse_cdf_draw_never_picks_a_zero_probability_token():
    """Top-p leaves zeros anywhere in a row, at its start and end included; 20k draws from
    ``[0, .5, 0, .3, .2, 0]`` land only on the positive entries, in proportion (chi-square)."""
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).expand(20_000, 6)
    torch.manual_seed(0)
    tokens = inverse_cdf_draw(probs)
    counts = torch.bincount(tokens, minlength=6).tolist()
    assert counts[0] == counts[2] == counts[5] == 0
    assert chisquare([counts[1], counts[3], counts[4]], [10_000, 6_000, 4_000]).pvalue > 0.01
    edge = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert inverse_cdf_draw(edge).tolist() == [1, 2, 0]


def test_bf16_copy_made_under_inference_mode_can_be_refreshed():
    """Validation (Lightning runs it under ``torch.inference_mode``) may be the first to sample:
    the copy made there is refreshed after the next optimizer step like any other."""
    policy = copy.deepcopy(_llama(vocab=128, init=0.02))
    sampler = _sampler(policy, "loop", dtype="bf16")
    with torch.inference_mode():
        sampler.generate(PREFIXES, 2)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01)
    weights_generation(policy).advance()
    sampler.generate(PREFIXES, 2)
    assert sampler.copy.refreshes == 2
    for copied, live in zip(sampler.sampling_model().parameters(), policy.parameters()):
        assert torch.equal(copied, live.detach().to(torch.bfloat16))


def test_bf16_copy_of_a_lora_policy_is_the_merged_model():
    """A LoRA policy's bf16 copy is a plain model (no adapter layers run while sampling) whose
    weights are ``W + (alpha / r) B A`` rounded to bf16; its log-probs are the adapter model's
    within bf16 rounding, and far from the base model's."""
    torch.manual_seed(0)
    policy = apply_lora(_llama(vocab=128, init=0.02), LoraSettings(r=4, alpha=8.0))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.5)
    policy.eval()
    sampler = _sampler(policy, "loop", dtype="bf16")
    copy_ = sampler.sampling_model()
    assert not any("lora" in name for name, _ in copy_.named_parameters())
    layer = policy.get_base_model().model.layers[0].self_attn.q_proj
    merged = layer.base_layer.weight + 2.0 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    assert torch.equal(copy_.model.layers[0].self_attn.q_proj.weight, merged.detach().to(torch.bfloat16))
    torch.manual_seed(5)
    gen = sampler.generate(PREFIXES, 6, temperature=1.0)
    sequences = [p + t.tolist() for p, t in zip(PREFIXES, gen.token_ids)]
    lengths = [len(p) for p in PREFIXES]
    adapter = score_sequences(policy, sequences, lengths)
    with policy.disable_adapter():
        base = score_sequences(policy, sequences, lengths)
    assert max((s - lp).abs().max().item() for s, lp in zip(adapter, gen.logprobs)) < 0.05
    assert max((s - lp).abs().max().item() for s, lp in zip(base, gen.logprobs)) > 0.1
