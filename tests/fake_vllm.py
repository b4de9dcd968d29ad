"""A stand-in for the ``vllm`` package, for tests of :class:`mintrl.sampler.VLLMSampler` without vLLM
(the real engine's tests run in ``.venv-vllm``: ``make test-vllm``).

:class:`FakeLLM` checks, when it is started, what vLLM's own start reads and would fail on: with
``distributed_executor_backend="external_launcher"`` the executor reads ``os.environ["RANK"]`` and
``os.environ["LOCAL_RANK"]`` (``ExecutorWithExternalLauncher._distributed_args``, vLLM 0.16 to
0.20: a ``KeyError`` when missing) and asserts in-process mode (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
and ``env://`` needs ``MASTER_ADDR`` and ``MASTER_PORT`` unless a process group exists; a local
model folder must hold ``config.json`` and safetensors weights, which it loads. Its weight push
(``collective_rpc("reload_weights", weights_iterator=...)``) consumes the iterator the way the
worker's ``load_weights`` does, one tensor at a time, copying each and dropping it, and records how
many received tensors were alive at once (weak references), whether inference mode was on, and the
weights it holds. ``sleep``, ``wake_up`` and ``reset_prefix_cache`` are recorded in :attr:`FakeLLM.events`.
"""

from __future__ import annotations

import os
import sys
import types
import weakref
from pathlib import Path

import torch
from safetensors.torch import load_file


class FakeLLM:
    """``vllm.LLM`` as far as :class:`mintrl.sampler.VLLMSampler` uses it (see module docstring)."""

    started: list[FakeLLM] = []  # every engine started, in order

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.events: list[tuple] = []
        self.pushes = 0
        self.peak_alive = 0  # most distinct received tensors alive at once during a push (a tied head is one)
        self.pushed_in_inference_mode: list[bool] = []
        self.pushed_names: list[list[str]] = []
        self.launcher = None
        if kwargs.get("distributed_executor_backend") == "external_launcher":
            assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0", "external_launcher needs in-process mode"
            self.launcher = {"rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"])}
            if not torch.distributed.is_initialized():
                self.launcher["master"] = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        folder = Path(kwargs["model"])
        if not (folder / "config.json").is_file():
            raise OSError(f"{folder} is not a model folder (no config.json): the engine would look it up on the hub")
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise OSError(f"no safetensors weights in {folder}: {sorted(p.name for p in folder.iterdir())}")
        self.loaded = {name: t for f in files for name, t in load_file(str(f)).items()}
        self.weights = {name: t.clone() for name, t in self.loaded.items()}
        FakeLLM.started.append(self)

    def collective_rpc(self, method, kwargs=None):
        assert method == "reload_weights", method
        self.events.append(("rpc", method))
        alive: list[weakref.ref] = []
        names = []
        self.pushed_in_inference_mode.append(torch.is_inference_mode_enabled())
        for name, tensor in kwargs["weights_iterator"]:
            alive.append(weakref.ref(tensor))
            self.peak_alive = max(self.peak_alive, len({id(ref()) for ref in alive if ref() is not None}))
            self.weights[name] = tensor.detach().clone()
            names.append(name)
            del tensor  # the worker's load_weights copies each tensor into its parameter and moves on
        self.pushed_names.append(names)
        self.pushes += 1
        return [None]

    def reset_prefix_cache(self):
        self.events.append(("reset_prefix_cache",))
        return True

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tags))


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


def fake_vllm_module(version: str = "0.16.0") -> types.ModuleType:
    """A ``vllm`` module object holding :class:`FakeLLM` and ``SamplingParams`` at ``version``."""
    module = types.ModuleType("vllm")
    module.__version__ = version
    module.LLM = FakeLLM
    module.SamplingParams = SamplingParams
    return module


def install_fake_vllm() -> None:
    """Put the fake in ``sys.modules`` for this process (a worker process; tests use
    ``monkeypatch.setitem(sys.modules, "vllm", fake_vllm_module())``)."""
    sys.modules["vllm"] = fake_vllm_module()
    FakeLLM.started.clear()
