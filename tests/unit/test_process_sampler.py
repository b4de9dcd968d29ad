"""The rollout producer's sampler in a worker process (``sampler.own_process``): its copy changes only
at a push or load, holds the live weights of that version (scores equal the live sampler's, the
sampled tokens' log-probs are that copy's), a call that raises in the worker comes back with its
traceback and the worker goes on, a killed worker is a clear error naming its exit code, and close
leaves no process; a LoRA policy arrives merged (a tiny random Llama: tensor code only)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_llama

from mintrl.model.lora import LoraSettings, apply_lora
from mintrl.sampler import HFSampler
from mintrl.sampler.pinned import SamplingStopped
from mintrl.sampler.process import ProcessSampler, SamplerProcessDied, SamplerProcessError
from mintrl.sampler.weights import weights_generation

TOKENIZER = SimpleNamespace(pad_token_id=0, eos_token_id=2)
PREFIXES = [[1, 5, 7], [1, 9]]


def nudge(policy: torch.nn.Module) -> None:
    """An optimizer step's stand-in: every weight moves by 0.05."""
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05)
    weights_generation(policy).advance()


def same(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 0.0) -> bool:
    return len(a) == len(b) and all(torch.allclose(x, y, atol=atol, rtol=0) for x, y in zip(a, b))


def test_the_worker_samples_its_copy_which_changes_only_at_a_push_or_load():
    policy = tiny_llama()
    live = HFSampler(policy, TOKENIZER, dtype="fp32", continuation_cache_mib=0)
    worker = ProcessSampler(live, seed=0)
    try:
        assert worker.process.is_alive() and worker.process.pid != os.getpid()
        with pytest.raises(RuntimeError, match="push must run before"):
            worker.generate(PREFIXES, 4)
        worker.push(0)
        before = worker.score(PREFIXES, [1, 1])
        assert same(before, live.score(PREFIXES, [1, 1]), atol=1e-5)  # version 0: the live weights
        sent = []
        call = worker._call
        worker._call = lambda op, args: sent.append(op) or call(op, args)
        worker.push(0)  # the same weights: only the version is recorded, nothing is sent
        nudge(policy)
        assert same(worker.score(PREFIXES, [1, 1]), before)  # not pushed yet
        worker.push(1)
        assert sent == ["score", "load"]
        after = worker.score(PREFIXES, [1, 1])
        assert worker.version == 1 and same(after, live.score(PREFIXES, [1, 1]), atol=1e-5)
        assert not same(after, before, atol=1e-3)
        # the sampled rows' log-probs are the version-1 copy's own: the live fp32 policy scores them alike
        gen = worker.generate(PREFIXES, 5, temperature=1.0, cache_keys=[10, 11])
        assert len(gen.token_ids) == 2 and all(0 < len(t) <= 5 for t in gen.token_ids)
        rescored = live.score([p + t.tolist() for p, t in zip(PREFIXES, gen.token_ids)], [3, 2])
        assert same(gen.logprobs, rescored, atol=1e-4)
        captured = worker.capture()  # the trainer's thread, while the producer samples version 1
        nudge(policy)
        worker.load(captured, 2)  # the producer, between its batches: the weights of the capture
        assert worker.version == 2 and same(worker.score(PREFIXES, [1, 1]), after, atol=1e-6)
        worker.release()
        worker.stop.set()
        with pytest.raises(SamplingStopped):
            worker.generate(PREFIXES, 3)
    finally:
        worker.close()
    worker.close()  # idempotent
    assert not worker.process.is_alive() and worker.process not in multiprocessing.active_children()


def test_an_error_in_the_worker_comes_back_with_its_traceback_and_a_killed_worker_is_named():
    live = HFSampler(tiny_llama(), TOKENIZER, dtype="fp32", continuation_cache_mib=0)
    worker = ProcessSampler(live, seed=0)
    try:
        worker.push(0)
        with pytest.raises(SamplerProcessError, match=r"(?s)raised in 'score'.*IndexError"):
            worker.score([[1, 100_000]], [1])  # a token id past the vocabulary
        assert len(worker.score(PREFIXES, [1, 1])) == 2  # the worker goes on serving
        os.kill(worker.process.pid, signal.SIGKILL)  # out of memory, or killed by hand
        with pytest.raises(SamplerProcessDied, match=rf"pid {worker.process.pid}\) ended with exit code -9"):
            worker.generate(PREFIXES, 3)
    finally:
        worker.close()
    assert not worker.process.is_alive()


def test_a_lora_policy_reaches_the_worker_with_its_adapter_merged():
    policy = apply_lora(tiny_llama(), LoraSettings(r=4, alpha=8.0))
    with torch.no_grad():  # a trained adapter (peft starts B at 0: the merge would change nothing)
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)
    weights_generation(policy).advance()
    live = HFSampler(policy, TOKENIZER, dtype="fp32", continuation_cache_mib=0)
    worker = ProcessSampler(live, seed=0)
    try:
        worker.push(0)
        expected = live.score(PREFIXES, [1, 1])  # the policy with its adapter
        assert same(worker.score(PREFIXES, [1, 1]), expected, atol=1e-5)
        with policy.disable_adapter():
            assert not same(live.score(PREFIXES, [1, 1]), expected, atol=1e-3)  # the adapter matters here
    finally:
        worker.close()


def test_the_worker_ends_rows_at_the_live_samplers_end_ids_and_a_stuck_call_does_not_block_close():
    live = HFSampler(tiny_llama(), TOKENIZER, dtype="fp32", continuation_cache_mib=0)
    live.eos_token_ids = tuple(range(128))  # every id ends a row (a model's generation_config.json may add ids)
    worker = ProcessSampler(live, seed=0)
    try:
        worker.push(0)
        gen = worker.generate(PREFIXES, 6)
        assert [len(t) for t in gen.token_ids] == [1, 1] and gen.finished == [True, True]
        worker._lock.acquire()  # a call under way that never returns (a stuck worker)
        worker.close(lock_timeout_s=0.2)  # gives up asking and kills it
        assert not worker.process.is_alive()
    finally:
        if worker._lock.locked():
            worker._lock.release()
        worker.close()
