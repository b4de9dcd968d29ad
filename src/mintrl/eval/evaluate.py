"""``mintrl-eval``: pass@k of a checkpoint on one benchmark (``configs/eval.yaml``).

The benchmark's problems become the validation prompts of the usual data module; the Lightning
Trainer's ``validate`` samples ``n`` responses per problem with the configured sampler (so
``trainer=ddp`` shards problems over devices) and the module's :class:`mintrl.metrics.pass_at_k.PassAtK`
reduces the unbiased estimator over all ranks.

Progress: :class:`EvalProgress` counts the rollouts (episodes under ``rollout=episodes``) as they
finish, from the start of generation; Lightning's own bar is off (it counts generation batches and
starts its clock after the first batch is generated). ``samples.jsonl`` keeps an episode's turns
apart with their roles (:class:`SampleTurns`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path

import lightning.pytorch as L
import torch
from hydra.utils import get_class
from lightning.pytorch.callbacks import ProgressBar
from omegaconf import DictConfig, OmegaConf, open_dict
from tqdm.auto import tqdm

from mintrl.build.components import build_components
from mintrl.core.batch import RolloutBatch
from mintrl.rollout.records import batch_records
from mintrl.training.checkpointing import is_sharded_checkpoint, load_sharded_policy

log = logging.getLogger(__name__)


def use_checkpoint(cfg: DictConfig) -> str:
    """Point ``cfg.model`` at ``cfg.ckpt_path`` when it is a Hugging Face folder; returns its kind.

    Returns:
        ``"hf"`` (a folder: loaded by ``model=hf``), ``"lightning"`` (a ``.ckpt`` file, or the
        sharded ``.ckpt`` folder of a ``trainer=fsdp`` run: its policy weights are loaded after the
        model config builds the architecture) or ``"base"``.

    Raises:
        FileNotFoundError: ``ckpt_path`` is neither ``base`` nor an existing file or folder.
    """
    path = str(cfg.ckpt_path)
    if path == "base":
        return "base"
    if is_sharded_checkpoint(path):
        return "lightning"
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
    """Load the ``policy.*`` weights of a mintrl Lightning checkpoint into ``policy``: a file, or a
    sharded folder (read in this process, every rank's shards:
    :func:`mintrl.training.checkpointing.load_sharded_policy`). A LoRA run's checkpoint file holds
    the adapter only (``mintrl_frozen_base_omitted``): ``policy`` must then carry the same adapter
    (``model/lora=default`` with the run's settings) and keeps its own base weights.

    Raises:
        ValueError: the checkpoint has no ``policy.*`` weights or they do not fit (names listed).
    """
    if is_sharded_checkpoint(path):
        load_sharded_policy(policy, path)
        return
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


def sample_turns(record_turns: list[dict]) -> list[dict]:
    """An episode's turns as ``samples.jsonl`` keeps them, in order: per action turn
    ``{"role": "assistant", "kind", "text"}`` (the action's tokens decoded; ``kind`` the environment's
    parsed kind, e.g. ``"query"``, ``"answer"``) then, when the environment answered,
    ``{"role": "environment", "text"}`` (the observation text it returned). ``record_turns``: a rollout
    record's ``turns`` (:mod:`mintrl.rollout.records`); empty for a single-turn rollout."""
    out = []
    for turn in record_turns:
        out.append({"role": "assistant", "kind": turn["kind"], "text": turn["action"]})
        if turn["observation"]:
            out.append({"role": "environment", "text": turn["observation"]})
    return out


class SampleTurns(L.Callback):
    """Collects, per validation rollout of this rank in batch order (the order of the module's
    ``val_samples``), its turns (:func:`sample_turns`; ``[]`` for single-turn rollouts)."""

    def __init__(self):
        self.turns: list[list[dict]] = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not isinstance(batch, RolloutBatch):
            return
        tokenizer = pl_module.tokenizer if pl_module.tokenizer is not None else trainer.datamodule.tokenizer
        if batch.traces is None or not any(t.turns for t in batch.traces):
            self.turns += [[] for _ in range(len(batch))]
            return
        self.turns += [sample_turns(r["turns"]) for r in batch_records(batch, tokenizer, "val", trainer.global_step)]


class EvalProgress(L.Callback):
    """The evaluation's progress bar (rank 0): rollouts done of this rank's ``problems x n``, counted
    from the start of validation (generation included).

    Under ``rollout=episodes`` it counts episodes as they end (the engine's ``on_episodes_end``,
    set while the validation runs). Each finished generation batch sets
    the count to the rollouts of the batches done so far (exact); single-turn rollouts advance by
    batch.

    Args:
        desc: the bar's label.
        file: where the bar is written (None: stderr).

    Attributes:
        bar: the ``tqdm`` bar (None before validation starts).
    """

    def __init__(self, desc: str = "eval", file=None):
        self.desc, self.file = desc, file
        self.bar: tqdm | None = None
        self._done = 0  # rollouts of the finished generation batches
        self._lock = threading.Lock()  # the environment may be stepped from several threads
        self._engine = None  # the episode engine whose on_episodes_end is this bar's

    def on_validation_start(self, trainer, pl_module) -> None:
        data = trainer.datamodule
        problems = len(data.val_items[trainer.global_rank :: trainer.world_size])
        multi_turn = data.rollout.multi_turn  # the engine's declared capability: episodes over an environment
        self.bar = tqdm(
            total=problems * data.val_samples_per_prompt,
            desc=self.desc,
            unit="episode" if multi_turn else "sample",
            disable=not trainer.is_global_zero,
            file=self.file,
            dynamic_ncols=True,
        )
        self._done = 0
        if multi_turn:  # the episode engine reports episodes as they end
            self._engine = data.rollout
            self._engine.on_episodes_end = self._advance

    def _advance(self, rollouts: int) -> None:
        """Count ``rollouts`` more finished rollouts (at most up to the bar's total)."""
        with self._lock:
            if self.bar is not None and rollouts:
                self.bar.update(min(rollouts, self.bar.total - self.bar.n))

    def _untap(self) -> None:
        if self._engine is not None:
            self._engine.on_episodes_end = None
            self._engine = None

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._done += len(batch)
        with self._lock:
            if self.bar is not None:
                self.bar.n = min(self._done, self.bar.total)
                self.bar.refresh()

    def close(self) -> None:
        """Close the bar and restore the environment (idempotent)."""
        self._untap()
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_validation_end(self, trainer, pl_module) -> None:
        self.close()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.close()


def without_lightning_bar(cfg: DictConfig) -> None:
    """Turn Lightning's progress bar off in ``cfg`` (``trainer.enable_progress_bar=false`` and every
    ``callbacks`` entry that is a ``ProgressBar`` set to null): its validation bar counts generation
    batches and starts after the first batch is generated; :class:`EvalProgress` replaces it."""
    with open_dict(cfg):
        cfg.trainer.enable_progress_bar = False
        for name, node in (cfg.get("callbacks") or {}).items():
            if node is not None and issubclass(get_class(node._target_), ProgressBar):
                cfg.callbacks[name] = None


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
    response with its reward as ``samples.jsonl`` into ``cfg.paths.output_dir``: one line per
    rollout, ``{"problem", "question", "response", "reward", "turns"}``, where ``response`` is the
    agent's text (an episode's actions joined, as before) and ``turns`` an episode's turns apart with
    their roles (:func:`sample_turns`; ``[]`` for a single-turn rollout). A progress bar counts the
    rollouts (episodes) as they finish (:class:`EvalProgress`).

    Returns:
        ``{"benchmark", "checkpoint", "problems", "n", "temperature", "pass_at_k": {k: value},
        "mean_reward", "response_len"}``.

    Raises:
        ValueError: a ``k`` larger than ``n``; see :func:`use_checkpoint`, :func:`load_lightning_policy`.
        RuntimeError: the samples and the collected turns differ in number (a broken invariant).
    """
    if any(int(k) > int(cfg.n) for k in cfg.ks):
        raise ValueError(f"every k of ks={list(cfg.ks)} must be <= n={cfg.n} (samples per problem)")
    kind = use_checkpoint(cfg)
    without_lightning_bar(cfg)
    c = build_components(cfg)
    progress, turns = EvalProgress(f"eval {cfg.benchmark.name}"), SampleTurns()
    try:
        if kind == "lightning":
            load_lightning_policy(c.context.policy, str(cfg.ckpt_path))
        c.module.keep_val_samples = bool(cfg.get("save_samples", True))
        c.trainer.callbacks.extend([progress, turns])
        metrics = c.trainer.validate(c.module, datamodule=c.datamodule, verbose=False)[0]
    finally:
        progress.close()
        c.close()  # the sampler's engine is freed (a multirun's next evaluation starts its own)
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
        if len(turns.turns) != len(c.module.val_samples):
            raise RuntimeError(f"{len(c.module.val_samples)} samples but the turns of {len(turns.turns)} rollouts")
        with open(out / f"samples{rank}.jsonl", "w") as f:
            f.writelines(json.dumps({**row, "turns": t}) + "\n" for row, t in zip(c.module.val_samples, turns.turns))
    if c.trainer.is_global_zero:
        print("\n" + table + f"\n(written to {out}/eval.json and eval.md)", flush=True)
    return result
