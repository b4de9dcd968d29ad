"""The rollout producer's sampler in a worker process of its own (``sampler.own_process=true`` with
``rollout.max_staleness >= 1``): the worker holds its copy of the policy (on ``sampler.own_device``,
e.g. a GPU the trainer does not use) and an :class:`mintrl.sampler.hf.HFSampler` on it; the
producer thread of the trainer's process sends it each generate and score call and receives the
rows, while the trainer's thread updates the live weights.

Weights travel by version, as to :class:`mintrl.sampler.pinned.PinnedSampler`'s copy: cloned from the
live policy in the sampling dtype (a LoRA adapter merged) by the trainer's thread and sent through
shared memory (``torch.multiprocessing``); the worker writes them into its copy between calls, never
during one. Calls go over one pipe, one at a time (a lock), so a load sent between two generate calls
of a batch is not possible: the pipeline sends loads only between batches.

The worker is started with the ``spawn`` method (no CUDA or thread state inherited) and seeded with
the seed its caller gives (the data module's: from the run's seed, the rank and the optimizer step). A worker that dies (killed, out of memory) makes the call waiting on it raise
:class:`SamplerProcessDied` naming its exit code, which the pipeline raises in the trainer's thread as
a ``ProducerError`` (the checkpoints already written are kept). An exception inside the worker comes
back as :class:`SamplerProcessError` with the worker's traceback; the worker keeps serving.
"""

from __future__ import annotations

import pickle
import threading
import traceback

import torch
import torch.multiprocessing as mp

from mintrl.sampler.base import Generation
from mintrl.sampler.hf import HFSampler
from mintrl.sampler.pinned import ProducerSampler, WeightCaptures
from mintrl.sampler.sampling_copy import base_config, plain_model
from mintrl.sampler.weights import weights_generation


class SamplerProcessDied(RuntimeError):
    """The sampler's worker process ended while a call waited on it (its exit code is named)."""


class SamplerProcessError(RuntimeError):
    """A call raised inside the sampler's worker process (its traceback is in the message)."""


def _serve(conn, spec: dict) -> None:
    """The worker's loop: build the copy, then answer ``(op, args)`` messages until ``close`` or
    the pipe closes. Replies are ``("ok", pickled result)`` or ``("error", traceback text)``."""
    torch.manual_seed(spec["seed"])
    model = plain_model(spec["config"], spec["dtype"], spec["device"])
    sampler = HFSampler(model, spec["tokenizer"], max_kv_gb=None, dtype="fp32", **spec["settings"])
    # the live sampler's end and pad ids (a model built from its config alone lacks generation_config.json's)
    sampler.eos_token_ids, sampler.pad_token_id = spec["eos_token_ids"], spec["pad_token_id"]
    state = model.state_dict()
    conn.send(("ok", pickle.dumps(None)))
    while True:
        try:
            op, args = conn.recv()
        except EOFError:  # the trainer's process went away
            return
        try:
            if op == "close":
                conn.send(("ok", pickle.dumps(None)))
                return
            if op == "load":
                with torch.no_grad():
                    for name, tensor in args.items():
                        if name in state:
                            state[name].copy_(tensor)
                weights_generation(model).advance()  # kept continuation KV of older weights is dropped
                result = None
            elif op == "generate":
                result = sampler.generate(*args)
            elif op == "score":
                result = sampler.score(*args)
            elif op == "release":
                result = sampler.release()
            else:
                raise ValueError(f"unknown sampler process call {op!r}")
            conn.send(("ok", pickle.dumps(result)))
        except BaseException:  # noqa: BLE001 - sent back to the caller, the worker keeps serving
            conn.send(("error", traceback.format_exc()))


