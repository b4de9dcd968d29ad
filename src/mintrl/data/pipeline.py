"""Rollouts one batch ahead of the trainer (``rollout.max_staleness > 0``): a producer thread
generates rollout batch ``k + 1`` from weights version ``v`` (optimizer steps done when it was
started) while the trainer updates on batch ``k``.

The producer samples from its own copy of the weights (:class:`mintrl.sampler.pinned.PinnedSampler`),
never from the live policy the optimizer writes: the trainer's thread pushes the live weights into
the copy between the producer's batches, while no job is in flight, and stamps the job with that
version, which the engine writes into ``RolloutBatch.step``. At most one batch is in flight, so a
batch is trained ``global_step - batch.step`` optimizer steps after its weights (its staleness):
the updates of one batch (``module.epochs x module.minibatches``), which the config check keeps
within ``rollout.max_staleness``. A batch staler than the bound all the same (a guard) is dropped,
counted (``rollout/dropped_stale``) and its prompts generated again from the current weights.

This is a thread in the trainer's process: on CPU it overlaps no compute of its own with the
update (the two share the cores) but overlaps what waits on something else (a served judge's or
reward's latency). A GPU layout would run the sampler on its own devices or process, with the
weights pushed to it the same way; that layout is not built here.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Iterator

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_int
from mintrl.data.base import PromptItem
from mintrl.sampler.pinned import PinnedSampler, SamplingStopped

log = logging.getLogger(__name__)

FIELD = "rollout.max_staleness"


class ProducerError(RuntimeError):
    """The producer thread raised while generating a rollout batch (the cause is chained)."""


@dataclass
class _Job:
    """A rollout batch to generate: its prompts and the weights version pushed for it."""

    prompts: list[PromptItem]
    version: int


@dataclass
class _Result:
    """What the producer sends back for one job: the batch, or the exception it raised."""

    job: _Job
    batch: RolloutBatch | None = None
    error: BaseException | None = None


class RolloutPipeline:
    """One producer thread, one rollout batch in flight (see module docstring).

    The trainer's thread calls :meth:`take` once per training batch (it returns the batch of the
    next prompts, waiting for it) and then :meth:`start` to set the batch after it going from the
    weights as they are now; :meth:`drain` waits for the batch in flight (before a validation uses
    the engine); :meth:`close` stops and joins the thread.

    Args:
        engine: the rollout engine (:class:`mintrl.rollout.engine.RolloutEngine`); the producer runs
            a shallow copy of it whose sampler is ``sampler`` (schedule, allocation, judge and reward
            are the engine's own objects, used by one thread at a time).
        sampler: the producer's sampler, pushed only by this class.
        prompts: the training prompt batches, from the data position of the first batch on.
        max_staleness: the bound (optimizer steps, >= 1) on ``global_step - batch.step`` of a batch
            :meth:`take` returns.
        join_timeout_s: seconds :meth:`close` waits for the thread (it stops at its next sampler call).

    Raises:
        ValueError: ``max_staleness`` not an integer >= 1.
    """

    def __init__(
        self,
        engine,
        sampler: PinnedSampler,
        prompts: Iterator[list[PromptItem]],
        max_staleness: int,
        join_timeout_s: float = 600.0,
    ):
        check_int(FIELD, max_staleness, 1)
        self.engine = copy.copy(engine)
        self.engine.sampler = sampler
        self.sampler, self.prompts, self.max_staleness = sampler, prompts, max_staleness
        self.join_timeout_s = join_timeout_s
        self.dropped_stale = 0  # batches dropped for exceeding max_staleness (rollout/dropped_stale)
        self._jobs: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._in_flight: _Job | None = None  # started, its result not yet received
        self._ready: _Result | None = None  # received by drain, not yet taken
        self._closed = False
        self.thread = threading.Thread(target=self._produce, name="rollout-producer", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the producer thread
    def _produce(self) -> None:
        """Generate each job's batch until a ``None`` job, a stop or an error (sent back, then ends)."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                batch = self.engine.generate(job.prompts, step=job.version)
            except SamplingStopped:
                return
            except BaseException as error:  # sent to the trainer's thread, which raises it
                self._results.put(_Result(job, error=error))
                return
            finally:
                self.sampler.release()
            self._results.put(_Result(job, batch=batch))

    # ------------------------------------------------------------------ the trainer's thread
    @property
    def idle(self) -> bool:
        """No job in flight (the copy may be pushed)."""
        return self._in_flight is None

    def start(self, version: int, prompts: list[PromptItem] | None = None) -> None:
        """Push the live weights as version ``version`` (optimizer steps done) and start the batch
        of ``prompts`` (default: the next prompt batch) in the producer.

        Raises:
            RuntimeError: a batch is in flight or waits to be taken, or the pipeline is closed.
        """
        if self._closed or self._in_flight is not None or self._ready is not None:
            raise RuntimeError("RolloutPipeline.start: the previous batch is not taken yet, or the pipeline is closed")
        self.sampler.push(version)
        self._in_flight = _Job(next(self.prompts) if prompts is None else prompts, int(version))
        self._jobs.put(self._in_flight)

    def drain(self) -> None:
        """Wait until the batch in flight (if any) is generated; it stays for :meth:`take`.

        Raises:
            ProducerError: the producer raised (the thread is joined first).
        """
        if self._in_flight is not None:
            self._ready = self._receive()
            self._in_flight = None

    def take(self, global_step: int) -> RolloutBatch:
        """The rollout batch trained at optimizer step ``global_step``: the one in flight (started at
        the previous step), else one started now from the current weights. A batch with
        ``global_step - batch.step > max_staleness`` is dropped (counted, warned) and its prompts
        generated again from the current weights. Its stats gain ``rollout/staleness`` (optimizer
        steps) and ``rollout/dropped_stale`` (count so far).

        Raises:
            ProducerError: the producer raised (the thread is joined first).
        """
        if self._in_flight is None and self._ready is None:
            self.start(global_step)
        while True:
            self.drain()
            result, self._ready = self._ready, None
            staleness = global_step - result.batch.step
            if 0 <= staleness <= self.max_staleness:
                break
            self.dropped_stale += 1
            log.warning(
                "dropped a rollout batch of weights version %d at optimizer step %d: %d steps old, over %s=%d; "
                "generating its prompts again from the current weights",
                result.batch.step,
                global_step,
                staleness,
                FIELD,
                self.max_staleness,
            )
            self.start(global_step, result.job.prompts)
        batch = result.batch
        assert 0 <= global_step - batch.step <= self.max_staleness, "a rollout batch over the staleness bound"
        batch.stats["rollout/staleness"] = float(staleness)
        batch.stats["rollout/dropped_stale"] = float(self.dropped_stale)
        return batch

    def _receive(self) -> _Result:
        """The in-flight job's result (waits; checks every second that the producer still runs).

        Raises:
            ProducerError: the producer raised, or ended without a result.
        """
        job = self._in_flight
        while True:
            try:
                result = self._results.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.thread.is_alive():
                    result = _Result(job, error=RuntimeError("the producer thread ended without a result"))
                    break
        if result.error is not None:
            self.close()
            error = result.error
            raise ProducerError(
                f"the rollout producer thread ({FIELD}={self.max_staleness}) failed generating the rollout batch "
                f"of weights version {job.version} ({len(job.prompts)} prompts): {type(error).__name__}: {error}"
            ) from error
        return result

    def close(self) -> None:
        """Stop the producer (a batch in flight stops at its next sampler call and is discarded)
        and join it; idempotent. Warns when the thread is still alive after ``join_timeout_s``
        (a call it waits on, e.g. a judge request, has not returned)."""
        if self._closed:
            return
        self._closed = True
        self.sampler.stop.set()
        self._jobs.put(None)
        if self.thread is not threading.current_thread():
            self.thread.join(self.join_timeout_s)
            if self.thread.is_alive():
                log.error("the rollout producer thread did not stop within %.0f s", self.join_timeout_s)
        self._in_flight, self._ready = None, None
