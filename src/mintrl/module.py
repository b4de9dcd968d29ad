"""The LightningModule: one policy, one objective component, AdamW; no per-algorithm branches."""

from __future__ import annotations

from typing import Any, Callable

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import grad_norm

from mintrl.logprobs import token_logprobs
from mintrl.rollout.batch import RolloutBatch


class PolicyModule(L.LightningModule):
    """Trains ``policy`` on fresh rollout batches with a swappable ``objective``.

    Args:
        policy: the causal LM being trained (the sampler samples from this same module).
        objective: callable ``(RolloutBatch, logprobs [N, L]) -> ObjectiveOutput``.
        optimizer: ``functools.partial`` of a torch optimizer (Hydra ``_partial_: true``).
        scheduler: optional partial of an LR scheduler, stepped every optimizer step.
        tokenizer: saved next to the exported Hugging Face folder.
        logprob_chunk_tokens: positions per LM-head block in :func:`mintrl.logprobs.token_logprobs`.
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        objective: Callable,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable | None = None,
        tokenizer: Any = None,
        logprob_chunk_tokens: int = 1024,
    ):
        super().__init__()
        if logprob_chunk_tokens <= 0:
            raise ValueError(f"module.logprob_chunk_tokens must be positive, got {logprob_chunk_tokens}")
        self.policy = policy.train()  # dropout-free LLMs: train mode only matters for Lightning's mode checks
        self.objective = objective
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.tokenizer = tokenizer
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.history: list[dict[str, float]] = []  # per train step: rollout stats + loss
        self.val_history: list[tuple[int, float]] = []  # (global_step, val/reward)
        self._val_rewards: list[torch.Tensor] = []

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> torch.Tensor:
        """Log-probs of the batch under the current weights -> objective loss; logs rollout stats."""
        logprobs, entropy = token_logprobs(
            self.policy, batch.input_ids, batch.attention_mask, batch.response_mask, batch.temperature, self.logprob_chunk_tokens
        )  # [N, L] each
        out = self.objective(batch, logprobs)
        policy_tokens = batch.response_mask & ~batch.intervention_mask
        metrics = {
            "train/loss": out.loss.detach(),
            "train/policy_entropy": (entropy * policy_tokens).sum() / policy_tokens.sum().clamp(min=1),
            "rollout/generated_at_step": float(batch.step),
            **out.metrics,
            **batch.stats,
        }
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=len(batch))
        self.log("reward", batch.stats["reward/control"], prog_bar=True, on_step=True, batch_size=len(batch), logger=False)
        self.log("gen_tok/s", batch.stats["perf/gen_tokens_per_s"], prog_bar=True, on_step=True, batch_size=len(batch), logger=False)
        self.history.append({k: float(v) for k, v in metrics.items()})
        return out.loss

    def on_before_optimizer_step(self, optimizer) -> None:
        """Logs ``train/grad_norm`` (L2 over all parameters, before clipping)."""
        norms = grad_norm(self.policy, norm_type=2)
        if "grad_2.0_norm_total" in norms:
            self.log("train/grad_norm", norms["grad_2.0_norm_total"], on_step=True, on_epoch=False)

    def validation_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """Collects rewards of control rollouts on held-out prompts."""
        self._val_rewards.append(batch.rewards)
        lengths = batch.response_mask.sum(-1).float()
        self.log("val/response_len", lengths.mean(), batch_size=len(batch), on_epoch=True)

    def on_validation_epoch_end(self) -> None:
        """Logs ``val/reward``: mean reward over all validation rollouts (pass@1 at the rollout temperature)."""
        if not self._val_rewards:
            return
        reward = torch.cat(self._val_rewards).mean()
        self._val_rewards.clear()
        self.log("val/reward", reward, prog_bar=True)
        if not self.trainer.sanity_checking:
            self.val_history.append((int(self.global_step), float(reward)))

    def configure_optimizers(self):
        """The configured optimizer over the policy parameters (+ optional per-step scheduler)."""
        optimizer = self.optimizer_factory(self.policy.parameters())
        if self.scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.scheduler_factory(optimizer), "interval": "step"}}
