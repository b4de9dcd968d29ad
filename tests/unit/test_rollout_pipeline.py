"""The rollout pipeline of ``rollout.max_staleness > 0`` (mintrl.data.pipeline) on a fake engine:
batch ``k + 1`` is generated from weights version ``k`` in the producer thread, the staleness bound
holds on every batch taken (a staler one is dropped and generated again), a producer that raises
gives a clear error in the caller's thread with the thread joined, and closing leaves no thread.
The pinned sampler samples its own copy of the weights, pushed only between batches; the config
check refuses what the pipeline cannot run, naming the field."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_llama
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.data import datamodule
from mintrl.data.datamodule import RolloutDataModule
from mintrl.data.pipeline import ProducerError, RolloutPipeline
from mintrl.sampler import HFSampler
from mintrl.sampler.pinned import PinnedSampler, SamplingStopped, WeightCaptures
from mintrl.sampler.process import SamplerProcessDied
from mintrl.sampler.weights import weights_generation

TOKENIZER = SimpleNamespace(pad_token_id=0, eos_token_id=2)


class FakeSampler:
    """What the pipeline needs of a ProducerSampler: push, capture, load, release, stop, close; ``live``:
    the 'weights' version now (the trainer's); ``closed``: close was called."""

    def __init__(self):
        self.version, self.pushes, self.loads, self.stop, self.live = None, [], [], threading.Event(), 0
        self.closed = False

    def close(self):
        self.closed = True

    def push(self, version):
        self.version = version
        self.pushes.append(version)

    def capture(self):
        return {"w": self.live}

    def load(self, weights, version):
        assert weights["w"] == version  # captured when the trainer was at that version
        self.version = version
        self.loads.append(version)

    def release(self):
        pass


class FakeEngine:
    """Makes a batch stamped with the pushed version; records the thread it ran on; ``fail_at``:
    the job index that raises; ``hold``: an event each job waits on (stopping when the sampler's
    stop is set, as a real sampler call does)."""

    def __init__(self, fail_at=None, hold=None):
        self.sampler, self.fail_at, self.hold = None, fail_at, hold
        self.jobs, self.threads = [], []

    def generate(self, prompts, step=0):
        self.threads.append(threading.current_thread().name)
        while self.hold is not None and not self.hold.wait(0.01):
            if self.sampler.stop.is_set():
                raise SamplingStopped("stopping")
        self.jobs.append((list(prompts), step))
        if self.fail_at == len(self.jobs) - 1:
            raise ValueError("the judge server answered garbage")
        assert step == self.sampler.version  # the copy holds the version the batch is stamped with
        return SimpleNamespace(step=step, stats={}, prompts=list(prompts))


def prompt_batches():
    k = 0
    while True:
        yield [f"p{k}a", f"p{k}b"]
        k += 1


def producer_threads():
    return [t for t in threading.enumerate() if t.name == "rollout-producer"]


def run_steps(pipeline, steps, updates=1):
    """The trainer's side: take the batch of each step, start batches up to the depth (none past the
    last step), 'update'."""
    out = []
    for k in range(steps):
        global_step = k * updates
        pipeline.sampler.live = global_step
        out.append(pipeline.take(global_step))
        while pipeline.ahead < pipeline.depth and k + pipeline.ahead + 1 < steps:
            pipeline.start(global_step)
    return out


def test_batch_k_plus_1_is_sampled_by_weights_k_in_the_producer_thread():
    engine, sampler = FakeEngine(), FakeSampler()
    pipeline = RolloutPipeline(engine, sampler, prompt_batches(), max_staleness=1)
    try:
        batches = run_steps(pipeline, 3)
    finally:
        pipeline.close()
    assert [b.step for b in batches] == [0, 0, 1]  # batch 0 from version 0, then batch k + 1 from version k
    assert [k - b.step for k, b in enumerate(batches)] == [0, 1, 1]  # trained at step k: staleness within the bound
    assert all(b.stats["rollout/dropped_stale"] == 0.0 for b in batches)
    assert [b.prompts[0] for b in batches] == ["p0a", "p1a", "p2a"]  # the data order of the synchronous path
    assert set(engine.threads) == {"rollout-producer"}
    assert pipeline.engine.sampler is sampler and engine.sampler is None  # a copy of the engine samples the pinned copy
    assert not pipeline.thread.is_alive() and not producer_threads()


def test_at_depth_2_batch_k_plus_2_is_sampled_by_weights_k_from_a_captured_copy():
    engine, sampler = FakeEngine(), FakeSampler()
    pipeline = RolloutPipeline(engine, sampler, prompt_batches(), max_staleness=2, depth=2)
    try:
        batches = run_steps(pipeline, 5)
    finally:
        pipeline.close()
    assert [b.step for b in batches] == [0, 0, 0, 1, 2]  # batch k from weights k - 2 from batch 2 on
    assert [k - b.step for k, b in enumerate(batches)] == [0, 1, 2, 2, 2]
    assert [b.prompts[0] for b in batches] == [f"p{k}a" for k in range(5)]
    assert sampler.loads == [0, 1, 2]  # started while another was in flight: captured, loaded by the producer
    assert not producer_threads()


def test_a_checkpoint_holds_the_state_the_oldest_batch_ahead_found():
    hold = threading.Event()
    state = {"n": 0}
    pipeline = RolloutPipeline(FakeEngine(hold=hold), FakeSampler(), prompt_batches(), 2, depth=2, state=lambda: state)
    try:
        assert pipeline.state_before_oldest() is None  # nothing ahead: the live state
        pipeline.start(0)
        time.sleep(0.05)  # the producer started it (and holds)
        state["n"] = 1  # what the producer's batch changes
        assert pipeline.state_before_oldest() == {"n": 0}
        hold.set()
        pipeline.take(0)
        assert pipeline.state_before_oldest() is None
    finally:
        pipeline.close()


def test_a_batch_older_than_the_bound_is_dropped_and_generated_again():
    engine, sampler = FakeEngine(), FakeSampler()
    pipeline = RolloutPipeline(engine, sampler, prompt_batches(), max_staleness=1)
    try:
        first = pipeline.take(0)
        pipeline.start(0)
        batch = pipeline.take(3)  # 3 updates since version 0: over the bound
    finally:
        pipeline.close()
    assert first.step == 0 and batch.step == 3 and batch.prompts[0] == "p1a"  # the same prompts, current weights
    assert batch.stats["rollout/dropped_stale"] == 1.0
    assert pipeline.dropped_stale == 1 and sampler.pushes == [0, 0, 3]


def test_a_producer_that_raises_gives_a_clear_error_in_the_callers_thread_and_is_joined():
    engine = FakeEngine(fail_at=1)
    pipeline = RolloutPipeline(engine, FakeSampler(), prompt_batches(), max_staleness=1)
    pipeline.take(0)
    pipeline.start(0)
    with pytest.raises(ProducerError, match=r"rollout producer thread \(rollout.max_staleness=1\) failed") as err:
        pipeline.take(1)
    assert "weights version 0" in str(err.value) and "ValueError: the judge server answered garbage" in str(err.value)
    assert isinstance(err.value.__cause__, ValueError)
    assert not pipeline.thread.is_alive() and not producer_threads()
    pipeline.close()  # idempotent


def test_close_stops_a_batch_in_flight_and_joins_the_thread():
    hold = threading.Event()
    engine = FakeEngine(hold=hold)
    sampler = FakeSampler()
    pipeline = RolloutPipeline(engine, sampler, prompt_batches(), max_staleness=2)
    pipeline.start(0)
    time.sleep(0.05)
    assert producer_threads()
    pipeline.close()
    assert not pipeline.thread.is_alive() and not producer_threads() and sampler.closed  # a worker process ends too
    assert engine.jobs == []  # stopped before it finished


def test_drain_waits_for_the_batch_in_flight_and_keeps_it():
    engine = FakeEngine()
    pipeline = RolloutPipeline(engine, FakeSampler(), prompt_batches(), max_staleness=1)
    try:
        pipeline.take(0)
        pipeline.start(0)
        pipeline.drain()
        assert pipeline.idle and len(engine.jobs) == 2
        assert pipeline.take(1).prompts[0] == "p1a"
    finally:
        pipeline.close()


def test_a_non_positive_bound_is_refused():
    with pytest.raises(ValueError, match=r"rollout.max_staleness must be an integer >= 1"):
        RolloutPipeline(FakeEngine(), FakeSampler(), prompt_batches(), max_staleness=0)
    assert not producer_threads()


def test_the_pinned_sampler_samples_its_copy_which_changes_only_at_a_push():
    policy = tiny_llama()
    live = HFSampler(policy, TOKENIZER, dtype="fp32", continuation_cache_mib=0)
    pinned = PinnedSampler(live)
    with pytest.raises(RuntimeError, match="push must run before"):
        pinned.generate([[1, 5, 7]], 4)
    pinned.push(0)
    prefixes = [[1, 5, 7], [1, 9]]
    before = pinned.score(prefixes, [1, 1])
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05)
    weights_generation(policy).advance()  # an optimizer step
    assert all(torch.equal(a, b) for a, b in zip(before, pinned.score(prefixes, [1, 1])))  # not pushed yet
    pinned.push(1)
    after = pinned.score(prefixes, [1, 1])
    assert pinned.version == 1 and not all(torch.equal(a, b) for a, b in zip(before, after))
    expected = live.score(prefixes, [1, 1])  # the live policy in fp32: the copy holds the same weights
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(after, expected))
    assert pinned.exact_logprobs == live.exact_logprobs and pinned.model is not policy
    assert len(pinned.generate(prefixes, 3).token_ids) == 2
    captured = pinned.capture()  # the trainer's thread, while the producer samples version 1
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05)
    weights_generation(policy).advance()
    assert all(torch.equal(a, b) for a, b in zip(after, pinned.score(prefixes, [1, 1])))
    pinned.load(captured, 2)  # the producer, between its batches
    assert pinned.version == 2 and all(torch.equal(a, b) for a, b in zip(after, pinned.score(prefixes, [1, 1])))
    pinned.push(3)  # a push after a load copies the live weights again
    assert all(
        torch.allclose(a, b, atol=1e-5) for a, b in zip(pinned.score(prefixes, [1, 1]), live.score(prefixes, [1, 1]))
    )
    pinned.stop.set()
    with pytest.raises(SamplingStopped):
        pinned.generate(prefixes, 3)


