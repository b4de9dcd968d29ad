"""The LightningModule: one policy, one objective component, an optimizer; no per-algorithm branches.

Each training step receives one fresh rollout batch and runs ``epochs x minibatches`` optimizer
updates on it (manual optimisation). Every update's mini-batch is split into micro-batches of
``micro_batch_rows`` rows whose gradients accumulate; the objective normalises each micro-batch's
loss by counts of the whole update (all micro-batches and data-parallel ranks), so the loss and
the gradient of an update do not depend on the split (see :mod:`mintrl.objective.aggregation`).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

import lightning.pytorch as L
import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_choice, check_int, check_range
from mintrl.metrics.pass_at_k import PassAtK
from mintrl.model.dropout import disable_dropout
from mintrl.model.logprobs import token_logprobs
from mintrl.model.lora import base_model, is_lora
from mintrl.objective.aggregation import StepTotals, step_totals
from mintrl.objective.off_policy import PROXIMAL_LOGPROBS
from mintrl.sampler.weights import is_sharded, strip_wrapper_prefixes, weights_generation
from mintrl.training.distributed import FullyShardedStrategy
from mintrl.training.rollout_logprobs import ADOPT, batch_staleness, recompute_role, use_trainer_logprobs
from mintrl.training.rollout_logprobs import MODES as RECOMPUTE_MODES
from mintrl.training.step_logging import combine_parts, log_step, step_weights

log = logging.getLogger(__name__)


def minibatch_rows(
    n: int, minibatches: int, generator: torch.Generator | None, all_ranks_rows: int | None = None
) -> list[torch.Tensor]:
    """Row indices of ``minibatches`` near-equal mini-batches of ``n`` rows, shuffled when a
    ``generator`` is given (contiguous otherwise): always ``minibatches`` of them, so every
    data-parallel rank makes as many updates. ``all_ranks_rows``: the rows of the batch over all
    ranks (default ``n``); a rank with fewer than ``minibatches`` rows gets empty mini-batches (its
    updates are zero-loss padding, :meth:`PolicyModule.accumulate`).

    Raises:
        ValueError: more mini-batches than the rows of all ranks (on every rank alike).
    """
    total = n if all_ranks_rows is None else all_ranks_rows
    if minibatches > total:
        raise ValueError(f"module.minibatches={minibatches} exceeds the {total} rollouts of the batch")
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    return list(torch.tensor_split(order, minibatches))


def ranks_max(count: int, world_size: int, device: torch.device | str = "cpu") -> int:
    """``count`` maximised over the ``world_size`` data-parallel ranks (an all-reduce of one integer
    on ``device`` when ``world_size > 1`` and a process group runs; ``count`` itself otherwise: with
    no process group there is no collective to match, e.g. ranks simulated in one process)."""
    if world_size <= 1 or not torch.distributed.is_initialized():
        return count
    value = torch.tensor([count], dtype=torch.long, device=device)
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return int(value)


def padding_row(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, target_mask)`` ``[1, 2]`` of a zero-loss padding micro-batch:
    the smallest forward that runs every unit of the policy (the body, and the LM head on its one
    target position), so its collectives (DDP's gradient all-reduce, FSDP's gathers and
    reduce-scatters) are those of a real micro-batch."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=device)
    return ids, torch.ones_like(ids), torch.tensor([[False, True]], device=device)


def global_grad_norm(parameters) -> float:
    """The L2 norm of every gradient of ``parameters`` together (parameters without a gradient
    count 0), over all ranks when the gradients are FSDP2 shards (``DTensor``: the shards' squared
    norms are summed across ranks, a collective). Returns 0.0 when no parameter has a gradient."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if hasattr(norm, "full_tensor"):  # DTensor: reduce the partial norms of the shards
        norm = norm.full_tensor()
    return float(norm)


