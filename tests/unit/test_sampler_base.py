"""What every sampler backend shares (mintrl.sampler.base): the argument checks of ``generate`` and its
empty call, a sampled row cut after its first EOS id, the EOS and pad ids of a model and tokenizer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mintrl.sampler.base import Generation, Sampler, eos_ids_of, pad_id_of


class _Recorder(Sampler):
    """A backend that records what reaches it and answers one token per row."""

    eos_token_ids, pad_token_id = (2,), 0

    def __init__(self, max_prefix_tokens=None):
        self.max_prefix_tokens, self.calls = max_prefix_tokens, []

    def _continue(self, prefixes, budgets, temperature, top_p, cache_keys):
        self.calls.append((list(prefixes), budgets, temperature, top_p, cache_keys))
        out = Generation([], [], [])
        for _ in prefixes:
            out.append_row(torch.tensor([2]), torch.tensor([-0.5]), self.eos_token_ids)
        return out

    def score(self, sequences, prompt_lengths, temperature=1.0):
        return []


def test_generate_checks_then_hands_the_call_to_the_backend():
    sampler = _Recorder()
    gen = sampler.generate([[1, 3], [4]], 5, 0.7, 0.9, cache_keys=[10, 11])
    assert sampler.calls == [([[1, 3], [4]], [5, 5], 0.7, 0.9, [10, 11])]  # one budget per row
    sampler.generate([[1, 3], [4]], [2, 7])
    assert sampler.calls[-1][1] == [2, 7]
    assert [t.tolist() for t in gen.token_ids] == [[2], [2]] and gen.finished == [True, True]


def test_an_empty_call_never_reaches_the_backend():
    sampler = _Recorder()
    assert sampler.generate([], 5) == Generation([], [], [])
    assert sampler.calls == []


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        (([[1]], 0), {}, "max_new_tokens must be positive, got 0"),
        (([[1]], 4, 0.0), {}, "need temperature > 0"),
        (([[1]], 4, 1.0, 1.5), {}, "0 < top_p <= 1"),
        (([[1], []], 4), {}, "prefix row 1 is empty"),
        (([[1], [2]], 4), {"cache_keys": [7]}, "cache_keys has 1 entries for 2 prefixes"),
    ],
)
def test_bad_arguments_are_refused_before_the_backend(args, kwargs, message):
    sampler = _Recorder()
    with pytest.raises(ValueError, match=message):
        sampler.generate(*args, **kwargs)
    assert sampler.calls == []


def test_a_backends_prefix_limit_is_checked():
    sampler = _Recorder(max_prefix_tokens=3)
    sampler.generate([[1, 2]], 4)
    with pytest.raises(ValueError, match="prefix row 1 has 3 tokens, sampler.max_model_len is 3"):
        sampler.generate([[1], [1, 2, 3]], 4)


@pytest.mark.parametrize(
    "ids,eos,kept,finished",
    [
        ([5, 6, 7], (2,), [5, 6, 7], False),  # no EOS: the whole row, unfinished
        ([5, 2, 7, 2], (2,), [5, 2], True),  # cut after the first EOS
        ([5, 9, 2], (2, 9), [5, 9], True),  # any of several EOS ids
        ([2], (2,), [2], True),
        ([], (2,), [], False),
    ],
)
def test_a_row_is_cut_after_its_first_eos(ids, eos, kept, finished):
    out = Generation([], [], [])
    logprobs = torch.tensor([-0.1 * (k + 1) for k in range(len(ids))], dtype=torch.float32)
    out.append_row(torch.tensor(ids, dtype=torch.long), logprobs, eos)
    assert out.token_ids[0].tolist() == kept and out.token_ids[0].dtype == torch.long
    assert out.logprobs[0].tolist() == logprobs[: len(kept)].tolist() and out.logprobs[0].dtype == torch.float32
    assert out.finished == [finished]


def test_eos_and_pad_ids():
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[2, 9]))
    tokenizer = SimpleNamespace(eos_token_id=5, pad_token_id=None)
    assert eos_ids_of(model, tokenizer) == (2, 9)
    assert eos_ids_of(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=3))) == (3,)
    assert eos_ids_of(SimpleNamespace(), tokenizer) == (5,)  # no generation config: the tokenizer's
    with pytest.raises(ValueError, match="no eos_token_id"):
        eos_ids_of(SimpleNamespace(), SimpleNamespace(eos_token_id=None))
    assert pad_id_of(tokenizer, (2, 9)) == 2  # no pad token: the first EOS id
    assert pad_id_of(SimpleNamespace(pad_token_id=0), (2,)) == 0
