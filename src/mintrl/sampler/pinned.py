"""Samplers on their own copy of the policy, refreshed only when told: what a rollout producer
thread samples from while the trainer updates the live weights (``rollout.max_staleness > 0``,
:mod:`mintrl.data.pipeline`). :class:`PinnedSampler` keeps the copy in the trainer's process;
:class:`mintrl.sampler.process.ProcessSampler` in a worker process of its own."""

from __future__ import annotations

import threading
import weakref
from abc import abstractmethod

import torch

from mintrl.sampler.base import Generation, Sampler
from mintrl.sampler.hf import HFSampler
from mintrl.sampler.sampling_copy import SamplingCopy
from mintrl.sampler.weights import hf_weights, weights_generation


class SamplingStopped(Exception):
    """Raised by a :class:`ProducerSampler` when its ``stop`` event is set: the producer is shutting down."""


def captured_weights(policy: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``policy``'s weights as they are now under Hugging Face names (:func:`hf_weights`, a LoRA
    adapter merged), cloned: floating tensors cast to ``dtype``, others as they are. Call from the
    trainer's thread between optimizer steps; costs one copy of the weights in ``dtype``."""
    with torch.inference_mode(False), torch.no_grad():
        return {
            name: tensor.to(dtype, copy=True) if tensor.is_floating_point() else tensor.clone()
            for name, tensor in hf_weights(policy)
        }


class CapturedWeights(dict):
    """``{name: tensor}`` of one capture (a dict that a weak reference can point to)."""


class WeightCaptures:
    """Captures of ``policy``'s weights in ``dtype`` (:func:`captured_weights`), one per weights generation
    (:func:`mintrl.sampler.weights.weights_generation`): a capture is made again only when the weights changed
    since the last one, or when nothing holds the last one any more (it is kept by a weak reference, so no
    copy outlives the jobs that carry it). Captures are read, never written."""

    def __init__(self, policy: torch.nn.Module, dtype: torch.dtype):
        self.policy, self.dtype = policy, dtype
        self._last: tuple[int, weakref.ref] | None = None
        self.made = 0  # captures made (count)

    def get(self) -> CapturedWeights:
        """The weights now: the last capture while the generation is unchanged and it is still held, else a new one."""
        generation = weights_generation(self.policy).value
        if self._last is not None and self._last[0] == generation and (held := self._last[1]()) is not None:
            return held
        captured = CapturedWeights(captured_weights(self.policy, self.dtype))
        self._last, self.made = (generation, weakref.ref(captured)), self.made + 1
        return captured


