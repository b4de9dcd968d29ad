"""``mintrl-eval``: pass@k of a checkpoint on one benchmark (``configs/eval.yaml``).

The benchmark's problems become the validation prompts of the usual data module; the Lightning
Trainer's ``validate`` samples ``n`` responses per problem with the configured sampler (so
``trainer=ddp`` shards problems over devices) and the module's :class:`mintrl.metrics.pass_at_k.PassAtK`
reduces the unbiased estimator over all ranks.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from mintrl.build.components import build_components

log = logging.getLogger(__name__)


def use_checkpoint(cfg: DictConfig) -> str:
    """Point ``cfg.model`` at ``cfg.ckpt_path`` when it is a Hugging Face folder; returns its kind.

    Returns:
        ``"hf"`` (a folder: loaded by ``model=hf``), ``"lightning"`` (a ``.ckpt`` file: its policy
        weights are loaded after the model config builds the architecture) or ``"base"``.

    Raises:
        FileNotFoundError: ``ckpt_path`` is neither ``base`` nor an existing file or folder.
    """
    path = str(cfg.ckpt_path)
    if path == "base":
        return "base"
    if os.path.isdir(path):
        with open_dict(cfg):
            cfg.model = OmegaConf.create(
                {"_target_": "mintrl.model.load_policy", "path": path, "dtype": cfg.model.get("dtype", "float32")}
            )
        return "hf"
    if os.path.isfile(path):
        return "lightning"
    raise FileNotFoundError(
        f"ckpt_path={path!r}: no such checkpoint file or Hugging Face folder (or use ckpt_path=base)"
    )


def load_lightning_policy(policy: torch.nn.Module, path: str) -> None:
    """Load the ``policy.*`` weights of a mintrl Lightning checkpoint into ``policy``. A LoRA run's
    checkpoint holds the adapter only (``mintrl_frozen_base_omitted``): ``policy`` must then carry the
    same adapter (``model/lora=default`` with the run's settings) and keeps its own base weights.

    Raises:
        ValueError: the checkpoint has no ``policy.*`` weights or they do not fit (names listed).
    """
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    state = ckpt["state_dict"]
    weights = {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}
    if not weights:
        raise ValueError(f"{path}: no policy.* weights in its state_dict (is it a mintrl checkpoint?)")
    missing, unexpected = policy.load_state_dict(weights, strict=False)
    if ckpt.get("mintrl_frozen_base_omitted"):  # a LoRA checkpoint: the frozen base is the model's own
        frozen = {name for name, p in policy.named_parameters() if not p.requires_grad}
        if not frozen:
            raise ValueError(
                f"{path}: a LoRA adapter checkpoint (no base weights): evaluate it with model/lora=default "
                "and the adapter settings of its run"
            )
        missing = [k for k in missing if k not in frozen]
    if missing or unexpected:
        raise ValueError(
            f"{path}: weights do not fit the model config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )


def markdown_table(result: dict) -> str:
    """One-row markdown table: benchmark, checkpoint, problems, n, pass@k columns, mean reward."""
    ks = list(result["pass_at_k"])
    fmt = lambda v: "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"  # noqa: E731
    head = ["benchmark", "checkpoint", "problems", "n", *[f"pass@{k}" for k in ks], "mean reward", "response tokens"]
    row = [
        result["benchmark"],
        result["checkpoint"],
        str(result["problems"]),
        str(result["n"]),
        *[fmt(result["pass_at_k"][k]) for k in ks],
        fmt(result["mean_reward"]),
        fmt(result["response_len"]),
    ]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), "| " + " | ".join(row) + " |"])


def evaluate(cfg: DictConfig) -> dict:
    """Run one evaluation; write ``eval.json``, ``eval.md`` and (``save_samples``) every sampled
    response with its reward as ``samples.jsonl`` into ``cfg.paths.output_dir``.

    Returns:
        ``{"benchmark", "checkpoint", "problems", "n", "temperature", "pass_at_k": {k: value},
        "mean_reward", "response_len"}``.

    Raises:
        ValueError: a ``k`` larger than ``n``; see :func:`use_checkpoint`, :func:`load_lightning_policy`.
    """
    if any(int(k) > int(cfg.n) for k in cfg.ks):
        raise ValueError(f"every k of ks={list(cfg.ks)} must be <= n={cfg.n} (samples per problem)")
    kind = use_checkpoint(cfg)
    c = build_components(cfg)
    if kind == "lightning":
        load_lightning_policy(c.context.policy, str(cfg.ckpt_path))
    c.module.keep_val_samples = bool(cfg.get("save_samples", True))
    metrics = c.trainer.validate(c.module, datamodule=c.datamodule, verbose=False)[0]
    result = {
        "benchmark": str(cfg.benchmark.name),
        "checkpoint": str(cfg.ckpt_path),
        "problems": len(c.datamodule.val_items),
        "n": int(cfg.n),
        "temperature": float(cfg.temperature),
        "pass_at_k": {int(k): metrics.get(f"val/pass@{k}") for k in cfg.ks},
        "mean_reward": metrics.get("val/reward"),
        "response_len": metrics.get("val/response_len"),
    }
    table = markdown_table(result)
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(result, indent=2))
    (out / "eval.md").write_text(table + "\n")
    if c.module.keep_val_samples:  # this rank's samples (for keyword analysis: mintrl-keywords)
        rank = "" if c.trainer.world_size == 1 else f".rank{c.trainer.global_rank}"
        with open(out / f"samples{rank}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in c.module.val_samples)
    if c.trainer.is_global_zero:
        print("\n" + table + f"\n(written to {out}/eval.json and eval.md)", flush=True)
    return result
