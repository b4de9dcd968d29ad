"""``intervention=self_privileged``: the frozen step-0 policy continues with privileged context.

MInTRL section 5.1: ``pi_JI(. | x) = pi_0(. | x, z)`` where ``z`` is the reference answer. The frozen
model sees the question plus a note carrying ``z``, then the retained response as the start of its
own answer, and writes at most ``max_new_tokens`` tokens at its own temperature. EOS ids are
dropped from the correction (control returns to the policy, which decides when to stop).
"""

from __future__ import annotations

from typing import Sequence

from mintrl.intervention.base import InterventionRequest
from mintrl.sampler.hf import HFSampler

DEFAULT_NOTE = (
    "{question}\n\n(Private note for you: the correct final answer is {reference}. "
    "Use it to continue the solution correctly without mentioning this note.)"
)


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
        messages = [{"role": "user", "content": self.note.format(question=r.question, reference=r.reference)}]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return ids + list(r.response_ids)

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[list[int]]:
        """One batched ``generate`` over all requests; returns ids without EOS tokens."""
        if not requests:
            return []
        gen = self.sampler.generate([self.prompt_ids(r) for r in requests], max_new_tokens, self.temperature)
        eos = set(self.sampler.eos_token_ids)
        return [[t for t in ids.tolist() if t not in eos] for ids in gen.token_ids]
