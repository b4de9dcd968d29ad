"""Off-policy correction of the ratio-based objectives (GRPO, Dr. GRPO, LUFFY, OPD) for stale batches.

Three policies enter the loss of a rollout batch (decoupled PPO: Hilton et al. 2022, "Batch size-
invariance for policy optimization", and AReaL, Fu et al. 2025, arXiv 2505.24298, eq. 5):

- the *behaviour* policy ``mu``: the weights version that sampled the batch (``RolloutBatch.step``),
  whose log-probs are ``batch.rollout_logprobs`` (the sampler's values; the trainer's own at staleness
  0, where they replace the sampler's: :mod:`mintrl.training.rollout_logprobs`);
- the *proximal* policy ``pi_prox``: the trainer's weights when the batch's updates start, recomputed
  without gradients before the first update when the batch is stale (``batch.extras[PROXIMAL_LOGPROBS]``);
  absent where no proximal recompute happened (staleness 0), and then ``pi_prox = mu``;
- the policy being trained ``pi_theta``.

PPO's ratio and clip are taken against ``pi_prox`` (the trust region is around weights the trainer
had); the sampling mismatch ``pi_prox / mu`` is an importance weight, detached, multiplying the
per-token surrogate, not a KL penalty (``objective.off_policy_correction``):

- ``none``: no weight (1);
- ``tis``: token-level truncated importance sampling ``w_t = min(pi_prox / mu, C)`` (Yao et al. 2025,
  "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"; Espeholt et al. 2018's
  truncated weights), :func:`truncated_importance_weights`;
- ``mis``: sequence-level masking: a row whose sequence ratio ``prod_t pi_prox / mu`` exceeds a
  threshold leaves the loss (weight 0), the others keep weight 1 (rejection as in Liu, Li et al. 2025,
  "When Speed Kills Stability"; TRL's ``sequence_mask`` drops the same rows but weights the kept ones by
  their ratio, which this does not), :func:`sequence_ratio_mask`.

Only policy-sampled tokens (:attr:`mintrl.core.batch.Provenance.POLICY`) carry a weight: they are the
tokens some version of the policy sampled. Intervention tokens were written by the judge's
intervention and guide tokens by a reference text (each has its own behaviour log-prob in
``batch.behaviour_logprobs``, not a version of the policy): their weight is 1 under ``tis``, and under
``mis`` they leave the loss with their row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_choice, check_range
from mintrl.objective.policy_gradient import MAX_LOG_RATIO

OFF_POLICY_CORRECTIONS = ("none", "tis", "mis")
PROXIMAL_LOGPROBS = "proximal_logprobs"  # batch.extras key of the proximal policy's [N, L] log-probs


def proximal_logprobs(batch: RolloutBatch) -> torch.Tensor:
    """``[N, L]`` log-probs of the proximal policy: the trainer's recompute of a stale batch
    (``batch.extras[PROXIMAL_LOGPROBS]``), else the behaviour log-probs ``batch.rollout_logprobs``
    (no proximal recompute happened: ``pi_prox = mu``)."""
    return batch.extras.get(PROXIMAL_LOGPROBS, batch.rollout_logprobs)


def behaviour_log_ratio(proximal: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token ``log pi_prox - log mu`` on ``mask``, 0 elsewhere, clamped to ``+-MAX_LOG_RATIO``.

    Args:
        proximal, behaviour: ``[N, L]`` log-probs of the sampled tokens (nats).
        mask: ``[N, L]`` bool, the tokens that carry a weight (policy-sampled ones).

    Returns:
        ``[N, L]`` detached log importance weights (nats).
    """
    diff = (proximal.detach() - behaviour.detach()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return torch.where(mask, diff, torch.zeros_like(diff))


def truncated_importance_weights(log_ratio: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level truncated importance weights ``w_t = min(exp(log_ratio_t), cap)`` (TIS: Yao et al.
    2025; truncation as in IMPALA's V-trace, Espeholt et al. 2018): bias traded for bounded variance.

    Args:
        log_ratio: ``[N, L]`` ``log pi_prox - log mu`` (0 where no weight applies: ``w = 1``).
        cap: ``C > 0``, the largest weight.

    Returns:
        ``(weights [N, L], truncated [N, L] bool where exp(log_ratio) > cap)``, detached.
    """
    ratio = log_ratio.detach().exp()
    return ratio.clamp(max=cap), ratio > cap


def sequence_ratio_mask(log_ratio: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level masked importance sampling: keep a row when its sequence ratio
    ``prod_t pi_prox / mu = exp(sum_t log_ratio_t)`` is at most ``threshold`` (Liu, Li et al. 2025; the
    rows TRL's ``sequence_mask`` drops, without its ratio weight on the rows kept). The product, not the per-token geometric mean: it is the row's actual
    importance weight, and the threshold's reference values (TRL's 3) are for the product. It grows with
    length, so long rows are dropped sooner than short ones at the same per-token shift. Only the upper
    side is masked (as TRL): a row the proximal policy finds unlikely is down-weighted by nothing.

    Args:
        log_ratio: ``[N, L]`` ``log pi_prox - log mu`` (0 off the weighted tokens).
        threshold: a ratio, ``> 0`` (:class:`OffPolicyCorrection` asks ``>= 1``: below 1 a row the
            two policies agree on would be dropped); compared in log space (no overflow for long rows).

    Returns:
        ``(keep [N] bool, sequence_log_ratio [N])``, detached.
    """
    seq = log_ratio.detach().sum(-1)  # [N]
    return seq <= math.log(threshold), seq


@dataclass(frozen=True)
class OffPolicyCorrection:
    """The ``objective.off_policy_correction`` knobs of a ratio-based objective and the weights they give.

    Args:
        kind: one of :data:`OFF_POLICY_CORRECTIONS`.
        tis_cap: ``C`` of ``tis`` (> 0).
        mis_threshold: sequence-ratio threshold of ``mis`` (>= 1).

    Raises:
        ValueError: a bad knob, naming the ``objective.*`` field.
    """

    kind: str = "none"
    tis_cap: float = 2.0
    mis_threshold: float = 3.0

    def __post_init__(self):
        check_choice("objective.off_policy_correction", self.kind, OFF_POLICY_CORRECTIONS)
        check_range("objective.tis_cap", self.tis_cap, 0, low_open=True)
        check_range("objective.mis_threshold", self.mis_threshold, 1)

    def weights(self, batch: RolloutBatch) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Detached weights multiplying the per-token surrogate of ``batch`` (a micro-batch with its
        ``loss_mask``) and their statistics over policy-sampled loss tokens.

        Returns:
            ``(weights, metrics)``: ``weights`` None for ``none`` (the loss is left as it is), else
            ``[n, L]`` float; ``metrics`` (``tis``: ``objective/is_weight_mean`` / ``_max`` of the
            untruncated token weights and ``objective/is_truncated_frac``; ``mis``: the same of the
            sequence ratios of rows with a policy loss token and ``objective/is_masked_frac`` of those
            rows); none where the micro-batch has no such token.
        """
        if self.kind == "none":
            return None, {}
        tokens = batch.policy_mask & batch.loss_mask  # [n, L]
        log_ratio = behaviour_log_ratio(proximal_logprobs(batch), batch.rollout_logprobs, tokens)
        if self.kind == "tis":
            weights, truncated = truncated_importance_weights(log_ratio, self.tis_cap)
            return weights, _ratio_stats(log_ratio[tokens], truncated[tokens], "objective/is_truncated_frac")
        keep, seq = sequence_ratio_mask(log_ratio, self.mis_threshold)  # [n] each
        rows = tokens.any(-1)
        weights = keep.to(log_ratio.dtype)[:, None].expand_as(log_ratio)
        return weights, _ratio_stats(seq[rows], ~keep[rows], "objective/is_masked_frac")


def _ratio_stats(log_ratio: torch.Tensor, cut: torch.Tensor, cut_key: str) -> dict[str, torch.Tensor]:
    """Mean and max of ``exp(log_ratio)`` (``[K]``, float64, ``log_ratio <= 50``) and the fraction
    ``cut`` (``[K]`` bool) under ``cut_key``; empty when ``K = 0``."""
    if log_ratio.numel() == 0:
        return {}
    ratio = log_ratio.double().clamp(max=50).exp()
    return {
        "objective/is_weight_mean": ratio.mean().float(),
        "objective/is_weight_max": ratio.max().float(),
        cut_key: cut.float().mean(),
    }
