"""SFT on complete trajectories of the judge-intervention model, before RL (MInTRL Table 1, SFT+GRPO).

The judge-intervention policy writes whole responses to training prompts (its ``demonstrate``
method: the same model and privileged context that write MInTRL's corrections); those with a reward
above ``min_reward`` are kept, and the policy is fine-tuned on them with the NLL objective for
``steps`` optimizer steps. The RL stage then starts from these weights (same in-memory policy) and
the SFT checkpoint is exported as a Hugging Face folder.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch
from hydra.utils import instantiate
from torch.utils.data import DataLoader, IterableDataset

from mintrl.core.batch import Rollout, collate_rollouts
from mintrl.core.checks import check_int
from mintrl.intervention.base import InterventionRequest
from mintrl.objective.sft import SupervisedNLL
from mintrl.reward.base import score_rewards
from mintrl.sampler.weights import weights_generation
from mintrl.training.callbacks.export import HFExport
from mintrl.training.distributed import FullyShardedStrategy
from mintrl.training.module import PolicyModule

log = logging.getLogger(__name__)


def collect_demonstrations(
    intervention, reward, items, tokenizer, per_prompt: int, max_new_tokens: int, batch_prompts: int = 16
):
    """Complete trajectories of the judge-intervention model, with their rewards.

    Args:
        intervention: an intervention component with ``demonstrate``. reward: a batched reward.
        items: training :class:`mintrl.data.base.PromptItem`. tokenizer: the policy tokenizer.
        per_prompt: demonstrations per prompt. max_new_tokens: length limit (tokens).
        batch_prompts: prompts per ``demonstrate`` call.

    Returns:
        ``list[Rollout]`` (``group`` = index into ``items``), rewards filled in.
    """
    eos = {tokenizer.eos_token_id}
    out: list[Rollout] = []
    for s in range(0, len(items), batch_prompts):
        chunk = [item for item in items[s : s + batch_prompts] for _ in range(per_prompt)]
        requests = [InterventionRequest(it.question, it.reference, list(it.prompt_ids), [], "", None) for it in chunk]
        demos = intervention.demonstrate(requests, max_new_tokens)
        rollouts = []
        for k, (item, demo) in enumerate(zip(chunk, demos)):
            r = Rollout(group=s + k // per_prompt, is_control=True, prompt_ids=list(item.prompt_ids))
            r.append(demo.ids, demo.logprobs, intervention=False)
            r.finished = bool(demo.ids) and demo.ids[-1] in eos
            rollouts.append(r)
        texts = tokenizer.batch_decode([r.response_ids for r in rollouts], skip_special_tokens=True)
        for r, value in zip(rollouts, score_rewards(reward, texts, chunk)):
            r.reward = value
        out += rollouts
    return out


def models_device(trainer) -> torch.device | None:
    """The device this process's models generate on: ``trainer``'s root device (Lightning's strategy
    chose it from ``trainer.accelerator``, ``trainer.devices`` and this process's local rank), never
    the device some tensor happens to be on. None when this process only starts the ranks
    (``ddp_spawn``, ``ddp_fork``: Lightning's multiprocessing launcher creates them from this one, and
    CUDA must not be initialised before a fork); Lightning places the models in each rank."""
    from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    if isinstance(trainer.strategy.launcher, _MultiProcessingLauncher):
        return None
    return trainer.strategy.root_device


def stage_device(components, trainer_cfg) -> torch.device | None:
    """The device the supervised stage runs on (:func:`models_device`) of the run's trainer, or, for
    components built without a trainer, of a trainer built from ``trainer_cfg``."""
    trainer = components.trainer
    if trainer is None:
        trainer = instantiate(trainer_cfg, logger=False, callbacks=[], enable_checkpointing=False)
    return models_device(trainer)


def strategy_places_policy(trainer) -> bool:
    """Whether ``trainer``'s strategy shards the policy and moves only its shards to the device
    (``trainer=fsdp``, :class:`mintrl.training.distributed.FullyShardedStrategy`): the full policy
    must then not be moved there first (every rank would hold all of its weights at once)."""
    return isinstance(trainer.strategy, FullyShardedStrategy)


def place_models(components, device: torch.device | None, policy: bool = True) -> None:
    """Move the policy and every model that runs beside it (the frozen step-0 copy, teachers, judge
    and intervention models: the run module's ``companion_models``) to ``device``, before anything
    generates: the SFT stage's demonstrations, InT's rollouts and the step-0 validation would
    otherwise run on the CPU (Lightning moves only a LightningModule's own submodules, and only
    inside ``fit`` / ``validate``). Models already there are left as they are; ``device`` None
    (:func:`models_device`: this process only starts the ranks) moves nothing.

    Args:
        policy: move the policy too; False leaves it where it is (a sharding strategy shards it in
            ``configure_model`` and moves the shards: :func:`strategy_places_policy`).
    """
    if device is None:
        return
    if policy:
        components.context.policy.to(device)
    components.module.move_companions(device)


class _Demonstrations(IterableDataset):
    """Endless seeded shuffles of the kept demonstrations, ``rows`` per batch."""

    def __init__(self, rollouts, rows: int, pad_token_id: int, seed: int):
        self.rollouts, self.rows, self.pad, self.seed = rollouts, rows, pad_token_id, seed

    def __iter__(self):
        epoch = 0
        while True:
            order = torch.randperm(
                len(self.rollouts), generator=torch.Generator().manual_seed(self.seed + epoch)
            ).tolist()
            for s in range(0, len(order), self.rows):
                picked = [self.rollouts[i] for i in order[s : s + self.rows]]
                yield collate_rollouts(picked, max(r.group for r in picked) + 1, self.pad, 1.0)
            epoch += 1


class SFTStage:
    """Runs the supervised stage (see module docstring).

    Args:
        prompts: training prompts to write demonstrations for (positive).
        per_prompt: demonstrations per prompt (positive).
        max_new_tokens: demonstration length limit (tokens).
        rows_per_step: demonstrations per optimizer step (positive).
        steps: optimizer steps (positive).
        optimizer: partial of a torch optimizer (Hydra ``_partial_: true``).
        min_reward: keep demonstrations with reward strictly above this.
        export_dir: Hugging Face folder of the SFT checkpoint (None: no export).
        seed: shuffling seed.

    Raises:
        ValueError: a non-positive size (field named); no demonstration passes ``min_reward``.
    """

    def __init__(
        self,
        prompts: int = 64,
        per_prompt: int = 2,
        max_new_tokens: int = 64,
        rows_per_step: int = 16,
        steps: int = 10,
        optimizer=None,
        min_reward: float = 0.0,
        export_dir: str | None = None,
        seed: int = 0,
    ):
        for name, value in (
            ("prompts", prompts),
            ("per_prompt", per_prompt),
            ("max_new_tokens", max_new_tokens),
            ("rows_per_step", rows_per_step),
            ("steps", steps),
        ):
            check_int(f"sft.{name}", value)
        self.prompts, self.per_prompt, self.max_new_tokens = prompts, per_prompt, max_new_tokens
        self.rows_per_step, self.steps, self.min_reward = rows_per_step, steps, min_reward
        self.optimizer = optimizer or functools.partial(torch.optim.AdamW, lr=1e-5)
        self.export_dir, self.seed = export_dir, seed
        self.summary: dict = {}

    def collect(self, components, items) -> tuple[list[Rollout], dict]:
        """The training examples (rollouts whose ``response_mask`` the NLL covers) and their counts.

        Here: demonstrations of the judge-intervention model with reward above ``min_reward``.
        Subclasses change the data source (:class:`mintrl.sft.interventions.InterventionSFTStage`).

        Args:
            components: the run's :class:`mintrl.build.components.Components`. items: training prompts.

        Returns:
            ``(kept, counts)``: counts ``demonstrations``, ``kept``, ``kept_reward`` (mean reward of the kept).

        Raises:
            ValueError: no demonstration passes ``min_reward``.
        """
        rollout = components.rollout
        demos = collect_demonstrations(
            rollout.intervention,
            rollout.reward,
            items,
            components.context.tokenizer,
            self.per_prompt,
            self.max_new_tokens,
        )
        kept = [r for r in demos if r.reward == r.reward and r.reward > self.min_reward and r.response_ids]
        log.info("SFT stage: kept %d of %d demonstrations (reward > %s)", len(kept), len(demos), self.min_reward)
        if not kept:
            raise ValueError(
                f"sft: none of the {len(demos)} demonstrations has reward > {self.min_reward}; "
                "check the intervention component or lower sft.min_reward"
            )
        counts = {
            "demonstrations": len(demos),
            "kept": len(kept),
            "kept_reward": sum(r.reward for r in kept) / len(kept),
        }
        return kept, counts

    def run(self, components, trainer_cfg, logger=False) -> dict:
        """Collect, filter, fine-tune ``components.context.policy`` in place, export.

        Args:
            components: the run's :class:`mintrl.build.components.Components`.
            trainer_cfg: the run's ``trainer`` config (device, precision), reused with ``steps``.
            logger: a Lightning logger for the stage's curves (``objective/nll``, ``train/loss``), or False.

        Returns:
            summary dict: the counts of :meth:`collect` (``kept`` among them), ``steps``,
            ``nll_first``, ``nll_last``, ``hf_folder``.

        Every model is moved to the trainer's device (:func:`stage_device`, :func:`place_models`)
        before :meth:`collect` generates anything.
        """
        place_models(components, stage_device(components, trainer_cfg))
        dm = components.datamodule
        dm.setup("fit")
        kept, collected = self.collect(components, dm.train_items[: self.prompts])
        module = PolicyModule(
            components.context.policy,
            SupervisedNLL(),
            self.optimizer,
            tokenizer=components.context.tokenizer,
            max_grad_norm=components.module.max_grad_norm,
        )
        data = DataLoader(
            _Demonstrations(kept, self.rows_per_step, components.rollout.pad_token_id, self.seed),
            batch_size=None,
            collate_fn=lambda x: x,
        )
        callbacks = [HFExport(self.export_dir)] if self.export_dir else []
        trainer = instantiate(
            trainer_cfg,
            max_steps=self.steps,
            val_check_interval=None,
            limit_val_batches=0,
            logger=logger,
            callbacks=callbacks,
            enable_checkpointing=False,
            default_root_dir=str(Path(self.export_dir or ".").parent),
        )
        trainer.fit(module, train_dataloaders=data)
        weights_generation(components.context.policy).advance()  # the RL stage's samplers start from these weights
        nll = [h.get("objective/nll") for h in module.history]
        self.summary = {
            **collected,
            "steps": trainer.global_step,
            "nll_first": nll[0] if nll else None,
            "nll_last": nll[-1] if nll else None,
            "hf_folder": self.export_dir,
        }
        components.context.policy.train()
        return self.summary
