"""vLLM-specific behaviour of ``sampler=vllm`` against the real engine (the CPU build here,
``make test-vllm``; official vLLM on a GPU machine): weight pushes across process boundaries and
sleep levels, the prefix-cache reset after a push, and a short training run whose checkpoint vLLM
loads. Skipped where vLLM is not installed; the shared contract is tests/integration/test_sampler_contract.py."""

from __future__ import annotations

import copy
import gc
import random
import weakref

import numpy as np
import pytest
import torch
from conftest import TINY_RUN
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM

from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.sampler import VLLMSampler
from mintrl.sampler.hf import score_sequences
from mintrl.sampler.vllm import VLLM_MIN_VERSION
from mintrl.sampler.weights import weights_generation

pytestmark = pytest.mark.vllm

LONG = " ".join(
    ["Explain step by step why the sum of two even numbers is always even, and then give three worked examples."] * 12
)  # ~270 tokens: several KV blocks


def _prompt(tokenizer):
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": LONG}], add_generation_prompt=True, tokenize=True
    )["input_ids"]


def _step(policy, sequence):
    """One SGD step that moves the log-probs of ``sequence`` (a real optimizer step)."""
    optimizer = torch.optim.SGD(policy.parameters(), lr=2e-3)
    ids = torch.tensor([sequence])
    (-policy(input_ids=ids, labels=ids).loss).backward()
    optimizer.step()
    weights_generation(policy).advance()  # what the training module does after every optimizer step
    optimizer.zero_grad()


def _gap_after_step(sampler, policy, prompt) -> float:
    torch.manual_seed(0)
    before = sampler.generate([prompt], 12, temperature=1.0)
    _step(policy, prompt + before.token_ids[0].tolist())
    torch.manual_seed(0)
    after = sampler.generate([prompt], 12, temperature=1.0)
    scored = score_sequences(policy, [prompt + after.token_ids[0].tolist()], [len(prompt)], 1.0)[0]
    return (scored - after.logprobs[0]).abs().mean().item()


def test_without_the_prefix_cache_reset_old_kv_would_leak(embedded, tokenizer, monkeypatch):
    """Negative control for the reset: the same prompt after a push, with ``reset_prefix_cache``
    disabled, reuses KV computed with the old weights and the log-probs drift; with it they agree.
    The engine caches KV in blocks of 32 tokens on the CPU backend (not its default 128, which
    would cache nothing of a prompt or chunk shorter than that)."""
    prompt = _prompt(tokenizer)
    gaps = {}
    for reset in (True, False):
        policy = copy.deepcopy(embedded.model)
        sampler = VLLMSampler(policy, tokenizer, max_model_len=1024, enforce_eager=True)
        try:
            sampler.engine()
            block = sampler.llm.llm_engine.vllm_config.cache_config.block_size
            assert block == 32 if policy.device.type == "cpu" else block <= 32
            if not reset:
                monkeypatch.setattr(sampler.llm, "reset_prefix_cache", lambda *a, **k: True)
            gaps[reset] = _gap_after_step(sampler, policy, prompt)
        finally:
            sampler.close()
    print(f"mean |engine - trainer| after a push: with reset {gaps[True]:.2e}, without {gaps[False]:.2e} nats")
    assert gaps[True] < 1e-3
    assert gaps[False] > 10 * gaps[True] and gaps[False] > 1e-3