class ProcessSampler(ProducerSampler):
    """The settings of ``live`` (batch size, engine, continuation cache, the copy's dtype) on a
    copy of ``live``'s policy held by a worker process (see module docstring).

    :attr:`exact_logprobs` is ``live``'s (the copy is in the dtype ``live`` samples in). Costs one copy
    of the weights in the worker (on ``device``) and, while a capture waits to be loaded, one in the
    trainer's process in shared memory.

    Args:
        live: the run's sampler on the live policy (``sampler=hf``).
        device: the worker's device (``"cpu"``, ``"cuda:1"``); None: the live policy's.
        seed: the worker's torch seed; None: drawn from the trainer's global generator.
        start_timeout_s: seconds to wait for the worker to build its copy.

    Raises:
        TypeError: ``live`` is not an :class:`HFSampler`.
        SamplerProcessDied: the worker ended before it was ready.
    """

    def __init__(self, live: HFSampler, device: str | None = None, seed: int | None = None, start_timeout_s=600.0):
        if not isinstance(live, HFSampler):
            raise TypeError(f"a sampler process copies an HFSampler (sampler=hf), not {type(live).__name__}")
        param = next(live.model.parameters())
        self.dtype = live.copy.dtype if live.copy is not None else param.dtype
        self.policy = live.model
        self.captures = WeightCaptures(live.model, self.dtype)  # one capture per weights generation
        self.eos_token_ids, self.pad_token_id = live.eos_token_ids, live.pad_token_id
        self.max_prefix_tokens = live.max_prefix_tokens
        self._exact = live.exact_logprobs
        self.stop = threading.Event()
        self.version: int | None = None
        self._pushed_generation: int | None = None  # the policy's weights generation the last push sent
        self._lock = threading.Lock()  # one call on the pipe at a time (producer and trainer threads)
        self._closed = False
        spec = {
            "config": base_config(live.model),
            "dtype": self.dtype,
            "device": str(device if device is not None else param.device),
            "tokenizer": live.tokenizer,
            "eos_token_ids": tuple(live.eos_token_ids),
            "pad_token_id": live.pad_token_id,
            "seed": int(torch.randint(0, 2**62, ()).item()) if seed is None else int(seed),
            "settings": {
                "max_batch_size": live.max_batch_size,
                "continuation_cache_mib": live.cache_bytes // 2**20,
                "engine": live.engine,
            },
        }
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, spec), name="mintrl-sampler", daemon=True)
        self.process.start()
        child.close()
        if not self._conn.poll(start_timeout_s):
            self.close()
            raise SamplerProcessDied(f"the sampler process did not build its copy within {start_timeout_s:.0f} s")
        self._reply()

    @property
    def exact_logprobs(self) -> bool:
        """The live sampler's (see :class:`mintrl.sampler.base.Sampler`)."""
        return self._exact

    def push(self, version: int) -> None:
        """Send the live weights now to the worker as ``version`` (optimizer steps done); call only while
        nothing samples (the producer idle). Weights unchanged since the last push (the policy's
        :func:`mintrl.sampler.weights.weights_generation`, no load since) are not sent again."""
        generation = weights_generation(self.policy).value
        if self.version is not None and generation == self._pushed_generation:
            self.version = int(version)
            return
        self.load(self.capture(), version)
        self._pushed_generation = generation

    def capture(self) -> dict[str, torch.Tensor]:
        """The live weights now, cloned in the copy's dtype, one capture per weights generation
        (:class:`mintrl.sampler.pinned.WeightCaptures`)."""
        return self.captures.get()

    def load(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Write ``weights`` into the worker's copy (it waits until written) and record ``version``."""
        self._pushed_generation = None  # the copy holds a capture now, whatever the live generation is
        self._call("load", weights)
        self.version = int(version)

    def _continue(self, prefixes, budgets: list[int], temperature: float, top_p: float, cache_keys) -> Generation:
        self._check_ready()
        prefixes = [list(map(int, p)) for p in prefixes]
        keys = None if cache_keys is None else list(cache_keys)
        return self._call("generate", (prefixes, budgets, temperature, top_p, keys))

    def score(self, sequences, prompt_lengths, temperature: float = 1.0) -> list[torch.Tensor]:
        """:meth:`HFSampler.score` on the worker's copy."""
        self._check_ready()
        return self._call("score", ([list(map(int, s)) for s in sequences], list(prompt_lengths), temperature))

    def release(self) -> None:
        """The worker drops its kept continuation KV (end of a rollout batch); nothing once closed.

        Raises:
            SamplerProcessDied: the worker ended.
        """
        if not self._closed:
            self._call("release", ())

    def close(self, lock_timeout_s: float = 5.0) -> None:
        """Stop the worker and join it; idempotent. The worker is asked to stop when no call is under way
        (the pipe free within ``lock_timeout_s`` seconds), and killed when it is still alive 10 s later or
        when a call holds the pipe (a stuck worker: the waiting call then raises :class:`SamplerProcessDied`)."""
        if self._closed:
            return
        self._closed = True
        self.stop.set()
        free = self._lock.acquire(timeout=lock_timeout_s)
        if free:
            try:
                if self.process.is_alive():
                    self._conn.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
            self.process.join(10.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10.0)
        if free:  # nobody waits on the pipe (a waiting call keeps it: it sees the worker's end and raises)
            self._conn.close()
            self._lock.release()

    def _call(self, op: str, args):
        """Send ``(op, args)`` and wait for the reply.

        Raises:
            SamplerProcessDied: the worker ended (or the sampler was closed) before replying.
            SamplerProcessError: the call raised in the worker.
        """
        with self._lock:
            if self._closed:
                raise SamplerProcessDied(f"the sampler process was closed before its {op!r} call")
            try:
                self._conn.send((op, args))
            except (BrokenPipeError, OSError) as error:
                raise self._died(op) from error
            return self._reply(op)

    def _reply(self, op: str = "start"):
        while True:
            try:
                if self._conn.poll(1.0):
                    status, payload = self._conn.recv()
                    break
            except (EOFError, OSError) as error:
                raise self._died(op) from error
            if not self.process.is_alive() and not self._conn.poll(0):
                raise self._died(op)
        if status == "error":
            raise SamplerProcessError(f"the sampler process raised in {op!r}:\n{payload}")
        return pickle.loads(payload)

    def _died(self, op: str) -> SamplerProcessDied:
        self.process.join(1.0)
        return SamplerProcessDied(
            f"the sampler process (pid {self.process.pid}) ended with exit code {self.process.exitcode} "
            f"while the rollout producer waited on its {op!r} call"
        )
