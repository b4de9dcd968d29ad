"""Shared fixtures: the real embedded model (loaded once per session) and a tiny random Llama."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import secrets
import shutil
from pathlib import Path

import compose_cache  # noqa: F401 - first: hydra.compose memoised before any test module imports it
import pytest
import torch
from multirun_helpers import write_multirun, write_seeded_multirun
from transformers import LlamaConfig, LlamaForCausalLM

from mintrl.model import embedded_smollm2

ARITHMETIC = dict(
    min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=["+"], allow_parentheses=False, allow_negation=False
)

# the main job at test size: 2 prompts x 4 rollouts per step, responses <= 24 tokens, chunks and
# corrections of 8 tokens, 4 held-out prompts x 1 sample (add trainer.max_steps and the rest per test)
TINY_RUN = [
    "data.prompts_per_step=2",
    "data.prompts.val_size=4",
    "data.val_samples_per_prompt=1",
    "rollout.max_response_tokens=24",
    "rollout.chunk_size=8",
    "rollout.continuation_len=8",
]


@pytest.fixture(scope="session")
def embedded():
    """SmolLM2-135M-Instruct as the default run loads it (converted once into the user cache), on
    ``MINTRL_TEST_DEVICE`` when set."""
    torch.manual_seed(0)
    loaded = embedded_smollm2()
    device = os.environ.get(
        "MINTRL_TEST_DEVICE"
    )  # e.g. cuda: benchmarks/gpu_vllm_check.sh runs the contract suite on a GPU
    if device:
        loaded.model.to(device)
    return loaded


@pytest.fixture(scope="session")
def tokenizer(embedded):
    return embedded.tokenizer


@pytest.fixture()
def fresh_policy(embedded):
    """A private copy of the embedded policy for tests that change weights."""
    return copy.deepcopy(embedded.model)


def tiny_llama(vocab: int = 128, positions: int = 128, **config) -> LlamaForCausalLM:
    """A 2-layer random Llama (hidden 32, 4 heads, 2 KV heads; EOS 2, pad 0, BOS 1) drawn at seed 0,
    in eval mode; ``config``: other ``LlamaConfig`` fields (e.g. ``initializer_range``)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        eos_token_id=2,
        pad_token_id=0,
        bos_token_id=1,
        **config,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture()
def tiny_model():
    """A 2-layer random Llama with a 128-token vocabulary, for fast tensor-code tests."""
    return tiny_llama()


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    """A fabricated multirun folder (tests/multirun_helpers.py's JOBS)."""
    return write_multirun(tmp_path_factory.mktemp("multirun"))


@pytest.fixture(scope="module")
def seeded_multirun(tmp_path_factory):
    """A fabricated multirun of settings crossed with seeds (tests/multirun_helpers.py's SEEDED_JOBS)."""
    return write_seeded_multirun(tmp_path_factory.mktemp("seeded_multirun"))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``vllm`` or ``gpu`` are skipped, with the reason, where vLLM is not installed or
    no CUDA device is visible (``make test-vllm`` runs the vLLM tier; a GPU machine runs both)."""
    missing = {
        "vllm": None if importlib.util.find_spec("vllm") else "vLLM not installed (make test-vllm)",
        "gpu": None if torch.cuda.is_available() else "no CUDA device (run on a GPU machine)",
    }
    for item in items:
        for marker, reason in missing.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))


SANDBOX_REPORT: list[str] = []  # filled by test_sandbox's hostile suite, printed in the summary


def pytest_terminal_summary(terminalreporter):
    """Print how many hostile programs the code sandbox contained (tests/test_sandbox.py)."""
    if SANDBOX_REPORT:
        terminalreporter.section("code sandbox")
        for line in SANDBOX_REPORT:
            terminalreporter.write_line(line)


@pytest.fixture()
def task_file():
    """An AgentBench OS task file outside every temporary folder, with its answer in it."""
    folder = Path("/srv") / f"mintrl-test-{secrets.token_hex(4)}"
    folder.mkdir(parents=True)
    path = folder / "os.json"
    path.write_text(json.dumps([{"description": "What is the code?", "evaluation": {"match": "48213"}}]))
    path.chmod(0o644)
    yield path
    shutil.rmtree(folder)
