"""Which wheels ``make gpu-wheels`` downloads for the offline GPU check (``benchmarks/gpu_check.sh``).

The GPU machine has torch, transformers, lightning, peft, torchmetrics and tensorboard installed
(and whatever they depend on); the main job needs a few more packages (``ROOTS``, imported by a
training run). Prints ``name==version`` of every distribution in the dependency closure of
``ROOTS`` that is not in the closure of the preinstalled set, at the versions installed in this
venv, one per line (the input of ``pip download --no-deps``).
"""

from __future__ import annotations

import re
from importlib import metadata

PREINSTALLED = ("torch", "transformers", "lightning", "peft", "torchmetrics", "tensorboard")
ROOTS = ("hydra-core", "omegaconf", "reasoning-gym", "rich")  # what a training run imports beyond them


def _name(requirement: str) -> str:
    return re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def closure(roots) -> dict[str, str]:
    """``{name: version}`` of the installed distributions ``roots`` need (extras' requirements skipped)."""
    seen: dict[str, str] = {}
    todo = [r.lower() for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement not installed here
        seen[name] = dist.version
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(_name(req))
    return seen


if __name__ == "__main__":
    have = closure(PREINSTALLED)
    for name, version in sorted(closure(ROOTS).items()):
        if name not in have:
            print(f"{name}=={version}")