def test_weights_reach_an_engine_in_its_own_process(embedded, tokenizer, monkeypatch):
    """Multi-process engine: weights go through a safetensors file in shared memory."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    policy = copy.deepcopy(embedded.model)
    sampler = VLLMSampler(policy, tokenizer, max_model_len=1024, enforce_eager=True)
    try:
        assert not sampler.in_process
        assert _gap_after_step(sampler, policy, _prompt(tokenizer)) < 1e-3
        assert sampler.syncs == 2
    finally:
        sampler.close()


@pytest.mark.parametrize("level", [1, 2])
def test_generation_after_wake_up_uses_the_synced_weights(embedded, tokenizer, level):
    """``release()`` between rollout batches (sleep mode; a no-op engine-side on CPU): level 2 drops
    the weights, so the next call pushes them again even when the policy did not change."""
    policy = copy.deepcopy(embedded.model)
    sampler = VLLMSampler(policy, tokenizer, max_model_len=1024, enforce_eager=True, sleep_mode=True, sleep_level=level)
    prompt = _prompt(tokenizer)
    try:
        torch.manual_seed(0)
        before = sampler.generate([prompt], 8)
        sampler.release()
        assert sampler.asleep
        _step(policy, prompt + before.token_ids[0].tolist())
        assert _gap_after_step(sampler, policy, prompt) < 1e-3  # wakes, pushes, generates, pushes again
        assert not sampler.asleep
        syncs = sampler.syncs
        sampler.release()
        sampler.generate([prompt], 4)
        assert sampler.syncs == syncs + (level == 2)
    finally:
        sampler.close()


def _draws() -> tuple[list, list, list]:
    """Three numbers from each global generator: torch (CPU), NumPy, Python's ``random``."""
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def test_engine_start_leaves_the_global_rngs_and_close_frees_the_engine(embedded, tokenizer):
    """vLLM's worker start reseeds torch, NumPy and ``random`` with the engine's seed: the sampler
    restores the three states, so the trainer's next draws are those it would make with no engine
    (exact resume needs this). The engine is seeded once, with ``seed``. ``close()`` shuts it down
    and drops it (nothing keeps the ``LLM`` alive), and a second ``close()`` does nothing."""
    sampler = VLLMSampler(embedded.model, tokenizer, max_model_len=256, enforce_eager=True, seed=5)
    _seed_all(11)
    expected = _draws()
    _seed_all(11)
    try:
        llm = sampler.engine()
        after = _draws()
        engine_seed = llm.llm_engine.vllm_config.model_config.seed
        ref = weakref.ref(llm)
        del llm
    finally:
        sampler.close()
    assert after == expected
    assert engine_seed == 5
    gc.collect()
    assert sampler.llm is None and ref() is None
    sampler.close()
    assert sampler.llm is None


def test_an_older_vllm_is_refused_before_the_engine_starts(embedded, tokenizer, monkeypatch):
    """The weight push needs ``reload_weights(weights_iterator=...)``: an installed vLLM older than
    the floor is named in the error, with the floor, and no engine starts."""
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.15.1")
    sampler = VLLMSampler(embedded.model, tokenizer, max_model_len=256, enforce_eager=True)
    with pytest.raises(ImportError, match=rf"vLLM 0\.15\.1 .*vllm>={VLLM_MIN_VERSION}"):
        sampler.engine()
    assert sampler.llm is None


def test_wake_up_order_and_unseeded_requests(embedded, tokenizer, monkeypatch):
    """After ``release()`` (sleep mode), the next call empties torch's CUDA cache, wakes the weights
    only, pushes the new weights (the KV cache still asleep: the engine's own record of its sleeping
    parts says so at the push), resets the prefix cache, empties the cache again, then wakes the KV
    cache, then generates:
    TRL's order, which keeps the KV cache from taking GPU memory while the weights arrive.
    Requests carry no seed of their own (vLLM samples seeded requests one by one); the in-process
    engine samples from the run's torch generator, so the same seed gives the same samples.

    Sleep mode itself is GPU-only (the CPU worker's sleep and wake-up do nothing), so the order is
    checked by recording the calls on the real engine object, through wrappers that call the real
    methods; ``torch.cuda.empty_cache`` is recorded the same way (a no-op without CUDA)."""
    policy = copy.deepcopy(embedded.model)
    sampler = VLLMSampler(policy, tokenizer, max_model_len=1024, enforce_eager=True, sleep_mode=True, seed=7)
    prompt = _prompt(tokenizer)
    events: list = []
    try:
        llm = sampler.engine()
        executor = llm.llm_engine.engine_core.engine_core.model_executor  # the in-process engine core's

        def record(name, real, detail=lambda *a, **k: None):
            def wrapper(*args, **kwargs):
                events.append((name, detail(*args, **kwargs)))
                return real(*args, **kwargs)

            return wrapper

        monkeypatch.setattr(torch.cuda, "empty_cache", record("empty_cache", torch.cuda.empty_cache))
        monkeypatch.setattr(llm, "wake_up", record("wake_up", llm.wake_up, lambda tags=None: tags))
        monkeypatch.setattr(
            llm,
            "collective_rpc",
            record("rpc", llm.collective_rpc, lambda method, *a, **k: (method, sorted(executor.sleeping_tags))),
        )
        monkeypatch.setattr(llm, "reset_prefix_cache", record("reset_prefix_cache", llm.reset_prefix_cache))
        monkeypatch.setattr(
            llm, "generate", record("generate", llm.generate, lambda prompts, params, **k: [p.seed for p in params])
        )
        torch.manual_seed(0)
        first = sampler.generate([prompt, prompt], 12)
        torch.manual_seed(0)
        again = sampler.generate([prompt, prompt], 12)
        assert [t.tolist() for t in first.token_ids] == [t.tolist() for t in again.token_ids]
        assert [e for e in events if e[0] == "generate"] == [("generate", [None, None])] * 2
        assert llm.llm_engine.vllm_config.model_config.seed == 7
        sampler.release()
        assert sampler.asleep and executor.sleeping_tags == {"weights", "kv_cache"}
        _step(policy, prompt + first.token_ids[0].tolist())
        events.clear()
        sampler.generate([prompt], 4)
        assert events == [
            ("empty_cache", None),
            ("wake_up", ["weights"]),
            ("rpc", ("reload_weights", ["kv_cache"])),
            ("reset_prefix_cache", None),
            ("empty_cache", None),  # what the push gathered goes back to the device before the KV cache wakes
            ("wake_up", ["kv_cache"]),
            ("generate", [None]),
        ]
        assert not sampler.asleep and executor.sleeping_tags == set()
    finally:
        sampler.close()


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm_run")
    overrides = [
        f"paths.output_dir={out}",
        "sampler=vllm",
        "sampler.enforce_eager=true",
        "sampler.max_model_len=1024",
        "trainer.max_steps=2",
        *TINY_RUN,
        "module.optimizer.lr=1e-5",
        "trainer.precision=32-true",  # an fp32 engine next to an fp32 trainer: their log-probs agree
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=False)
    closes: list[tuple[VLLMSampler, bool]] = []  # (sampler, whether it held an engine) per close()
    real_close = VLLMSampler.close

    def recording_close(self):
        closes.append((self, self.llm is not None))
        real_close(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VLLMSampler, "close", recording_close)
        summary = run(cfg)
    return out, summary, closes


