"""``objective=opd``: on-policy distillation (Agarwal et al. 2024, GKD; Lu & Thinking Machines 2025)."""

from __future__ import annotations

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.core.checks import check_choice, check_range
from mintrl.intervention.self_privileged import privileged_prompt_ids
from mintrl.model.tokens import same_vocabulary
from mintrl.objective.aggregation import AGGREGATIONS, StepTotals, aggregate
from mintrl.objective.base import Objective, ObjectiveOutput, Prepared
from mintrl.objective.grpo import masked_mean
from mintrl.objective.off_policy import OffPolicyCorrection, proximal_logprobs
from mintrl.objective.policy_gradient import clipped_surrogate
from mintrl.prompts.templates import load_prompt


class OnPolicyDistillation(Objective):
    """Per-token reverse KL to a white-box teacher on the student's own samples.

    For each sampled response token ``y_t`` the per-token reverse-KL estimate is
    ``k_t = log pi_t(y_t) - log q(y_t)`` (student at rollout time minus teacher, nats); its negative
    is a per-token advantage ``A_t = -k_t`` optimised with the PPO-clip surrogate, so several
    updates per rollout batch stay on-policy-corrected. Rewards are not used (still logged). ``k_t``
    uses the behaviour log-probs (the version that sampled ``y_t``); on a stale batch the ratio is
    taken against the proximal policy and ``off_policy_correction`` weights the surrogate
    (:mod:`mintrl.objective.off_policy`).

    Args:
        context: the run's :class:`mintrl.build.components.ModelContext` (policy tokenizer, teacher loading).
        teacher: teacher model: None (the frozen step-0 policy), ``embedded``, or an HF folder / hub
            id; it must have the policy's vocabulary.
        teacher_dtype: teacher weights dtype.
        privileged_note: if set, the teacher reads this user message (a shipped prompt name such
            as ``privileged_note`` or a file path; ``{question}``, ``{reference}``) instead of the
            policy's prompt: self-distillation with privileged context when the teacher is the
            policy itself.
        teacher_temperature: temperature of the teacher's log-probs (default: the rollout temperature).
        clip_low, clip_high, aggregation, mask_truncated, off_policy_correction, tis_cap,
            mis_threshold: as in :class:`mintrl.objective.grpo.GRPO`.

    Raises:
        ValueError: a teacher with a different vocabulary (both sources named), or a bad knob.
    """

    @classmethod
    def context_models(cls, config):
        """The teacher: ``(teacher, teacher_dtype)``, or the frozen step-0 policy when ``teacher`` is null."""
        return ((config.get("teacher"), str(config.get("teacher_dtype", "float32"))),)

    def __init__(
        self,
        context,
        teacher: str | None = None,
        teacher_dtype: str = "float32",
        privileged_note: str | None = None,
        teacher_temperature: float | None = None,
        clip_low: float = 0.2,
        clip_high: float = 0.2,
        aggregation: str = "token-mean",
        mask_truncated: bool = False,
        off_policy_correction: str = "none",
        tis_cap: float = 2.0,
        mis_threshold: float = 3.0,
    ):
        super().__init__(mask_truncated=mask_truncated, uses_reward=False)
        self.off_policy = OffPolicyCorrection(off_policy_correction, tis_cap, mis_threshold)
        check_choice("objective.aggregation", aggregation, AGGREGATIONS)
        check_range("objective.teacher_temperature", teacher_temperature, 0, low_open=True, none_ok=True)
        if privileged_note is not None:
            privileged_note = load_prompt(privileged_note, required=("{question}",))
        self.context, self.teacher_path, self.teacher_dtype = context, teacher, teacher_dtype
        self.privileged_note, self.teacher_temperature = privileged_note, teacher_temperature
        self.clip_low, self.clip_high, self.aggregation = clip_low, clip_high, aggregation
        self.teacher = None
        if teacher is None and context is not None:
            # the self-teacher is the step-0 policy: copy it now (build time), before a resumed run
            # restores newer weights into the policy
            self.teacher = context.teacher(None).model

    def setup(self, policy: torch.nn.Module) -> None:
        """Load the teacher and check that it shares the policy's vocabulary."""
        if self.teacher is None:
            loaded = self.context.teacher(self.teacher_path, self.teacher_dtype)
            if not same_vocabulary(loaded.tokenizer, self.context.tokenizer):
                raise ValueError(
                    f"objective.teacher {loaded.source} has a different vocabulary than the policy {self.context.source}"
                )
            self.teacher = loaded.model

    def _teacher_inputs(self, batch: RolloutBatch):
        """Teacher sequences (privileged prompt + response) and where each response token lands."""
        rows, sequences, starts = [], [], []
        for i in range(len(batch)):
            positions = batch.response_mask[i].nonzero().flatten()
            if positions.numel() == 0:
                continue
            item = batch.prompts[int(batch.group_index[i])]
            prompt = privileged_prompt_ids(self.context.tokenizer, self.privileged_note, item.question, item.reference)
            sequences.append(prompt + batch.input_ids[i, positions].tolist())
            rows.append(i)
            starts.append(len(prompt))
        return rows, sequences, starts

    def extra_tensors(self, batch, valid, logprob_fn):
        self.teacher.to(batch.input_ids.device)
        temperature = self.teacher_temperature or batch.temperature
        if self.privileged_note is None:
            teacher_lp = logprob_fn(
                self.teacher, batch.input_ids, batch.attention_mask, batch.response_mask, temperature
            )
            return Prepared({"teacher_logprobs": teacher_lp})
        if batch.prompts is None:
            raise ValueError("objective.privileged_note needs the batch's prompts (RolloutBatch.prompts)")
        teacher_lp = torch.zeros_like(batch.rollout_logprobs)
        idx, sequences, starts = self._teacher_inputs(batch)
        # called even with no sequence (R = 0): a sharded teacher's forwards are collectives of every rank
        width = max((len(s) for s in sequences), default=1)
        ids = torch.zeros(len(sequences), width, dtype=torch.long, device=batch.input_ids.device)
        attn, target = torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
        for k, (seq, start) in enumerate(zip(sequences, starts)):
            ids[k, : len(seq)] = torch.tensor(seq)
            attn[k, : len(seq)] = 1
            target[k, start : len(seq)] = True
        lp = logprob_fn(self.teacher, ids, attn, target, temperature)  # [R, W]
        for k, i in enumerate(idx):
            teacher_lp[i, batch.response_mask[i]] = lp[k, target[k]]
        return Prepared({"teacher_logprobs": teacher_lp})

    def __call__(self, batch: RolloutBatch, logprobs: torch.Tensor, totals: StepTotals) -> ObjectiveOutput:
        mask = batch.loss_mask
        reverse_kl = batch.rollout_logprobs - batch.extras["teacher_logprobs"]  # [n, L], per sampled token
        loss, clipped, ratio = clipped_surrogate(
            logprobs, proximal_logprobs(batch), -reverse_kl, self.clip_low, self.clip_high
        )
        weights, metrics = self.off_policy.weights(batch)  # [n, L] or None
        if weights is not None:
            loss = loss * weights
        metrics["objective/reverse_kl"] = masked_mean(reverse_kl, mask)
        metrics["objective/clip_frac"] = masked_mean(clipped.float(), mask)
        return ObjectiveOutput(aggregate(loss, mask, self.aggregation, totals), metrics)
