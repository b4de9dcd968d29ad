"""Keyword shift between two runs' responses (MInTRL Figure 5, mintrl.analysis.keywords), counted by hand."""

from __future__ import annotations

import pytest

from mintrl.analysis.keywords import keyword_counts, keyword_rates, keyword_shift, shift_table

TEXT = (
    "Wait, maybe we can use the sum. Waiting is not waiting; actually we will compute it. "
    "Alternatively, WE CAN reuse."
)  # 20 words
LONG = " ".join(["step"] * 510) + " wait we can maybe"  # words 511-514: the phrase crosses word 512


def test_keyword_counts_whole_words_phrases_and_window():
    counts, n = keyword_counts(TEXT)
    assert n == 20
    assert counts == {
        "wait": 1,
        "actually": 1,
        "maybe": 1,
        "alternatively": 1,
        "compute": 1,
        "use": 1,
        "we can": 2,
        "we will": 1,
    }  # not waiting / reuse
    counts, n = keyword_counts(LONG)
    assert n == 512
    assert counts["wait"] == 1 and counts["we can"] == 0 and counts["maybe"] == 0
    counts, n = keyword_counts(TEXT, first_words=4)
    assert n == 4 and counts["we can"] == 1 and counts["use"] == 0
    fenced = "Maybe.\n```python\nwait = use(x)\n```\nWait."
    assert keyword_counts(fenced)[0]["wait"] == 1 and keyword_counts(fenced)[1] == 2
    assert keyword_counts(fenced, keep_code=True)[0]["wait"] == 2


def test_keyword_rates_per_1000_window_words():
    rates = keyword_rates([TEXT, LONG])  # 20 + 512 words
    assert rates["wait"] == pytest.approx(1000 * 2 / 532)
    assert rates["we can"] == pytest.approx(1000 * 2 / 532)
    assert rates["maybe"] == pytest.approx(1000 * 1 / 532)
    assert rates["alternatively"] == pytest.approx(1000 / 532)
    with pytest.raises(ValueError, match="no words"):
        keyword_rates(["", "..."])


def test_keyword_shift_difference_and_relative_change():
    shift = keyword_shift(["wait use use"], ["wait wait use"])
    assert shift["wait"]["a"] == pytest.approx(1000 / 3) and shift["wait"]["b"] == pytest.approx(2000 / 3)
    assert shift["wait"]["diff"] == pytest.approx(1000 / 3) and shift["wait"]["rel_pct"] == pytest.approx(100.0)
    assert shift["use"]["rel_pct"] == pytest.approx(-50.0)
    assert shift["maybe"]["rel_pct"] is None and shift["maybe"]["diff"] == 0
    assert "| wait | 333.33 | 666.67 | +333.33 | +100.0 |" in shift_table(shift)