def composed(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def test_the_config_check_refuses_what_the_pipeline_cannot_run_naming_the_field():
    check_config(composed())  # the default: 0
    check_config(composed("rollout.max_staleness=1"))
    with pytest.raises(ValueError, match=r"rollout.max_staleness must be an integer >= 0, got -1"):
        check_config(composed("rollout.max_staleness=-1"))
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 needs sampler=hf: VLLMSampler"):
        check_config(composed("rollout.max_staleness=1", "sampler=vllm"))
    with pytest.raises(
        ValueError, match=r"rollout.max_staleness=1 with trainer.strategy=.*fsdp_strategy: the producer"
    ):
        check_config(composed("rollout.max_staleness=1", "trainer=fsdp"))
    check_config(composed("rollout.max_staleness=1", "trainer=ddp"))  # each rank its own producer
    check_config(composed("rollout.max_staleness=1", "sampler.own_process=true"))
    check_config(composed("rollout.max_staleness=1", "sampler.own_process=true", "sampler.own_device=cpu"))
    check_config(composed("rollout.max_staleness=1", "sampler.own_process=true", "trainer=ddp"))
    with pytest.raises(ValueError, match=r"sampler.own_device=cuda:1 on several ranks: every rank's sampler worker"):
        check_config(
            composed("rollout.max_staleness=1", "sampler.own_process=true", "sampler.own_device=cuda:1", "trainer=ddp")
        )
    with pytest.raises(ValueError, match=r"sampler.own_process=true .* rollout.max_staleness=0 runs no producer"):
        check_config(composed("sampler.own_process=true"))
    with pytest.raises(ValueError, match=r"sampler.own_device=cpu is the device of the sampler's worker process"):
        check_config(composed("rollout.max_staleness=1", "sampler.own_device=cpu"))  # no worker: the device unused
    tis = ("rollout.max_staleness=1", "method=grpo_tis")
    check_config(composed(*tis))
    check_config(composed("method=grpo_tis", "module.recompute_rollout_logprobs=never"))  # staleness 0: no stale batch
    with pytest.raises(ValueError, match=r"objective.off_policy_correction=tis and module.recompute_rollout_logprobs"):
        check_config(composed(*tis, "module.recompute_rollout_logprobs=never"))
    check_config(composed("rollout.max_staleness=1", "trainer.devices=2"))
    adaptive = "+rollout.adaptive_stop={gap_threshold: 0.02, patience: 3}"
    for layout in ("trainer=ddp", "trainer.devices=2"):
        with pytest.raises(ValueError, match=r"rollout.max_staleness=1 with rollout.adaptive_stop on several ranks"):
            check_config(composed("rollout.max_staleness=1", layout, adaptive))
    check_config(composed("rollout.max_staleness=1", adaptive))  # one rank: the gap is this rank's, no collective
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 < module.epochs x module.minibatches = 2"):
        check_config(composed("rollout.max_staleness=1", "module.minibatches=2", "trainer.max_steps=2"))
    check_config(composed("rollout.max_staleness=2", "module.minibatches=2", "trainer.max_steps=2"))
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 with allocation=RailAllocation: the branch"):
        check_config(composed("rollout.max_staleness=1", "allocation=rail"))
    check_config(composed("rollout.max_staleness=1", "allocation=rail", "callbacks.allocation_decisions=null"))
    lora = ("rollout.max_staleness=1", "model/lora=default")
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 with model/lora and judge=SelfPrivilegedJudge"):
        check_config(composed(*lora, "judge=self_privileged"))  # no teacher: the step-0 policy generates
    check_config(composed(*lora, "judge=teacher", "teacher_model.path=/models/teacher"))  # its own model: accepted


class ValidationRollout:
    """A rollout engine for the data module's validation path: a batch of the prompts; its sampler releases."""

    sampler = SimpleNamespace(release=lambda: None)

    def generate(self, batch, **kwargs):
        return SimpleNamespace(prompts=list(batch))


class DrainCounter:
    """A pipeline stand-in: counts drains; take returns the batch of the prompts it was told."""

    def __init__(self, prompts):
        self.drains, self.prompts, self.ahead, self.depth = 0, prompts, 1, 1

    def drain(self):
        self.drains += 1

    def take(self, step):
        return SimpleNamespace(prompts=self.prompts, step=step)


def test_the_pipeline_is_drained_once_per_validation_run_whatever_its_batches(monkeypatch):
    # one collective per validation run: ranks may hold different numbers of validation batches
    calls = []
    monkeypatch.setattr(datamodule, "agreed_on_all_ranks", lambda call, step: calls.append(step) or call())
    dm = RolloutDataModule(prompts=None, rollout=ValidationRollout(), tokenizer=None, max_staleness=1)
    dm.trainer = SimpleNamespace(
        global_rank=0, world_size=1, training=False, global_step=3, max_steps=4, lightning_module=None
    )
    dm._pipeline = pipeline = DrainCounter(["p"])
    validation = [SimpleNamespace(index=0)]
    for _ in range(3):
        dm.on_before_batch_transfer(validation, 0)
    assert (calls, pipeline.drains) == ([3], 1)
    dm.trainer.training = True
    dm.on_before_batch_transfer(["p"], 0)  # a training batch: its take is agreed too, the next validation drains again
    dm.trainer.training, dm.trainer.global_step = False, 4
    for _ in range(2):
        dm.on_before_batch_transfer(validation, 0)
    assert (calls, pipeline.drains) == ([3, 3, 4], 2)


def test_a_push_that_fails_in_the_trainers_thread_is_a_producer_error_and_closes_the_pipeline():
    class DeadWorker(FakeSampler):
        def push(self, version):
            raise SamplerProcessDied("the sampler process (pid 1) ended with exit code -9")

    sampler = DeadWorker()
    pipeline = RolloutPipeline(FakeEngine(), sampler, prompt_batches(), max_staleness=1)
    with pytest.raises(ProducerError, match=r"failed taking the weights of version 0: SamplerProcessDied") as err:
        pipeline.take(0)  # nothing ahead: the batch starts with a push of the live weights, here
    assert isinstance(err.value.__cause__, SamplerProcessDied)
    assert sampler.closed and not pipeline.thread.is_alive() and not producer_threads()


def test_batches_started_from_one_weights_generation_share_one_capture_and_none_outlives_its_jobs():
    policy = tiny_llama()
    captures = WeightCaptures(policy, torch.bfloat16)
    first, second = captures.get(), captures.get()  # two batches started before the next update (depth 3)
    assert second is first and captures.made == 1 and first["model.norm.weight"].dtype == torch.bfloat16
    with torch.no_grad():
        policy.model.norm.weight.add_(1.0)
    weights_generation(policy).advance()  # an optimizer step
    third = captures.get()
    assert third is not first and captures.made == 2
    assert torch.equal(third["model.norm.weight"], first["model.norm.weight"] + 1)
    del first, second, third  # the producer loaded them: the jobs let go
    assert captures.get()["model.norm.weight"] is not None and captures.made == 3  # not kept past its jobs