class ProducerSampler(Sampler):
    """A sampler whose weights change only when the rollout pipeline says so: the trainer's thread
    :meth:`push` es the live weights (the producer idle) or :meth:`capture` s them for the
    producer to :meth:`load` between its batches; each records the weights :attr:`version`
    (optimizer steps done). Setting :attr:`stop` makes the next generate or score raise
    :class:`SamplingStopped`.

    Subclasses set ``stop`` (a ``threading.Event``) and ``version`` (None until the first push).
    """

    runs_pipelined = True
    stop: threading.Event
    version: int | None

    def _check_ready(self) -> None:
        """Call before every generate and score.

        Raises:
            SamplingStopped: :attr:`stop` is set.
            RuntimeError: nothing was pushed yet."""
        if self.stop.is_set():
            raise SamplingStopped("the rollout producer is shutting down")
        if self.version is None:
            raise RuntimeError(f"{type(self).__name__}.push must run before the first generation")

    @abstractmethod
    def push(self, version: int) -> None:
        """Make the live weights the sampled ones, as ``version``; only while nothing samples."""

    @abstractmethod
    def capture(self) -> dict[str, torch.Tensor]:
        """The live weights now, cloned, for a later :meth:`load` (the trainer's thread)."""

    @abstractmethod
    def load(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Make :meth:`capture`'s ``weights`` the sampled ones, as ``version`` (the producer, between batches)."""


class PinnedSampler(HFSampler, ProducerSampler):
    """The settings of ``live`` (batch size, engine, continuation cache) on a
    :class:`mintrl.sampler.sampling_copy.SamplingCopy` of ``live``'s policy that changes only at
    :meth:`push`, never while it samples: the producer thread generates a batch on the copy while
    the trainer's optimizer writes the live weights, and the trainer's thread pushes the weights
    between the producer's batches (the producer idle), recording their :attr:`version`.

    The copy is in the dtype ``live`` samples in (its bf16 copy's under ``sampler.dtype=bf16``, and under
    ``auto`` where the device computes bf16 fast; else the policy's),
    a LoRA adapter merged. With several batches in flight the trainer's thread :meth:`capture` s the
    weights of a later batch and the producer :meth:`load` s them before generating it.
    :attr:`exact_logprobs` is ``live``'s (the log-probs are the pushed
    weights' own, exact or bf16-rounded as ``live``'s would be). Costs one more copy of the weights
    in that dtype. A sharded policy (FSDP) is not supported (the push would be a collective).

    Args:
        live: the run's sampler on the live policy (``sampler=hf``).

    Raises:
        TypeError: ``live`` is not an :class:`HFSampler`.
    """

    def __init__(self, live: HFSampler):
        if not isinstance(live, HFSampler):
            raise TypeError(f"a pinned sampler copies an HFSampler (sampler=hf), not {type(live).__name__}")
        super().__init__(
            live.model,
            live.tokenizer,
            max_batch_size=live.max_batch_size,
            continuation_cache_mib=live.cache_bytes // 2**20,
            engine=live.engine,
            dtype="fp32",  # the copy is sampled as it is (it already holds the sampling dtype)
            max_kv_gb=None,  # live checked the budget
        )
        param = next(live.model.parameters())
        dtype = live.copy.dtype if live.copy is not None else param.dtype
        self._exact = live.exact_logprobs
        self.snapshot = SamplingCopy(live.model, dtype)
        self.captures = WeightCaptures(live.model, dtype)  # one capture per weights generation
        self.model = None  # the copy's module, from the first push on
        self.version: int | None = None  # the weights version (optimizer steps done) of the last push
        self.stop = threading.Event()  # set: the next generate or score raises SamplingStopped

    @property
    def exact_logprobs(self) -> bool:
        """The live sampler's (see :class:`mintrl.sampler.base.Sampler`)."""
        return self._exact

    @property
    def copy(self) -> None:
        """No second copy: the pushed copy is sampled as it is."""
        return None

    def push(self, version: int) -> None:
        """Copy the live weights into the copy (when they changed since the last push) and record
        ``version`` (optimizer steps done); call only while nothing samples from the copy. The
        first push builds the copy, which draws from the global torch generator."""
        refreshes = self.snapshot.refreshes
        self.model = self.snapshot.current()
        if self.snapshot.refreshes != refreshes:
            weights_generation(self.model).advance()  # kept continuation KV of older weights is dropped
        self.version = int(version)

    def capture(self) -> dict[str, torch.Tensor]:
        """The live weights as they are now, cloned in the copy's dtype (floating tensors; others as
        they are), for a :meth:`load` later, while the copy is being sampled: call from the trainer's
        thread between optimizer steps. Costs one more copy of the weights until loaded (shared by the
        batches started from one weights generation: :class:`WeightCaptures`)."""
        return self.captures.get()

    def load(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Write :meth:`capture`'s ``weights`` into the copy and record their ``version``; call while
        nothing samples from the copy (the producer, between its batches), after a first :meth:`push`.

        Raises:
            RuntimeError: no push yet (the copy is not built).
        """
        if self.model is None:
            raise RuntimeError("PinnedSampler.push must run before the first load")
        state = self.model.state_dict()
        with torch.inference_mode(False), torch.no_grad():
            for name, tensor in weights.items():
                if name in state:
                    state[name].copy_(tensor)
        self.snapshot.forget()  # the copy no longer holds the generation it last copied
        weights_generation(self.model).advance()  # kept continuation KV of older weights is dropped
        self.version = int(version)

    def _continue(self, prefixes, budgets: list[int], temperature: float, top_p: float, cache_keys) -> Generation:
        self._check_ready()
        return super()._continue(prefixes, budgets, temperature, top_p, cache_keys)

    def score(self, sequences, prompt_lengths, temperature: float = 1.0) -> list[torch.Tensor]:
        """:meth:`HFSampler.score` on the copy."""
        self._check_ready()
        return super().score(sequences, prompt_lengths, temperature)
