"""``intervention=api``: corrections written by a black-box model behind an OpenAI-compatible endpoint.

The intervention template (``intervention_math`` / ``intervention_code`` or a file) asks for a
short continuation of the retained response; the text is tokenised with the policy tokenizer and
cut to the token budget. No log-probs come back: behaviour log-probs are 0.0 (unknown), which is
why MInTRL-Const's constant anchor suits black-box interventions. A failed request writes no
correction (the chunk is still cut) and is counted by the endpoint.
"""

from __future__ import annotations

from typing import Sequence

from mintrl.intervention.base import Correction, Intervention, InterventionRequest
from mintrl.model.endpoint import ChatEndpoint
from mintrl.prompts.templates import load_prompt

DEMONSTRATION = "{question}\n\nGive the final answer inside <answer></answer> tags."


class ApiIntervention(Intervention):
    """Black-box intervention (see module docstring).

    Args:
        context: the run's :class:`mintrl.build.components.ModelContext` (policy tokenizer).
        base_url, model, api_key_env, timeout_s, max_concurrency, max_retries: the endpoint.
        prompt: intervention template (``{question}``, ``{reference}``, ``{prefix}``, ``{max_words}``).
        demonstration: template of complete responses for the SFT stage (``{question}``, ``{reference}``).
        temperature: sampling temperature. words_per_token: ``max_words = budget * words_per_token``.
    """

    white_box = False

    def __init__(
        self,
        context,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_concurrency: int = 8,
        max_retries: int = 2,
        prompt: str = "intervention_math",
        demonstration: str = DEMONSTRATION,
        temperature: float = 1.0,
        words_per_token: float = 0.7,
    ):
        self.tokenizer = context.tokenizer
        self.endpoint = ChatEndpoint(base_url, model, api_key_env, timeout_s, max_concurrency, max_retries)
        self.prompt = load_prompt(prompt, required=("{prefix}",))
        self.demonstration = load_prompt(demonstration, required=("{question}",))
        self.temperature, self.words_per_token = temperature, words_per_token

    def _encode(self, text: str | None, prefix: str, budget: int, eos: bool = False) -> Correction:
        if not text:
            return Correction([], [])
        if prefix and not prefix[-1].isspace() and not text[0].isspace():
            text = " " + text
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if eos and self.tokenizer.eos_token_id is not None:
            ids = ids[: budget - 1] + [self.tokenizer.eos_token_id]
        ids = ids[:budget]
        return Correction(ids, [0.0] * len(ids))

    def intervene(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """One continuation per request (at most ``max_new_tokens`` policy tokens, no EOS)."""
        words = max(1, int(max_new_tokens * self.words_per_token))
        prompts = [
            self.prompt.format(
                question=r.question, reference=r.reference, prefix=r.response_text or "(nothing yet)", max_words=words
            )
            for r in requests
        ]
        replies = self.endpoint.complete(prompts, max_new_tokens, self.temperature)
        return [
            self._encode(text.strip() if text else text, r.response_text, max_new_tokens)
            for text, r in zip(replies, requests)
        ]

    def demonstrate(self, requests: Sequence[InterventionRequest], max_new_tokens: int) -> list[Correction]:
        """Complete responses (EOS appended) for the SFT stage."""
        prompts = [self.demonstration.format(question=r.question, reference=r.reference) for r in requests]
        replies = self.endpoint.complete(prompts, max_new_tokens, self.temperature)
        return [self._encode(text, "", max_new_tokens, eos=True) for text in replies]
