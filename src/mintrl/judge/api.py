"""``judge=api``: a black-box judge behind any OpenAI-compatible chat endpoint.

The judge template (``judge_math`` / ``judge_code`` or a file) is sent as one user message per
chunk; the reply is read with :func:`mintrl.judge.self_privileged.parse_verdict`. A failed or
timed-out request is a ``failed`` verdict: treated as Keep and counted (``judge/failed``).
"""

from __future__ import annotations

from typing import Sequence

from mintrl.core.checks import check_int
from mintrl.core.verdict import FAILED, ReviewRequest, Verdict
from mintrl.judge.base import Judge
from mintrl.judge.self_privileged import format_review, parse_verdict
from mintrl.model.endpoint import ChatEndpoint
from mintrl.prompts.templates import load_prompt


class ApiJudge(Judge):
    """LLM judge over HTTP (see module docstring).

    Args:
        context: unused (judges receive the run's ModelContext).
        base_url, model, api_key_env, timeout_s, max_concurrency, max_retries: see
            :class:`mintrl.model.endpoint.ChatEndpoint` (the key is read from ``api_key_env``).
        prompt: judge template name or path. max_new_tokens: reply budget (tokens).
        temperature: sampling temperature of the judge.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        context=None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_concurrency: int = 8,
        max_retries: int = 2,
        prompt: str = "judge_math",
        max_new_tokens: int = 32,
        temperature: float = 1.0,
    ):
        check_int("judge.max_new_tokens", max_new_tokens)
        self.endpoint = ChatEndpoint(base_url, model, api_key_env, timeout_s, max_concurrency, max_retries)
        self.prompt = load_prompt(prompt, required=("{steps}",))
        self.max_new_tokens, self.temperature = max_new_tokens, temperature

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One request per chunk, ``max_concurrency`` in flight; never raises."""
        replies = self.endpoint.complete(
            [format_review(self.prompt, r) for r in requests], self.max_new_tokens, self.temperature
        )
        return [
            Verdict(kind=FAILED) if text is None else parse_verdict(text, len(r.steps))
            for text, r in zip(replies, requests)
        ]
