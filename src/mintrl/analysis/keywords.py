"""Keyword shift of the responses of two runs (MInTRL section 4, Figure 5).

MInTRL compares evaluation rollouts of GRPO and MInTRL in the first 512 narrative words of each
response: reconsideration and branching markers (``wait``, ``actually``, ``maybe``,
``alternatively``) become more frequent, execution and commitment markers (``compute``, ``use``,
``we can``, ``we will``) less frequent.

Definitions used here:

* a *word* is a maximal run of ASCII letters and digits, with inner apostrophes kept
  (``don't`` is one word, ``re-check`` two, ``x=3`` two); matching is case-insensitive;
* a response's *window* is its first ``first_words`` words, after fenced code blocks (between
  `````` lines) are removed unless ``keep_code=True`` ("narrative" words);
* a keyword matches whole words only (``waiting`` is not ``wait``, ``used`` is not ``use``); a
  phrase (``we can``) matches consecutive words (punctuation and line breaks between them are
  ignored), all inside the window;
* the *rate* of a keyword over a set of responses is ``1000 * occurrences / words``: all its
  occurrences in all windows divided by the total number of words in those windows, i.e.
  occurrences per 1000 window words (pooled over responses, so long and short responses weigh by
  their words).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

RECONSIDERATION = ("wait", "actually", "maybe", "alternatively")
COMMITMENT = ("compute", "use", "we can", "we will")
KEYWORDS = RECONSIDERATION + COMMITMENT

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_FENCED = re.compile(r"^[ \t]*```.*?(?:^[ \t]*```[^\n]*$|\Z)", re.S | re.M)


def narrative(text: str) -> str:
    """``text`` without fenced code blocks (from a ```` ``` ```` line to the next one, or to the end
    when the block is not closed)."""
    return _FENCED.sub(" ", text)


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (see the module docstring for what a word is)."""
    return _WORD.findall(text.lower())


def keyword_counts(
    text: str, first_words: int = 512, keywords: Sequence[str] = KEYWORDS, keep_code: bool = False
) -> tuple[dict[str, int], int]:
    """Occurrences of each keyword in one response's window.

    Args:
        text: one response.
        first_words: window length (words).
        keywords: words or space-separated phrases (lower case).
        keep_code: also count words inside fenced code blocks.

    Returns:
        ``({keyword: occurrences}, words in the window)``.

    Raises:
        ValueError: ``first_words`` < 1.
    """
    if first_words < 1:
        raise ValueError(f"first_words must be >= 1, got {first_words}")
    window = words(text if keep_code else narrative(text))[:first_words]
    counts = {}
    for kw in keywords:
        phrase = kw.lower().split()
        n = len(phrase)
        counts[kw] = sum(window[i : i + n] == phrase for i in range(len(window) - n + 1))
    return counts, len(window)


def keyword_rates(
    texts: Iterable[str], first_words: int = 512, keywords: Sequence[str] = KEYWORDS, keep_code: bool = False
) -> dict[str, float]:
    """Occurrences per 1000 window words of each keyword over a set of responses.

    ``rate[k] = 1000 * sum_i count_i(k) / sum_i words_i``, with ``count_i`` and ``words_i`` from
    :func:`keyword_counts` on response ``i`` (its first ``first_words`` narrative words).

    Raises:
        ValueError: the responses have no words at all (the rate is undefined), or ``first_words`` < 1.
    """
    totals = dict.fromkeys(keywords, 0)
    n_words = 0
    for text in texts:
        counts, n = keyword_counts(text, first_words, keywords, keep_code)
        n_words += n
        for kw, c in counts.items():
            totals[kw] += c
    if n_words == 0:
        raise ValueError("keyword_rates: the responses contain no words")
    return {kw: 1000.0 * c / n_words for kw, c in totals.items()}


def keyword_shift(
    texts_a: Iterable[str],
    texts_b: Iterable[str],
    first_words: int = 512,
    keywords: Sequence[str] = KEYWORDS,
    keep_code: bool = False,
) -> dict[str, dict[str, float | None]]:
    """Keyword rates of run B relative to run A (A: the reference, e.g. GRPO; B: e.g. MInTRL).

    Returns:
        ``{keyword: {"a": rate_a, "b": rate_b, "diff": rate_b - rate_a, "rel_pct": ...}}`` with rates
        in occurrences per 1000 window words (:func:`keyword_rates`) and ``rel_pct`` the relative
        change ``100 * (rate_b - rate_a) / rate_a`` in percent (the paper's "increase by 55 pp
        relative to GRPO"), None when ``rate_a`` is 0.

    Raises:
        ValueError: as :func:`keyword_rates`, for either run.
    """
    a = keyword_rates(texts_a, first_words, keywords, keep_code)
    b = keyword_rates(texts_b, first_words, keywords, keep_code)
    return {
        kw: {
            "a": a[kw],
            "b": b[kw],
            "diff": b[kw] - a[kw],
            "rel_pct": 100.0 * (b[kw] - a[kw]) / a[kw] if a[kw] else None,
        }
        for kw in keywords
    }


def shift_table(shift: dict[str, dict[str, float | None]], name_a: str = "A", name_b: str = "B") -> str:
    """:func:`keyword_shift` as a markdown table (rates per 1000 words, relative change in %)."""
    lines = [
        f"| keyword | {name_a} (per 1000 words) | {name_b} (per 1000 words) | difference | relative change (%) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kw, s in shift.items():
        rel = "n/a" if s["rel_pct"] is None else f"{s['rel_pct']:+.1f}"
        lines.append(f"| {kw} | {s['a']:.2f} | {s['b']:.2f} | {s['diff']:+.2f} | {rel} |")
    return "\n".join(lines)


def read_responses(path: str) -> list[str]:
    """The ``response`` field of every line of a ``samples.jsonl`` written by ``mintrl-eval``.

    Raises:
        ValueError: a line that is not JSON or has no ``response`` string (line number named).
    """
    import json

    responses = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                response = json.loads(line).get("response")
            except (ValueError, AttributeError):
                response = None
            if not isinstance(response, str):
                raise ValueError(f"{path} line {number}: not a JSON object with a 'response' string")
            responses.append(response)
    return responses