def enable_gradient_checkpointing(policy: torch.nn.Module) -> None:
    """Turn on non-reentrant activation checkpointing of every decoder layer of a Hugging Face
    (or PEFT-wrapped) causal LM; it acts only in train mode with grad enabled.

    Raises:
        ValueError: the model has no ``gradient_checkpointing_enable`` or does not support it.
    """
    base = base_model(policy)
    if not getattr(base, "supports_gradient_checkpointing", False) or not hasattr(
        base, "gradient_checkpointing_enable"
    ):
        raise ValueError(
            f"module.gradient_checkpointing=true, but {type(base).__name__} does not support gradient checkpointing"
        )
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.24 (the older name is deprecated)
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class PolicyModule(L.LightningModule):
    """Trains ``policy`` on fresh rollout batches with a swappable ``objective``.

    The policy trains with dropout off (:func:`mintrl.model.dropout.disable_dropout`: every dropout
    rate 0, a LoRA adapter's ``lora_dropout`` included, so ``model.lora.dropout`` has no effect here):
    its rollouts' log-probs came from a forward without dropout, and the first update's ratios on
    unchanged weights are exactly 1, as in TRL and verl.

    Args:
        policy: the causal LM being trained (the sampler samples from this same module).
        objective: a :class:`mintrl.objective.base.Objective`.
        optimizer: ``functools.partial`` of a torch optimizer (Hydra ``_partial_: true``).
        scheduler: optional partial of an LR scheduler, stepped after every optimizer update.
        tokenizer: saved next to the exported Hugging Face folder.
        logprob_chunk_tokens: positions per LM-head block in :func:`mintrl.model.logprobs.token_logprobs`.
        epochs: passes over each rollout batch (optimizer updates per batch = ``epochs x minibatches``).
        minibatches: optimizer updates per pass; rows are shuffled per pass (seeded by the step).
        micro_batch_rows: rows per forward/backward (gradient accumulation); None = a whole
            mini-batch at once. Does not change the result, only peak memory.
        max_grad_norm: clip the global gradient L2 norm to this before each update (None: no clipping).
        val_pass_at_k: the ``k`` of the logged ``val/pass@k`` (unbiased estimator over
            ``data.val_samples_per_prompt`` samples per validation prompt; ``k`` above that is refused by
            :func:`mintrl.core.checks.check_config` and by :class:`~mintrl.metrics.pass_at_k.PassAtK`).
        gradient_checkpointing: recompute each decoder layer's forward during the backward pass
            instead of keeping its activations (Hugging Face ``activation_checkpointing_enable``,
            non-reentrant). Cuts the activation memory of an update from ``O(layers x tokens)`` to
            about one layer's worth, for roughly one extra forward of compute (~30% more update
            time); the loss and gradients are unchanged. Generation and no-grad scoring are
            unaffected (they keep their KV cache).
        share_prompts: forward each distinct prompt of a micro-batch once and its rollouts from the
            prompt's KV cache (:mod:`mintrl.model.shared_prompts`): same log-probs and gradients up to
            float rounding, about half the update time for groups of 4 with prompts twice the
            response length; with ``gradient_checkpointing`` the prompt pass runs outside the
            checkpointed layers. The plain forward runs instead under FSDP and when no prompt
            repeats in a micro-batch.
        max_bad_steps: skipped steps in a row before the run stops with an error and a
            ``checkpoints/last-good.ckpt``. A rollout batch without a usable rollout (every reward
            missing or failed) is not trained on (``train/skipped_batches``); an update whose loss
            or gradient norm is not finite is not applied (``train/skipped_updates``); both count.
        recompute_rollout_logprobs: ``"auto"`` (default): before a batch's first update, recompute
            its rollout-time log-probs with the trainer's own forward when the sampler's are not the
            trainer's numerics (a bf16 or vLLM sampler, or a bf16-mixed trainer), logging the
            mismatch removed; ``"always"`` / ``"never"`` (:mod:`mintrl.training.rollout_logprobs`).
            A stale batch (generated ``train/staleness`` > 0 optimizer steps ago) is recomputed
            under ``auto`` and ``always`` as its proximal policy, its behaviour log-probs kept.

        companion_models: ``() -> models`` that run beside the policy without being its
            submodules (frozen step-0 copy, teachers, judge / intervention models), moved to the
            policy's device at fit start (:meth:`move_companions`); None: none.

    Raises:
        ValueError: non-positive sizes, naming the ``module.*`` field; ``gradient_checkpointing``
            for a policy that does not support it.
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        objective,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable | None = None,
        tokenizer: Any = None,
        logprob_chunk_tokens: int = 256,
        epochs: int = 1,
        minibatches: int = 1,
        micro_batch_rows: int | None = None,
        max_grad_norm: float | None = 1.0,
        val_pass_at_k: Sequence[int] = (1,),
        max_bad_steps: int = 3,
        gradient_checkpointing: bool = False,
        share_prompts: bool = True,
        recompute_rollout_logprobs: str = "auto",
        companion_models: Callable[[], Sequence[torch.nn.Module]] | None = None,
    ):
        super().__init__()
        for name, value in (
            ("logprob_chunk_tokens", logprob_chunk_tokens),
            ("epochs", epochs),
            ("minibatches", minibatches),
            ("micro_batch_rows", micro_batch_rows or 1),
            ("max_bad_steps", max_bad_steps),
        ):
            check_int(f"module.{name}", value)
        check_range("module.max_grad_norm", max_grad_norm, 0, low_open=True, none_ok=True)
        check_choice("module.recompute_rollout_logprobs", recompute_rollout_logprobs, RECOMPUTE_MODES)
        self.recompute_rollout_logprobs = recompute_rollout_logprobs
        self.automatic_optimization = False
        disable_dropout(policy)  # the rollouts' log-probs came from a forward without dropout
        self.policy = policy.train()  # with dropout off, train mode only matters for Lightning's mode checks
        if gradient_checkpointing:
            enable_gradient_checkpointing(policy)
        self.share_prompts = share_prompts
        self.companion_models = companion_models
        self.objective = objective
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.tokenizer = tokenizer
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.epochs, self.minibatches, self.micro_batch_rows = epochs, minibatches, micro_batch_rows
        self.max_grad_norm, self.max_bad_steps = max_grad_norm, max_bad_steps
        self.skipped_batches = 0  # rollout batches with no usable rollout (every reward failed), not trained on
        self.skipped_updates = 0  # updates with a non-finite loss or gradient, not applied
        self.bad_in_row = 0  # consecutive skips of either kind
        self.updates_into_batch = 0  # updates of the current rollout batch done so far (0 between batches)
        self._updates_done_at_resume = 0  # from a mid-batch checkpoint: updates its interrupted batch had made
        self.history: list[dict[str, float]] = []  # per train step: rollout stats + loss
        self.val_history: list[tuple[int, float]] = []  # (global_step, val/reward)
        self._val_rewards: list[torch.Tensor] = []
        self._val_lengths: list[torch.Tensor] = []  # response lengths (tokens), reduced over ranks at epoch end
        self.val_pass = PassAtK(val_pass_at_k)  # reduced over data-parallel ranks by torchmetrics
        self.keep_val_samples = False  # mintrl-eval sets it: val_samples gets every decoded response
        self.val_samples: list[dict] = []

    @property
    def updates_per_batch(self) -> int:
        """Optimizer updates per rollout batch (``epochs x minibatches``)."""
        return self.epochs * self.minibatches

    def configure_model(self) -> None:
        """Shards the policy when the strategy is :class:`FullyShardedStrategy` (``trainer=fsdp``:
        its ``shard_policy``); otherwise nothing."""
        strategy = self._trainer.strategy if self._trainer is not None else None
        if isinstance(strategy, FullyShardedStrategy):
            strategy.shard_policy(self.policy)

    def on_fit_start(self) -> None:
        """Lets the objective snapshot what it needs from the policy (KL reference, teacher), then
        moves every companion model to the policy's device (:meth:`move_companions`)."""
        self.objective.setup(self.policy)
        self.move_companions(self.device)

    def move_companions(self, device: torch.device) -> list[torch.nn.Module]:
        """Move the models that are not this module's submodules but run next to the policy (the
        frozen step-0 copy, teachers, judge and intervention models: ``companion_models``) to
        ``device``; Lightning moves only the LightningModule's own submodules. Returns them."""
        models = list(self.companion_models()) if self.companion_models is not None else []
        for model in models:
            model.to(device)
        return models

    # ------------------------------------------------------------------ pieces (usable without a Trainer)
    @torch.no_grad()
    def frozen_logprobs(self, model, input_ids, attention_mask, target_mask, temperature) -> torch.Tensor:
        """``[N, L]`` log-probs of ``model`` without gradients, ``micro_batch_rows`` rows at a time
        (the ``logprob_fn`` given to ``Objective.prepare``). A sharded ``model`` (FSDP: each forward
        gathers its weights, a collective) runs as many forwards on every rank: a rank with fewer
        micro-batches than the busiest one adds forwards of :func:`padding_row`."""
        step = self.micro_batch_rows or max(input_ids.shape[0], 1)
        if is_sharded(model):
            world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
            count = len(range(0, input_ids.shape[0], step))
            for _ in range(ranks_max(count, world, input_ids.device) - count):
                token_logprobs(
                    model, *padding_row(input_ids.device), temperature, self.logprob_chunk_tokens, self._share(model)
                )
        parts = [
            token_logprobs(
                model,
                input_ids[s : s + step],
                attention_mask[s : s + step],
                target_mask[s : s + step],
                temperature,
                self.logprob_chunk_tokens,
                self._share(model),
            )[0]
            for s in range(0, input_ids.shape[0], step)
        ]
        return torch.cat(parts) if parts else torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)

    def recompute_logprobs(self, batch: RolloutBatch, role: str = ADOPT) -> dict[str, float]:
        """One no-grad forward of the current weights over the batch's scored tokens, used as
        ``role`` says (:mod:`mintrl.training.rollout_logprobs`): ``adopt`` (staleness 0: the weights
        that generated the batch) replaces its rollout-time log-probs by the policy's own in the
        trainer's precision and returns the mismatch removed (``train/sampler_mismatch_abs`` /
        ``_kl``, nats per policy token); ``proximal`` (a stale batch) stores them as the proximal
        policy's, the behaviour log-probs unchanged, and returns ``train/proximal_shift_abs`` / ``_kl``."""
        fresh = self.frozen_logprobs(
            self.policy, batch.input_ids, batch.attention_mask, batch.scored_mask, batch.temperature
        )  # [N, L]
        return use_trainer_logprobs(batch, fresh, role)

    def _share(self, model) -> bool:
        # prompt sharing runs the body twice per micro-batch; FSDP's per-forward hooks are not built for that
        return self.share_prompts and not is_sharded(model)

    def global_totals(self, mini: RolloutBatch) -> StepTotals:
        """Loss-mask counts of one update summed over data-parallel ranks."""
        totals = step_totals(mini.loss_mask)
        if self._trainer is not None and self.trainer.world_size > 1:
            counts = torch.stack([totals.tokens, totals.sequences, totals.rows.to(totals.tokens)])
            summed = self.trainer.strategy.reduce(counts, reduce_op="sum")
            totals = StepTotals(summed[0], summed[1], summed[2])
        return totals

    def accumulate(
        self,
        mini: RolloutBatch,
        totals: StepTotals,
        world_size: int = 1,
        backward: Callable | None = None,
        own_logprobs: str | None = None,
    ) -> tuple[torch.Tensor, dict]:
        """Forward + backward of one update's mini-batch in micro-batches; gradients accumulate in
        the parameters' ``.grad``.

        Args:
            mini: the update's rows (``extras`` filled by ``Objective.prepare``).
            totals: loss-mask counts of the whole update over all ranks.
            world_size: data-parallel ranks; each micro loss is multiplied by it because DDP/FSDP
                average gradients over ranks. With several ranks, every rank runs as many
                micro-batch backwards (each a gradient all-reduce or reduce-scatter) as the rank with
                the most micro-batches in this update: the others add zero-loss backwards of
                :func:`padding_row` (gradients unchanged), so ranks holding different numbers of
                rows (RAIL, entropy branching, guided rollouts) never wait on each other.
            backward: ``loss -> None`` (default ``loss.backward``; Lightning passes ``manual_backward``).
            own_logprobs: the batch's only update runs on the weights a recompute would use
                (:meth:`recompute_logprobs`, whose separate no-grad pass is saved): each micro-batch's
                own forward gives those log-probs, used as the role says before the objective runs
                (:func:`mintrl.training.rollout_logprobs.use_trainer_logprobs`: ``adopt`` replaces
                the sampler's at staleness 0, ``proximal`` keeps them as a stale batch's proximal
                policy), and the mismatch or shift is logged; None: no recompute.

        Returns:
            ``(loss, metrics)``: the update's loss on this rank (detached; the sum of the micro
            contributions) and objective metrics over micro-batches (:func:`combine_parts`: means over
            those that logged the key, maxima their largest), plus the policy
            entropy on policy-authored tokens and ``train/sampler_logprob_gap``, the mean
            ``|trainer - rollout|`` log-prob of policy-sampled tokens (nats; at the first update of
            a batch ~1e-5 for the exact fp32 sampler, 0 where the rollout log-probs were
            adopted), with ``own_logprobs`` also ``train/sampler_mismatch_abs`` and ``_kl``
            (``adopt``) or ``train/proximal_shift_abs`` and ``_kl`` (``proximal``).
        """
        backward = backward or (lambda loss: loss.backward())
        step = self.micro_batch_rows or max(len(mini), 1)
        device = mini.input_ids.device
        padding = ranks_max(len(range(0, len(mini), step)), world_size, device) - len(range(0, len(mini), step))
        total = torch.zeros((), device=device)
        parts: list[dict[str, float]] = []  # each micro-batch's objective metrics
        entropy_sum, entropy_tokens, gap_sum = 0.0, 0, 0.0
        mismatch: dict[str, float] = defaultdict(float)
        for s in range(0, len(mini), step):
            micro = mini.select(torch.arange(s, min(s + step, len(mini)), device=mini.input_ids.device))
            logprobs, entropy = token_logprobs(
                self.policy,
                micro.input_ids,
                micro.attention_mask,
                micro.scored_mask,  # policy, intervention and guide tokens; the objective's loss_mask picks
                micro.temperature,
                self.logprob_chunk_tokens,
                self._share(self.policy),
            )  # [n, L] each
            if own_logprobs is not None:
                tokens = int(micro.policy_mask.sum())
                for k, v in use_trainer_logprobs(micro, logprobs.detach(), own_logprobs).items():
                    mismatch[k] += v * tokens
            out = self.objective(micro, logprobs, totals)
            backward(out.loss * world_size)
            total = total + out.loss.detach()
            parts.append({k: float(v) for k, v in out.metrics.items()})
            policy_tokens = micro.policy_mask  # [n, L] entropy and sampler gap: policy-sampled tokens only
            entropy_sum += float((entropy * policy_tokens).sum())
            entropy_tokens += int(policy_tokens.sum())
            gap_sum += float(torch.where(policy_tokens, (logprobs.detach() - micro.rollout_logprobs).abs(), 0.0).sum())
        for _ in range(padding):  # zero-loss micro-batches: as many backwards (collectives) as the busiest rank
            logprobs, _ = token_logprobs(
                self.policy, *padding_row(device), mini.temperature, self.logprob_chunk_tokens, self._share(self.policy)
            )
            backward(logprobs.sum() * 0.0)
        metrics = combine_parts(parts)  # means over the micro-batches that logged a key; maxima their largest
        metrics["train/policy_entropy"] = entropy_sum / max(entropy_tokens, 1)
        metrics["train/sampler_logprob_gap"] = gap_sum / max(entropy_tokens, 1)
        metrics.update({k: v / max(entropy_tokens, 1) for k, v in mismatch.items()})
        return total, metrics

    # ------------------------------------------------------------------ Lightning hooks
    def frozen_policy_keys(self) -> set[str]:
        """State-dict keys of this module's frozen policy tensors: every ``policy.*`` key that is not a
        trainable parameter (a LoRA policy's base weights, which checkpoints leave out). Read from
        ``state_dict`` rather than ``named_parameters``: a tied ``lm_head`` (SmolLM2) shares the
        embedding's tensor, which ``named_parameters`` lists once, under the embedding's name only.
        Under full fine-tuning only buffers, if any."""
        return {
            f"policy.{strip_wrapper_prefixes(name)}"
            for name, t in self.policy.state_dict(keep_vars=True).items()
            if not (isinstance(t, torch.nn.Parameter) and t.requires_grad)
        }

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Stores :attr:`updates_into_batch` (0 unless the checkpoint is written inside a training
        step). A LoRA policy's frozen base weights are dropped from ``state_dict`` (the checkpoint
        holds the adapter and its optimizer state; resuming reloads the base from ``model.*``),
        except under FSDP, whose sharded checkpoints keep every key."""
        checkpoint["mintrl_updates_into_batch"] = int(self.updates_into_batch)
        frozen = self.frozen_policy_keys() if is_lora(self.policy) and not is_sharded(self.policy) else set()
        if frozen:
            state = checkpoint["state_dict"]
            checkpoint["state_dict"] = type(state)((k, v) for k, v in state.items() if k not in frozen)
            checkpoint["mintrl_frozen_base_omitted"] = len(frozen)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A mid-batch checkpoint's interrupted batch is not in the checkpoint: the next (fresh)
        batch gets only the updates that batch had left (:meth:`update_budget`). A LoRA checkpoint's
        omitted base weights are taken from the live policy (the same frozen base the run loaded).

        Raises:
            ValueError: the checkpoint omits base weights but this run's policy has no LoRA adapter
                (``model/lora`` differs between the run that saved it and this one).
        """
        self._updates_done_at_resume = int(checkpoint.get("mintrl_updates_into_batch", 0))
        weights_generation(self.policy).advance()  # the restored weights: samplers refresh (nothing samples in between)
        if checkpoint.get("mintrl_frozen_base_omitted"):
            if not is_lora(self.policy):
                raise ValueError(
                    "the checkpoint holds a LoRA adapter without base weights, but this run trains the full "
                    "weights: resume with the same model/lora setting"
                )
            live = self.state_dict()
            state = checkpoint["state_dict"]
            for key in self.frozen_policy_keys():
                state.setdefault(key, live[key])

    def update_budget(self) -> int:
        """Optimizer updates the next rollout batch gets: ``epochs x minibatches``, less the
        updates already made by the batch a mid-batch checkpoint interrupted (its rollouts are not
        in the checkpoint, so the rest of it is dropped and the fresh batch stands in for it), and
        never past ``trainer.max_steps`` (a resumed run, or one with skipped updates, ends exactly
        there)."""
        budget = self.updates_per_batch - self._updates_done_at_resume
        max_steps = self.trainer.max_steps if self._trainer is not None else -1
        if max_steps is not None and max_steps >= 0:
            budget = min(budget, max_steps - int(self.global_step))
        return max(budget, 0)

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> torch.Tensor:
        """Up to ``epochs x minibatches`` optimizer updates on one rollout batch (see
        :meth:`update_budget`); logs rollout stats, the mean update loss, gradient norm and objective
        metrics."""
        budget = self.update_budget()
        self._updates_done_at_resume = 0
        try:
            return self._train_on(batch, budget)
        finally:
            self.updates_into_batch = 0  # between batches again (also when the step raises)

    def _train_on(self, batch: RolloutBatch, budget: int) -> torch.Tensor | None:
        """``budget`` optimizer updates on ``batch`` (the body of :meth:`training_step`)."""
        optimizer = self.optimizers()
        scheduler = self.lr_schedulers()
        generator = torch.Generator().manual_seed(int(self.global_step)) if self.minibatches > 1 else None
        world = self.trainer.world_size if self._trainer is not None else 1
        everywhere = int(self._all_ranks_sum(torch.tensor(len(batch), device=self.device))) if world > 1 else None
        plan = [  # the same number of updates on every rank (empty mini-batches where a rank has too few rows)
            rows
            for _ in range(self.epochs)
            for rows in minibatch_rows(len(batch), self.minibatches, generator, everywhere)
        ]
        precision = self.trainer.precision if self._trainer is not None else "32-true"
        staleness = batch_staleness(int(self.global_step), batch.step)
        # a batch object trained twice (tests) keeps no proximal policy of an earlier step
        batch.extras.pop(PROXIMAL_LOGPROBS, None)
        role = recompute_role(self.recompute_rollout_logprobs, batch.sampler_exact, precision, staleness)
        # one update on the whole batch runs on the weights a recompute would use: its own forward is the recomputation
        fused = role is not None and budget == 1 and len(plan) == 1
        if role is not None and not fused:
            batch.stats.update(self.recompute_logprobs(batch, role))
        batch.stats["train/staleness"] = float(staleness)
        batch.stats.update(self.objective.prepare(batch, self.frozen_logprobs))
        updates: list[dict[str, float]] = []  # each applied update's metrics
        if self._all_ranks_sum(batch.loss_mask.sum()) == 0:  # every rollout failed: nothing to learn from
            self.skipped_batches += 1
            self.bad_in_row += 1
            log.warning(
                "step %d: no usable rollout in the batch (every reward missing or failed): not trained on",
                self.global_step,
            )
            log_step(self, {**batch.stats, "train/skipped_batches": float(self.skipped_batches)}, step_weights(batch))
            self._stop_if_too_many_bad("a rollout batch without a usable rollout")
            return None
        first_gap = None
        applied = 0
        for rows in plan[:budget]:
            mini = batch.select(rows.to(batch.input_ids.device))
            loss, metrics = self.accumulate(
                mini,
                self.global_totals(mini),
                self.trainer.world_size,
                self.manual_backward,
                own_logprobs=role if fused else None,
            )
            gap = metrics.pop("train/sampler_logprob_gap")  # later updates measure policy drift, not the sampler
            first_gap = gap if first_gap is None else first_gap
            metrics["train/grad_norm"] = global_grad_norm(self.policy.parameters())
            finite = math.isfinite(float(loss)) and math.isfinite(metrics["train/grad_norm"])
            if self._all_ranks_sum(torch.tensor(float(not finite), device=self.device)) > 0:
                optimizer.zero_grad(set_to_none=True)  # never apply a NaN / inf update, on any rank
                self.skipped_updates += 1
                self.bad_in_row += 1
                self.updates_into_batch += 1
                log.warning(
                    "step %d: non-finite loss (%s) or gradient norm (%s): update skipped",
                    self.global_step,
                    float(loss),
                    metrics["train/grad_norm"],
                )
                continue
            self.bad_in_row = 0
            if self.max_grad_norm is not None:
                self.clip_gradients(optimizer, gradient_clip_val=self.max_grad_norm, gradient_clip_algorithm="norm")
            optimizer.step()
            weights_generation(self.policy).advance()  # samplers and copies refresh (tensor versions may not move)
            optimizer.zero_grad(set_to_none=True)
            if scheduler is not None:
                scheduler.step()
            self.updates_into_batch += 1
            metrics["train/loss"] = float(loss)
            applied += 1
            updates.append(metrics)
        metrics = combine_parts(updates)  # means over the applied updates; maxima their largest
        metrics["train/skipped_updates"] = float(self.skipped_updates)
        metrics["train/skipped_batches"] = float(self.skipped_batches)
        if not applied:  # every update of the batch was skipped
            log_step(self, {**batch.stats, **metrics}, step_weights(batch))
            self._stop_if_too_many_bad("an update with a non-finite loss or gradient")
            return None
        if first_gap is not None:
            metrics["train/sampler_logprob_gap"] = first_gap
        metrics["rollout/generated_at_step"] = float(batch.step)
        metrics.update(batch.stats)
        metrics = log_step(self, metrics, step_weights(batch))  # this step's keys, of all ranks (step_logging.py)
        if "reward/control" in metrics:
            self.log(
                "reward",
                metrics["reward/control"],
                prog_bar=True,
                on_step=True,
                batch_size=len(batch),
                logger=False,
            )
        self.log(
            "gen_tok/s",
            metrics.get("perf/gen_tokens_per_s", 0.0),
            prog_bar=True,
            on_step=True,
            batch_size=len(batch),
            logger=False,
        )
        self.history.append({k: float(v) for k, v in metrics.items()})
        return torch.tensor(metrics["train/loss"])

    def _all_ranks_sum(self, value: torch.Tensor) -> float:
        """``value`` summed over data-parallel ranks (a collective when there are several)."""
        value = value.detach().float()
        if self._trainer is not None and self.trainer.world_size > 1:
            value = self.trainer.strategy.reduce(value, reduce_op="sum")
        return float(value)

    def _stop_if_too_many_bad(self, what: str) -> None:
        """After ``max_bad_steps`` skipped batches or updates in a row, save the last good state
        (the weights are unchanged since the last applied update) and stop.

        Raises:
            RuntimeError: ``max_bad_steps`` skips in a row (names the checkpoint written).
        """
        if self.bad_in_row < self.max_bad_steps:
            return
        self.updates_into_batch = 0  # the batch is done: the checkpoint lies between batches
        path = Path(self.trainer.default_root_dir) / "checkpoints" / "last-good.ckpt"
        self.trainer.save_checkpoint(path)
        for logger in self.loggers:  # this step's self.log values would never be written: the step raises
            logger.log_metrics(
                {
                    "train/skipped_updates": float(self.skipped_updates),
                    "train/skipped_batches": float(self.skipped_batches),
                },
                step=self.global_step,
            )
            logger.save()
        raise RuntimeError(
            f"{self.bad_in_row} skipped steps in a row (latest: {what}; module.max_bad_steps="
            f"{self.max_bad_steps}): the run stops. The last good state is in {path} (resume with ckpt_path={path})"
        )

    def validation_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """Collects rewards of control rollouts on held-out prompts."""
        self._val_rewards.append(batch.rewards)
        if self.keep_val_samples:
            self.val_samples.extend(self._decoded_samples(batch))
        order = torch.argsort(batch.group_index, stable=True)  # [N] rows grouped by prompt
        self.val_pass.update(batch.rewards[order].view(batch.num_groups, -1))  # [G, samples per prompt]
        lengths = batch.response_mask.sum(-1).float()
        if self._trainer is not None and self.trainer.world_size > 1:
            self._val_lengths.append(lengths)  # the mean over every rank's rows: on_validation_epoch_end
        else:
            self.log("val/response_len", lengths.mean(), batch_size=len(batch), on_epoch=True)

    def _decoded_samples(self, batch: RolloutBatch) -> list[dict]:
        """``{"problem", "question", "response", "reward"}`` per row (reward None when missing)."""
        rows = []
        for i in range(len(batch)):
            ids = batch.input_ids[i][batch.response_mask[i]].tolist()
            item = batch.prompts[int(batch.group_index[i])]
            reward = float(batch.rewards[i])
            rows.append(
                {
                    "problem": item.index,
                    "question": item.question,
                    "response": self.tokenizer.decode(ids, skip_special_tokens=True),
                    "reward": None if reward != reward else reward,
                }
            )
        return rows

    def on_validation_epoch_end(self) -> None:
        """Logs ``val/reward``: mean reward over all validation rollouts with a reward, and
        ``val/pass@k``: the unbiased pass@k (Chen et al. 2021) with "correct" = reward 1, over the
        validation prompts of all ranks. The two differ where rewards give partial credit. With
        several ranks also ``val/response_len``, the mean over every rank's rows."""
        world = self.trainer.world_size if self._trainer is not None else 1
        if not self._val_rewards and world == 1:
            return
        rewards = torch.cat(self._val_rewards) if self._val_rewards else torch.zeros(0, device=self.device)
        self._val_rewards.clear()
        scored = ~torch.isnan(rewards)
        totals = torch.stack([rewards[scored].sum(), scored.sum().float()])  # [sum, count] of this rank
        if world > 1:  # every rank reaches this hook once per validation: a safe collective
            lengths = torch.cat(self._val_lengths) if self._val_lengths else torch.zeros(0, device=self.device)
            self._val_lengths.clear()
            rows = torch.tensor(float(lengths.numel()), device=lengths.device)
            totals = torch.cat([totals, torch.stack([lengths.sum(), rows]).to(totals)])
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")  # [reward sum, count, length sum, rows]
            self.log("val/response_len", totals[2] / totals[3].clamp(min=1))
        reward = totals[0] / totals[1] if totals[1] > 0 else torch.tensor(float("nan"), device=totals.device)
        self.log("val/reward", reward, prog_bar=True)
        for k, value in self.val_pass.compute().items():
            self.log(f"val/pass@{k}", value)
        self.val_pass.reset()
        if not self.trainer.sanity_checking:
            self.val_history.append((int(self.global_step), float(reward)))

    def configure_optimizers(self):
        """The configured optimizer over the trainable policy parameters (+ optional scheduler,
        stepped after every update)."""
        optimizer = self.optimizer_factory([p for p in self.policy.parameters() if p.requires_grad])
        if self.scheduler_factory is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": self.scheduler_factory(optimizer), "interval": "step"},
        }
