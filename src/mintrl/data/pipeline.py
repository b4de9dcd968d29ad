"""Rollouts ahead of the trainer (``rollout.max_staleness > 0``): a producer thread generates
rollout batch ``k + d`` from weights version ``v`` (optimizer steps done when it was started) while
the trainer updates on batch ``k``; ``d`` (``depth``) batches are in flight at most.

The producer samples from its own copy of the weights (:class:`mintrl.sampler.pinned.PinnedSampler`
in this process, or :class:`mintrl.sampler.process.ProcessSampler` in a worker process with
``sampler.own_process``), never from the live policy the optimizer writes. A batch started while the producer is idle gets
the live weights pushed into the copy by the trainer's thread; one started while the producer is
busy carries a capture of the live weights, which the producer loads into its copy between its
batches. Either way the job is stamped with that version, which the engine writes into
``RolloutBatch.step``. A batch is trained ``global_step - batch.step`` optimizer steps after its
weights (its staleness): ``depth`` batches' updates (``module.epochs x module.minibatches`` each),
which the data module keeps within ``rollout.max_staleness``. A batch staler than the bound all the
same (a guard) is dropped, counted (``rollout/dropped_stale``) and its prompts generated again from
the current weights.

Under DDP each rank runs its own pipeline on its share of the prompts (the weights, hence the
versions, are equal on every rank); a producer failure on any rank stops every rank at the same
batch (:func:`agreed_on_all_ranks`). The producer is a thread in the trainer's process: on CPU it
overlaps no compute of its own with the update (the two share the cores) but overlaps what waits on
something else (a served judge's or reward's latency). With ``sampler.own_process`` its token
generation runs in a worker process, on a device of its own where one is given
(``sampler.own_device``).

Whatever fails in the pipeline, in the producer thread (generation, a judge, a load into the copy)
or in the trainer's thread (a push or capture of the weights, the sampler's start), reaches the
trainer as a :class:`ProducerError`.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_int
from mintrl.core.ranks import all_ranks_sum, data_parallel_size
from mintrl.data.base import PromptItem
from mintrl.sampler.pinned import ProducerSampler, SamplingStopped

log = logging.getLogger(__name__)

FIELD = "rollout.max_staleness"


class ProducerError(RuntimeError):
    """The producer thread raised while generating a rollout batch (the cause is chained)."""


T = TypeVar("T")


def agreed_on_all_ranks(call: Callable[[], T], global_step: int) -> T:
    """``call()`` (a :class:`RolloutPipeline` ``take`` or ``drain``), after which every data-parallel
    rank learns whether any rank's producer failed in it: one ``all_reduce`` of a flag (every rank
    calls this at the same points, once each; no collective with one rank). A rank whose own
    producer did not fail raises too, so that no rank goes on into the training step's collectives
    waiting for one that stopped (a hang until the process group's timeout).

    Raises:
        ProducerError: this rank's producer failed (its own error), or another rank's did (names
            ``global_step``, the optimizer step, and how many ranks failed).
    """
    try:
        result, failure = call(), None
    except ProducerError as error:
        result, failure = None, error
    failed = int(all_ranks_sum([failure is not None])[0]) if data_parallel_size() > 1 else int(failure is not None)
    if failure is not None:
        raise failure
    if failed:
        raise ProducerError(
            f"the rollout producer of {failed} other data-parallel rank(s) failed at optimizer step {global_step} "
            f"({FIELD}): this rank stops with it (its error is in that rank's log)"
        )
    return result


@dataclass
class _Job:
    """A rollout batch to generate: its prompts, the weights version it is stamped with, the captured
    weights the producer loads first (None: pushed already), and the state the producer found when
    it started the job (a copy of ``state()``, None until then)."""

    prompts: list[PromptItem]
    version: int
    weights: dict | None = None
    state: dict | None = None
    started: bool = False


@dataclass
class _Result:
    """What the producer sends back for one job: the batch, or the exception it raised."""

    job: _Job
    batch: RolloutBatch | None = None
    error: BaseException | None = None


class RolloutPipeline:
    """One producer thread, up to ``depth`` rollout batches in flight (see module docstring).

    The trainer's thread calls :meth:`take` once per training batch (it returns the batch of the
    next prompts, waiting for it) and :meth:`start` to set later batches going from the weights as
    they are now; :meth:`drain` waits for the batches in flight (before a validation uses the
    engine); :meth:`state_before_oldest` is the state a checkpoint holds; :meth:`close` stops and
    joins the thread.

    Args:
        engine: the rollout engine (:class:`mintrl.rollout.engine.RolloutEngine`); the producer runs
            a shallow copy of it whose sampler is ``sampler`` and which runs no collective
            (``runs_collectives`` False: with several ranks no pooled reward gap); schedule,
            allocation, judge and reward are the engine's own objects, used by one thread at a time.
        sampler: the producer's sampler, pushed and loaded only by this class, closed by :meth:`close`.
        prompts: the training prompt batches, from the data position of the first batch on.
        max_staleness: the bound (optimizer steps, >= 1) on ``global_step - batch.step`` of a batch
            :meth:`take` returns.
        depth: batches in flight at most (>= 1).
        state: the data module's state now (``RolloutDataModule._own_state``); a deep copy of it is
            taken in the producer thread right before each job (under :attr:`lock`) and kept with
            the job for :meth:`state_before_oldest`. None: no state is kept.
        join_timeout_s: seconds :meth:`close` waits for the thread (it stops at its next sampler call).

    Raises:
        ValueError: ``max_staleness`` or ``depth`` not an integer >= 1.
    """

    def __init__(
        self,
        engine,
        sampler: ProducerSampler,
        prompts: Iterator[list[PromptItem]],
        max_staleness: int,
        depth: int = 1,
        state: Callable[[], dict] | None = None,
        join_timeout_s: float = 600.0,
    ):
        check_int(FIELD, max_staleness, 1)
        check_int("depth", depth, 1)
        self.engine = copy.copy(engine)
        self.engine.sampler = sampler
        self.engine.runs_collectives = False  # it runs in the producer thread, beside the update's collectives
        self.sampler, self.prompts, self.max_staleness, self.depth = sampler, prompts, max_staleness, depth
        self.state, self.join_timeout_s = state, join_timeout_s
        self.dropped_stale = 0  # batches dropped for exceeding max_staleness (rollout/dropped_stale)
        self.lock = threading.Lock()  # a job's start (its state) against state_before_oldest
        self._jobs: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._pending: deque[_Job] = deque()  # started, result not received yet (in order)
        self._done: deque[_Result] = deque()  # received by drain, not taken yet (in order)
        self._closed = False
        self._state_at_close: dict | None = None
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
                with self.lock:
                    job.state = copy.deepcopy(self.state()) if self.state is not None else None
                    job.started = True
                if job.weights is not None:
                    self.sampler.load(job.weights, job.version)
                    job.weights = None
                batch = self.engine.generate(job.prompts, step=job.version)
                self.sampler.release()  # a failure here (a worker that died just now) is the job's
            except SamplingStopped:
                self._release_quietly()
                return
            except BaseException as error:  # sent to the trainer's thread, which raises it
                self._release_quietly()
                self._results.put(_Result(job, error=error))
                return
            self._results.put(_Result(job, batch=batch))

    def _release_quietly(self) -> None:
        """Release the sampler after a stop or an error, whose own exception is the one reported."""
        try:
            self.sampler.release()
        except BaseException:  # noqa: BLE001 - the error being reported comes first
            log.debug("the rollout producer's sampler failed to release after an error", exc_info=True)

    # ------------------------------------------------------------------ the trainer's thread
    @property
    def ahead(self) -> int:
        """Batches started and not taken yet."""
        return len(self._pending) + len(self._done)

    @property
    def idle(self) -> bool:
        """No job in flight (the copy may be pushed)."""
        return not self._pending

    def start(self, version: int, prompts: list[PromptItem] | None = None) -> None:
        """Start the batch of ``prompts`` (default: the next prompt batch) from the live weights as
        version ``version`` (optimizer steps done): pushed into the copy when the producer is idle,
        else captured for the producer to load.

        Raises:
            RuntimeError: ``depth`` batches are ahead already, or the pipeline is closed.
        """
        if self._closed or self.ahead >= self.depth:
            raise RuntimeError(f"RolloutPipeline.start: {self.ahead} batches ahead (depth {self.depth}) or closed")
        self._submit(next(self.prompts) if prompts is None else prompts, version)

    def _submit(self, prompts: list[PromptItem], version: int) -> None:
        """Queue the job of ``prompts`` at ``version``: the weights pushed now when the producer is idle, else
        captured for it to load.

        Raises:
            ProducerError: the push or capture failed (e.g. a sampler worker process that died while idle);
                the pipeline is closed first.
        """
        try:
            if self._pending:
                job = _Job(prompts, int(version), weights=self.sampler.capture())
            else:
                self.sampler.push(version)
                job = _Job(prompts, int(version))
        except BaseException as error:
            self.close()
            raise ProducerError(
                f"the rollout producer's sampler ({FIELD}={self.max_staleness}) failed taking the weights of version "
                f"{version}: {type(error).__name__}: {error}"
            ) from error
        self._pending.append(job)
        self._jobs.put(job)

    def drain(self) -> None:
        """Wait until the batches in flight are generated; they stay for :meth:`take`.

        Raises:
            ProducerError: the producer raised (the thread is joined first).
        """
        while self._pending:
            self._done.append(self._receive())

    def take(self, global_step: int) -> RolloutBatch:
        """The rollout batch trained at optimizer step ``global_step``: the oldest started (else one
        started now from the current weights). A batch with ``global_step - batch.step >
        max_staleness`` is dropped (counted, warned) and its prompts generated again from the
        current weights, before the later batches. Its stats gain ``rollout/dropped_stale`` (count
        so far); its staleness is the trainer's ``train/staleness``.

        Raises:
            ProducerError: the producer raised (the thread is joined first).
        """
        if self.ahead == 0:
            self.start(global_step)
        result = self._done.popleft() if self._done else self._receive()
        staleness = global_step - result.batch.step
        while not 0 <= staleness <= self.max_staleness:
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
            self.drain()  # the producer idle: the copy takes the current weights, later batches keep their order
            self._submit(result.job.prompts, global_step)
            result = self._receive()
            staleness = global_step - result.batch.step
        batch = result.batch
        assert 0 <= global_step - batch.step <= self.max_staleness, "a rollout batch over the staleness bound"
        batch.stats["rollout/dropped_stale"] = float(self.dropped_stale)
        return batch

    def state_before_oldest(self) -> dict | None:
        """The state the oldest batch not taken yet found when the producer started it (``state()``
        now when it has not started: the producer is then idle); None when no batch is ahead or no
        ``state`` was given. After :meth:`close`, the one at the close (the batches ahead were
        discarded)."""
        if self._closed:
            return self._state_at_close
        with self.lock:
            job = self._done[0].job if self._done else (self._pending[0] if self._pending else None)
            if job is None or self.state is None:
                return None
            # a copy: once the lock is released the producer may start that job and change the live state
            return job.state if job.started else copy.deepcopy(self.state())

    def _receive(self) -> _Result:
        """The oldest pending job's result (waits; checks every second that the producer still runs).

        Raises:
            ProducerError: the producer raised, or ended without a result.
        """
        job = self._pending[0]
        while True:
            try:
                result = self._results.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.thread.is_alive():
                    try:  # it may have put its result between the wait and the check
                        result = self._results.get_nowait()
                    except queue.Empty:
                        result = _Result(job, error=RuntimeError("the producer thread ended without a result"))
                    break
        if result.error is not None:
            self.close()  # the failed job still counts as the oldest: the state at the close is the one it found
            error = result.error
            raise ProducerError(
                f"the rollout producer thread ({FIELD}={self.max_staleness}) failed generating the rollout batch "
                f"of weights version {job.version} ({len(job.prompts)} prompts): {type(error).__name__}: {error}"
            ) from error
        self._pending.popleft()
        return result

    def close(self) -> None:
        """Stop the producer (a batch in flight stops at its next sampler call; the batches ahead are
        discarded), join it and close its sampler; idempotent. Warns when the thread is still alive after ``join_timeout_s`` (a call it
        waits on, e.g. a judge request, has not returned)."""
        if self._closed:
            return
        self._state_at_close = self.state_before_oldest()
        self._closed = True
        self.sampler.stop.set()
        self._jobs.put(None)
        if self.thread is not threading.current_thread():
            self.thread.join(self.join_timeout_s)
            if self.thread.is_alive():
                log.error("the rollout producer thread did not stop within %.0f s", self.join_timeout_s)
        self.sampler.close()  # a sampler process is stopped and joined
        self._pending.clear()
        self._done.clear()
