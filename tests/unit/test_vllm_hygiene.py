"""What ``sampler=vllm`` checks and cleans up without starting an engine (runs without vLLM
installed): the vLLM version floor (pyproject's extra and the check at engine start agree), the
refusal of a tensor-parallel policy engine, ``close()`` on every sampler (idempotent), and the data
module closing its sampler at the end of a fit. The engine-side checks are in
tests/integration/test_vllm.py."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mintrl.data.datamodule import RolloutDataModule
from mintrl.sampler import HFSampler, VLLMSampler
from mintrl.sampler.base import Generation, Sampler
from mintrl.sampler.vllm import VLLM_MIN_VERSION, check_vllm_version

ROOT = Path(__file__).resolve().parents[2]


def test_the_vllm_extra_pins_the_floor_the_engine_start_checks():
    """vLLM 0.16.0 is the first release whose worker ``reload_weights`` takes ``weights_iterator`` /
    ``weights_path`` (0.11.0 to 0.15.1 take no argument); pyproject's ``vllm`` extra pins it and the
    sampler checks the same number."""
    floors = re.findall(r'^vllm = \["vllm>=([0-9.]+)"\]', (ROOT / "pyproject.toml").read_text(), re.M)
    assert floors == ["0.16.0"]  # one line in [project.optional-dependencies]
    assert VLLM_MIN_VERSION == floors[0]


@pytest.mark.parametrize("installed", ["0.11.0", "0.15.1", "0.15.2.dev12+gabcdef"])
def test_an_older_vllm_is_refused_with_both_versions_named(installed):
    with pytest.raises(ImportError) as err:
        check_vllm_version(installed)
    assert installed in str(err.value) and ">=0.16.0" in str(err.value)


@pytest.mark.parametrize("installed", ["0.16.0", "0.16.0rc1", "0.32.0", "0.34.0+cpu", "dev"])
def test_the_floor_and_later_releases_pass(installed):
    """A pre-release of the floor passes (its number is the floor's); an unparsable version (a
    source build without its git metadata reports ``dev``) passes too."""
    assert check_vllm_version(installed) is None


def test_a_tensor_parallel_policy_engine_is_refused(tiny_model):
    """Refused when the sampler is built, before the tokenizer is read or any engine starts."""
    with pytest.raises(ValueError, match=r"sampler\.tensor_parallel_size=2") as err:
        VLLMSampler(tiny_model, None, tensor_parallel_size=2)
    assert "its own prompts" in str(err.value)  # why: data-parallel ranks do not share prompts
    assert VLLMSampler(tiny_model, SimpleNamespace(pad_token_id=0), tensor_parallel_size=1).tensor_parallel_size == 1


def test_close_is_idempotent_on_every_sampler(tiny_model):
    """The base ``close()`` is a no-op (HFSampler holds no engine); VLLMSampler's deletes the
    temporary model copy it saved for its engine, once, and a second call does nothing."""
    hf = HFSampler(tiny_model, SimpleNamespace(pad_token_id=0))
    hf.close()
    hf.close()
    assert hf.generate([[1, 5]], 2).token_ids[0].numel() >= 1  # still usable: close() freed nothing of it
    sampler = VLLMSampler(tiny_model, SimpleNamespace(pad_token_id=0, save_pretrained=lambda path: None))
    folder = sampler._model_path()  # a model without a folder of its own: saved to a temporary one
    assert os.path.isfile(os.path.join(folder, "config.json"))
    sampler.close()
    assert sampler.llm is None and sampler._tmpdir is None and not os.path.exists(folder)
    sampler.close()
    assert sampler.llm is None and sampler._tmpdir is None


class _Counting(Sampler):
    """A backend that counts ``close()`` calls (the data module's end-of-run hook is what is tested)."""

    eos_token_ids, pad_token_id = (2,), 0

    def __init__(self):
        self.closed = 0

    def _continue(self, prefixes, budgets, temperature, top_p, cache_keys):
        return Generation([torch.tensor([2]) for _ in prefixes], [torch.tensor([-1.0]) for _ in prefixes], [True])

    def score(self, sequences, prompt_lengths, temperature=1.0):
        return []

    def close(self) -> None:
        self.closed += 1


def test_the_data_module_closes_the_sampler_at_the_end_of_a_fit_only():
    """``teardown("fit")`` closes the sampler (a Hydra multirun then starts no second engine next to
    the first); a validation's teardown does not (``run`` validates before it fits)."""
    sampler = _Counting()
    dm = RolloutDataModule(prompts=None, rollout=SimpleNamespace(sampler=sampler), tokenizer=None)
    dm.teardown("validate")
    assert sampler.closed == 0
    dm.teardown("fit")
    assert sampler.closed == 1


def test_the_data_module_closes_the_sampler_when_a_run_fails():
    """Lightning calls no ``teardown`` after an exception, only ``on_exception``: it closes the sampler too."""
    sampler = _Counting()
    dm = RolloutDataModule(prompts=None, rollout=SimpleNamespace(sampler=sampler), tokenizer=None)
    dm.on_exception(RuntimeError("a failed step"))
    assert sampler.closed == 1
