"""Hydra's ``compose`` memoised for the test session (imported first by tests/conftest.py).

The suite composes the train config about 1,500 times, a fifth of them with overrides another test
already composed, at ~0.14 s each on a 2-core machine (Hydra re-reads and merges the YAML files every
time). A config composed from this checkout's ``configs/`` (the files no test writes) without the Hydra
node is kept per (config name, overrides) and each later call gets a deep copy of it (~4 ms), so a test
that edits its config changes nobody else's. Other config folders (a test's edited copy of ``configs/``)
and ``return_hydra_config=True`` (the node holds the working folder and the time) are composed every
time; an error is never kept (each call raises it again)."""

from __future__ import annotations

import copy
from pathlib import Path

import hydra
from hydra.core.global_hydra import GlobalHydra

CONFIGS = str(Path(__file__).resolve().parents[1] / "configs")
_compose = hydra.compose
_composed: dict = {}


def _sources() -> tuple[str, ...]:
    return tuple(source.path for source in GlobalHydra.instance().config_loader().get_sources())


def compose(config_name=None, overrides=None, return_hydra_config=False, strict=None):
    """``hydra.compose`` (same arguments), memoised as the module docstring says."""
    overrides = list(overrides or [])
    sources = _sources()
    if return_hydra_config or strict is not None or CONFIGS not in sources:
        return _compose(config_name, overrides, return_hydra_config=return_hydra_config, strict=strict)
    key = (sources, config_name, tuple(overrides))
    if key not in _composed:
        _composed[key] = _compose(config_name, overrides)
    return copy.deepcopy(_composed[key])


hydra.compose = compose
