"""A black-box OpenAI-compatible chat endpoint, as judges and interventions use it.

The API key is read from an environment variable named in the config (never from the config file,
never logged). Requests run in a bounded thread pool; each has a timeout, and the ``openai``
client retries connection errors, timeouts, 429 and 5xx responses with exponential backoff. A
request that still fails returns None and is counted: callers turn it into their documented
fallback (a judge: Keep; an intervention: no correction).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import openai

log = logging.getLogger(__name__)


class ChatEndpoint:
    """Batched single-turn chat completions against ``base_url``.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` or a provider's URL.
        model: the served model name.
        api_key_env: name of the environment variable holding the key (``EMPTY`` is sent when it
            is unset, as local servers expect).
        timeout_s: per-request timeout (seconds).
        max_concurrency: requests in flight at once (positive).
        max_retries: retries per request after the first try (with the client's exponential backoff).

    Attributes:
        calls, failures, timeouts: counters since construction (timeouts are also failures).

    Raises:
        ValueError: a non-positive timeout or concurrency, a negative retry count (field named).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_concurrency: int = 8,
        max_retries: int = 2,
    ):
        if timeout_s <= 0 or max_concurrency <= 0 or max_retries < 0:
            raise ValueError(
                f"endpoint needs timeout_s > 0, max_concurrency > 0, max_retries >= 0; got {timeout_s}, {max_concurrency}, {max_retries}"
            )
        self.base_url, self.model, self.max_concurrency = base_url, model, max_concurrency
        key = os.environ.get(api_key_env) or "EMPTY"
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=max_retries)
        self.calls = self.failures = self.timeouts = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # no key in reprs or logs
        return f"ChatEndpoint(base_url={self.base_url!r}, model={self.model!r})"

    def _count(self, failed: bool = False, timeout: bool = False) -> None:
        with self._lock:
            self.calls += 1
            self.failures += failed or timeout
            self.timeouts += timeout

    def _one(self, prompt: str, max_tokens: int, temperature: float) -> str | None:
        try:
            reply = self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                temperature=temperature,
            )
            text = reply.choices[0].message.content if reply.choices else None
        except openai.APITimeoutError:
            self._count(timeout=True)
            log.warning("chat endpoint %s timed out", self.base_url)
            return None
        except Exception as err:  # noqa: BLE001 - any client or server failure becomes the counted fallback
            self._count(failed=True)
            log.warning("chat endpoint %s failed: %s", self.base_url, type(err).__name__)
            return None
        self._count(failed=text is None)
        return text

    def complete(self, prompts: Sequence[str], max_tokens: int, temperature: float = 1.0) -> list[str | None]:
        """One completion per prompt (user message), in order; None where the request failed."""
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            return list(pool.map(lambda p: self._one(p, max_tokens, temperature), prompts))