def test_training_with_the_vllm_sampler(vllm_run, tokenizer):
    """Two MInTRL steps with rollouts from the engine: weights pushed once per changed policy,
    engine log-probs equal the trainer's at each update, the engine is closed at the end of the fit
    (not after the step-0 validation; the run's own close after it finds nothing left), and vLLM
    loads the exported checkpoint."""
    out, summary, closes = vllm_run
    values: dict[str, list[float]] = {}
    for event in (out / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(event))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            values.setdefault(tag, []).extend(s.value for s in sorted(acc.Scalars(tag), key=lambda s: s.step))
    assert summary["steps"] == 2
    # closed at the end of the fit (the data module's teardown), then again by the run's end: a no-op
    assert [held for _, held in closes] == [True, False] and closes[0][0].llm is None
    # validation at start pushed the weights once; step 0 trained on them; step 1 after one update
    assert values["perf/weight_syncs"] == [1.0, 2.0]
    # the engine's own kernels: the trainer recomputes its log-probs; what it removed is the engine's gap
    assert max(values["train/sampler_mismatch_abs"]) < 1e-3, values["train/sampler_mismatch_abs"]
    assert max(values["train/sampler_logprob_gap"]) < 1e-5, values["train/sampler_logprob_gap"]
    exported = AutoModelForCausalLM.from_pretrained(out / "hf_policy")
    sampler = VLLMSampler(exported, tokenizer, max_model_len=1024, enforce_eager=True)
    try:
        prompt = _prompt(tokenizer)
        sampler.engine()
        assert sampler._tmpdir is None, "the engine loaded the exported folder itself"
        torch.manual_seed(0)
        gen = sampler.generate([prompt], 8)
        scored = score_sequences(exported, [prompt + gen.token_ids[0].tolist()], [len(prompt)], 1.0)[0]
        assert (scored - gen.logprobs[0]).abs().mean().item() < 1e-3
    finally:
        sampler.close()


def test_engine_scoring_equals_the_trainer_at_temperature_one(embedded, tokenizer):
    """``score_with=engine`` (what FSDP uses): prompt log-probs of the engine equal the trainer's
    forward at T=1, and other temperatures are refused rather than silently wrong."""
    sampler = VLLMSampler(embedded.model, tokenizer, max_model_len=1024, enforce_eager=True, score_with="engine")
    prompt = _prompt(tokenizer)[:40]
    response = tokenizer(" Two and three make five.", add_special_tokens=False)["input_ids"]
    try:
        engine = sampler.score([prompt + response, prompt + response[:3]], [len(prompt), len(prompt)])
        trainer = score_sequences(embedded.model, [prompt + response, prompt + response[:3]], [len(prompt)] * 2)
        for e, t in zip(engine, trainer):
            assert e.shape == t.shape and (e - t).abs().max().item() < 1e-3
        with pytest.raises(ValueError, match="rollout.temperature=1"):
            sampler.score([prompt + response], [len(prompt)], temperature=0.7)
    finally:
        sampler.close()
