"""The configs' folder and the OmegaConf resolvers they use (registered on import of
:mod:`mintrl.build.components`)."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mintrl.core.precision import cpu_trainer_precision

# Absolute, so that `python -m mintrl.cli.train` and the console scripts find the same configs (the
# repository's configs/ next to src/); MINTRL_CONFIG_DIR points elsewhere.
CONFIG_DIR = os.environ.get("MINTRL_CONFIG_DIR", str(Path(__file__).resolve().parents[3] / "configs"))


def rollout_batches(max_steps: int, epochs: int, minibatches: int) -> int:
    """Rollout batches in a run of ``max_steps`` optimizer updates with ``epochs x minibatches``
    updates per batch (``${rollout_batches:...}`` in ``configs/trainer``)."""
    return max(int(max_steps) // (int(epochs) * int(minibatches)), 1)


if not OmegaConf.has_resolver("rollout_batches"):
    OmegaConf.register_new_resolver("rollout_batches", rollout_batches)


def rollouts_per_step(prompts_per_step: int, rollouts_per_prompt: int) -> int:
    """A step's rollout budget: ``prompts_per_step x rollouts_per_prompt`` (rollouts;
    ``${rollouts_per_step:...}`` in the allocation rows' ``allocation.budget_per_step``)."""
    return int(prompts_per_step) * int(rollouts_per_prompt)


if not OmegaConf.has_resolver("rollouts_per_step"):
    OmegaConf.register_new_resolver("rollouts_per_step", rollouts_per_step)


if not OmegaConf.has_resolver("cpu_precision"):
    OmegaConf.register_new_resolver("cpu_precision", cpu_trainer_precision)


# The fields that bound one row's tokens: the prompt limit (a training source's, or under mintrl-eval
# the benchmark source's) and the response budget (interventions and, in episodes, observation turns included).
PROMPT_LIMITS = ("data.prompts.max_prompt_tokens", "data.prompts.source.max_prompt_tokens")
RESPONSE_LIMIT = "rollout.max_response_tokens"


def sequence_limits(cfg) -> dict[str, int] | None:
    """The two fields that bound a row's length, ``{field: tokens}`` (the first of
    :data:`PROMPT_LIMITS` that is set, and :data:`RESPONSE_LIMIT`), or None when the config
    states either not (e.g. a prompt source whose limit is left at its class default)."""
    limits = {}
    for fields in (PROMPT_LIMITS, (RESPONSE_LIMIT,)):
        for field in fields:
            try:
                value = OmegaConf.select(cfg, field)
            except OmegaConfBaseException:  # an interpolation that cannot resolve here
                value = None
            if isinstance(value, int) and not isinstance(value, bool):
                limits[field] = value
                break
        else:
            return None
    return limits


_REQUIRED = object()


def prompt_plus_response(default=_REQUIRED, *, _root_) -> int | None:
    """``${prompt_plus_response:}``: the longest row a sampler holds, prompt + response (tokens):
    ``data.prompts.max_prompt_tokens + rollout.max_response_tokens`` of the composed config
    (:func:`sequence_limits`); ``${prompt_plus_response:null}`` gives ``default`` where the config
    states no such limit.

    Raises:
        ValueError: no limit stated and no default given (the message names the fields).
    """
    limits = sequence_limits(_root_)
    if limits is not None:
        return sum(limits.values())
    if default is _REQUIRED:
        raise ValueError(
            f"${{prompt_plus_response:}} needs {' or '.join(PROMPT_LIMITS)} and {RESPONSE_LIMIT} set (tokens): "
            "set them, or set the sampler's length (e.g. sampler.max_model_len) in tokens"
        )
    return default


if not OmegaConf.has_resolver("prompt_plus_response"):
    OmegaConf.register_new_resolver("prompt_plus_response", prompt_plus_response)
