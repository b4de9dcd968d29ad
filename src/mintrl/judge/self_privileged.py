"""``judge=self_privileged``: the frozen step-0 policy judges with the reference answer.

The prompt numbers the chunk's steps and asks for ``KEEP`` or ``REVISE <k>``. Parsing is lenient
(case, brackets, "step", punctuation) and never raises; output with neither form, or a step number
out of range, is ``unparseable`` and counts as Keep.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from mintrl.core.checks import check_int
from mintrl.core.verdict import KEEP, REVISE, UNPARSEABLE, ReviewRequest, Verdict
from mintrl.judge.base import Judge
from mintrl.model.tokens import chat_ids
from mintrl.prompts.templates import load_prompt
from mintrl.sampler.hf import HFSampler

_VERDICT = re.compile(r"\b(KEEP|REVISE)\b(?:\s*(?:at\s+)?(?:step)?\s*(?:[\[#(:=-]\s*)?(\d+))?", re.I)
_MARKUP = re.compile(r"[*_`]")


def parse_verdict(text: str | None, num_steps: int) -> Verdict:
    """Read ``KEEP`` / ``REVISE k`` (1-based ``k``) from a judge's reply; never raises.

    Accepted variations: any case, markdown emphasis, ``REVISE 2``, ``revise step 2``,
    ``REVISE: 2``, ``REVISE [2]``, ``Revise at step #2``, text before or after. When several lines
    carry a verdict, the last one counts (reasoning first, verdict last). A line with both words
    (``KEEP or REVISE 2``) is contradictory.

    Returns:
        Keep, Revise with ``step = k - 1``, or ``unparseable`` (empty or no verdict word, a
        contradictory line, or Revise without a step number in ``1..num_steps``), which counts as Keep.
    """
    lines = [_MARKUP.sub("", line) for line in (text or "").splitlines()]
    lines = [line for line in lines if _VERDICT.search(line)]
    if not lines:
        return Verdict(kind=UNPARSEABLE)
    found = list(_VERDICT.finditer(lines[-1]))
    if len({m.group(1).upper() for m in found}) > 1:
        return Verdict(kind=UNPARSEABLE)
    m = found[0]
    if m.group(1).upper() == "KEEP":
        return Verdict(kind=KEEP)
    if m.group(2) is None or not 1 <= int(m.group(2)) <= num_steps:
        return Verdict(kind=UNPARSEABLE)
    return Verdict(kind=REVISE, step=int(m.group(2)) - 1)


def format_review(template: str, r: ReviewRequest) -> str:
    """Fill a judge template (``{question}``, ``{reference}``, ``{prefix}``, ``{steps}``, steps
    numbered from 1)."""
    steps = "\n".join(f"[{i + 1}] {s.strip()}" for i, s in enumerate(r.steps))
    return template.format(question=r.question, reference=r.reference, prefix=r.prefix_text or "(empty)", steps=steps)


class SelfPrivilegedJudge(Judge):
    """LLM judge on the frozen base policy with privileged context (see module docstring).

    Args:
        context: the run's :class:`mintrl.build.components.ModelContext`.
        teacher: None for the frozen step-0 policy (self, MInTRL section 5.1), or a teacher model
            (``embedded``, HF folder or hub id; e.g. the paper's Qwen3-4B-Instruct-2507), loaded once
            per run through ``context.teacher`` and shared with a teacher intervention.
        teacher_dtype: weights dtype of a loaded teacher.
        max_batch_size: rows per generation batch (count; larger calls are split): bounds the
            judge model's KV cache, ``rows x tokens x`` :func:`mintrl.model.kv_cache.kv_bytes_per_token`.
        max_new_tokens: verdict length budget (tokens).
        temperature: judge sampling temperature.
        prompt: judge template, a shipped name (``judge_math``, ``judge_code``) or a file path
            (see :mod:`mintrl.prompts.templates`).
    """

    @classmethod
    def generates_with_step0_policy(cls, config: Mapping) -> bool:
        """True without a ``teacher``: the judge then generates from the frozen step-0 policy."""
        return config.get("teacher") is None

    @classmethod
    def context_models(cls, config: Mapping) -> tuple[tuple[str | None, str], ...]:
        """The teacher ``(teacher, teacher_dtype)``, or the frozen step-0 policy (path None) without one."""
        return ((config.get("teacher"), str(config.get("teacher_dtype", "float32"))),)

    def __init__(
        self,
        context,
        max_new_tokens: int = 16,
        temperature: float = 1.0,
        prompt: str = "judge_math",
        teacher: str | None = None,
        teacher_dtype: str = "float32",
        max_batch_size: int = 128,
    ):
        check_int("judge.max_new_tokens", max_new_tokens)
        check_int("judge.max_batch_size", max_batch_size)
        loaded = context.teacher(teacher, teacher_dtype)
        self.tokenizer = loaded.tokenizer
        self.sampler = HFSampler(loaded.model, loaded.tokenizer, max_batch_size=max_batch_size)
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.prompt = load_prompt(prompt, required=("{steps}",))

    def prompt_ids(self, r: ReviewRequest) -> list[int]:
        """Chat-templated judge prompt for one request (steps numbered from 1)."""
        text = format_review(self.prompt, r)
        return chat_ids(self.tokenizer, [{"role": "user", "content": text}])

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One batched generation over all requests, parsed with :func:`parse_verdict`."""
        if not requests:
            return []
        gen = self.sampler.generate([self.prompt_ids(r) for r in requests], self.max_new_tokens, self.temperature)
        texts = self.tokenizer.batch_decode([t.tolist() for t in gen.token_ids], skip_special_tokens=True)
        return [parse_verdict(t, len(r.steps)) for t, r in zip(texts, requests)]
