"""``intervention=self_privileged``: the frozen step-0 policy continues with privileged context.

MInTRL section 5.1: ``pi_JI(. | x) = pi_0(. | x, z)`` where ``z`` is the reference answer. The frozen
model sees the question plus a note carrying ``z``, then the retained response as the start of its
own answer, and writes at most ``max_new_tokens`` tokens at its own temperature. EOS ids are
dropped from the correction (control returns to the policy, which decides when to stop).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from mintrl.core.checks import check_int, check_range
from mintrl.intervention.base import Correction, Intervention, InterventionRequest
from mintrl.model.tokens import chat_ids, same_vocabulary
from mintrl.prompts.templates import load_prompt
from mintrl.sampler.hf import HFSampler


def privileged_prompt_ids(tokenizer, note: str, question: str, reference: str) -> list[int]:
    """Chat-templated user message ``note.format(question=..., reference=...)`` with the generation
    prompt: the start of a response written with privileged context (MInTRL section 5.1)."""
    return chat_ids(tokenizer, [{"role": "user", "content": note.format(question=question, reference=reference)}])


class SelfPrivilegedIntervention(Intervention):
    """Continuation by the frozen base policy with the reference answer in its prompt.

    Args:
        context: the run's :class:`mintrl.build.components.ModelContext` (gives the frozen step-0 model).
        temperature: sampling temperature of the intervention policy.
        teacher: None for the frozen step-0 policy, or a teacher model (``embedded``, HF folder or
            hub id), loaded once per run through ``context.teacher``. With the policy's vocabulary
            its token ids and log-probs pass through; otherwise text is re-tokenised both ways and
            the behaviour log-probs of corrections are unknown (0.0, documented fallback).
        teacher_dtype: weights dtype of a loaded teacher.
        max_batch_size: rows per generation batch (count; larger calls are split): bounds the
            intervention model's KV cache, ``rows x tokens x`` :func:`mintrl.model.kv_cache.kv_bytes_per_token`.
        note: user-message template with ``{question}`` and ``{reference}``: a shipped prompt
            name (``privileged_note``) or a file path (see :mod:`mintrl.prompts.templates`).
    """

    @classmethod
    def generates_with_step0_policy(cls, config: Mapping) -> bool:
        """True without a ``teacher``: the intervention then generates from the frozen step-0 policy."""
        return config.get("teacher") is None

    @classmethod
    def context_models(cls, config: Mapping) -> tuple[tuple[str | None, str], ...]:
        """The teacher ``(teacher, teacher_dtype)``, or the frozen step-0 policy (path None) without one."""
        return ((config.get("teacher"), str(config.get("teacher_dtype", "float32"))),)

    def __init__(
        self,
        context,
        temperature: float = 1.0,
        note: str = "privileged_note",
        teacher: str | None = None,
        teacher_dtype: str = "float32",
        max_batch_size: int = 128,
    ):
        check_range("intervention.temperature", temperature, 0, low_open=True)
        check_int("intervention.max_batch_size", max_batch_size)
        loaded = context.teacher(teacher, teacher_dtype)
        self.policy_tokenizer = context.tokenizer
        self.tokenizer = loaded.tokenizer
        self.shared_vocab = same_vocabulary(loaded.tokenizer, context.tokenizer)
        self.sampler = HFSampler(loaded.model, loaded.tokenizer, max_batch_size=max_batch_size)
        self.white_box = self.shared_vocab  # its log-probs are the behaviour log-probs of the policy's tokens
        self.temperature = temperature
        self.note = load_prompt(note, required=("{question}",))

    def prompt_ids(self, r: InterventionRequest) -> list[int]:
        """Privileged prompt + retained response ids."""
        response = (
            list(r.response_ids)
            if self.shared_vocab
            else self.tokenizer.encode(r.response_text, add_special_tokens=False)
        )
        return privileged_prompt_ids(self.tokenizer, self.note, r.question, r.reference) + response

    def _generate(
        self, requests: Sequence[InterventionRequest], max_new_tokens: int, keep_eos: bool
    ) -> list[Correction]:
        if not requests:
            return []
        gen = self.sampler.generate([self.prompt_ids(r) for r in requests], max_new_tokens, self.temperature)
        eos = set(self.sampler.eos_token_ids)
        out = []
        for ids, lps in zip(gen.token_ids, gen.logprobs):
            kept = [(t, lp) for t, lp in zip(ids.tolist(), lps.tolist()) if keep_eos or t not in eos]
            if self.shared_vocab:
                out.append(Correction([t for t, _ in kept], [lp for _, lp in kept]))
                continue
            text = self.tokenizer.decode([t for t, _ in kept], skip_special_tokens=True)
            policy_ids = self.policy_tokenizer.encode(text, add_special_tokens=False)[:max_new_tokens]
            ended = keep_eos and any(t in eos for t, _ in kept)
            if ended and self.policy_tokenizer.eos_token_id is not None:
                policy_ids = policy_ids[: max_new_tokens - 1] + [self.policy_tokenizer.eos_token_id]
            out.append(Correction(policy_ids, [0.0] * len(policy_ids)))
        return out

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """One batched ``generate`` over all requests; corrections without EOS tokens, with the
        frozen model's sampling log-probs (at ``temperature``) as behaviour log-probs."""
        return self._generate(requests, max_new_tokens, keep_eos=False)

    def demonstrate(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """Complete responses of the privileged frozen model (EOS kept)."""
        return self._generate(requests, max_new_tokens, keep_eos=True)
