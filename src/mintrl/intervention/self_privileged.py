"""``intervention=self_privileged``: the frozen step-0 policy continues with privileged context.

MInTRL section 5.1: ``pi_JI(. | x) = pi_0(. | x, z)`` where ``z`` is the reference answer. The frozen
model sees the question plus a note carrying ``z``, then the retained response as the start of its
own answer, and writes at most ``max_new_tokens`` tokens at its own temperature. EOS ids are
dropped from the correction (control returns to the policy, which decides when to stop).
"""

from __future__ import annotations

from typing import Sequence

from mintrl.intervention.base import Correction, InterventionRequest
from mintrl.sampler.hf import HFSampler

DEFAULT_NOTE = (
    "{question}\n\n(Private note for you: the correct final answer is {reference}. "
    "Use it to continue the solution correctly without mentioning this note.)"
)


def privileged_prompt_ids(tokenizer, note: str, question: str, reference: str) -> list[int]:
    """Chat-templated user message ``note.format(question=..., reference=...)`` with the generation
    prompt: the start of a response written with privileged context (MInTRL section 5.1)."""
    messages = [{"role": "user", "content": note.format(question=question, reference=reference)}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


class SelfPrivilegedIntervention:
    """Continuation by the frozen base policy with the reference answer in its prompt.

    Args:
        context: the run's :class:`mintrl.build.ModelContext` (gives the frozen step-0 model).
        temperature: sampling temperature of the intervention policy.
        note: user-message template with ``{question}`` and ``{reference}``.
    """

    def __init__(self, context, temperature: float = 1.0, note: str = DEFAULT_NOTE):
        if temperature <= 0:
            raise ValueError(f"intervention.temperature must be positive, got {temperature}")
        self.tokenizer = context.tokenizer
        self.sampler = HFSampler(context.frozen_policy(), context.tokenizer)
        self.temperature = temperature
        self.note = note

    def prompt_ids(self, r: InterventionRequest) -> list[int]:
        """Privileged prompt + retained response ids."""
        return privileged_prompt_ids(self.tokenizer, self.note, r.question, r.reference) + list(r.response_ids)

    def _generate(self, requests: Sequence[InterventionRequest], max_new_tokens: int, keep_eos: bool) -> list[Correction]:
        if not requests:
            return []
        gen = self.sampler.generate([self.prompt_ids(r) for r in requests], max_new_tokens, self.temperature)
        eos = set(self.sampler.eos_token_ids)
        out = []
        for ids, lps in zip(gen.token_ids, gen.logprobs):
            kept = [(t, lp) for t, lp in zip(ids.tolist(), lps.tolist()) if keep_eos or t not in eos]
            out.append(Correction([t for t, _ in kept], [lp for _, lp in kept]))
        return out

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """One batched ``generate`` over all requests; corrections without EOS tokens, with the
        frozen model's sampling log-probs (at ``temperature``) as behaviour log-probs."""
        return self._generate(requests, max_new_tokens, keep_eos=False)

    def demonstrate(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """Complete responses of the privileged frozen model (EOS kept)."""
        return self._generate(requests, max_new_tokens, keep_eos=True)
