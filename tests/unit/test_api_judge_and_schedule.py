"""Verdict parsing, the API judge's timeout and refused connection, the adaptive stop, the kappa
estimate and the shipped prompt templates (against a real loopback server: integration/test_api_loopback.py)."""

import math
import socket
import threading
import time

import pytest
import torch

from mintrl.core.verdict import FAILED, KEEP, REVISE, UNPARSEABLE, ReviewRequest
from mintrl.judge.api import ApiJudge
from mintrl.judge.self_privileged import parse_verdict
from mintrl.prompts.templates import load_prompt
from mintrl.rollout.schedule import InterventionSchedule
from mintrl.rollout.stats import kappa_estimate

VERDICTS = [  # (reply, steps in the chunk, expected kind, expected 0-based step)
    ("KEEP", 3, KEEP, None),
    ("REVISE 2", 3, REVISE, 1),
    ("revise step 3", 3, REVISE, 2),
    ("Verdict: **REVISE** [1]", 2, REVISE, 0),
    ("REVISE: 2\n", 2, REVISE, 1),
    ("Revise at step #2 because 3 + 4 is not 8.", 3, REVISE, 1),
    ("The steps look fine.\nKEEP.", 2, KEEP, None),
    ("Step 1 is fine, step 2 is wrong.\nREVISE 2", 2, REVISE, 1),  # reasoning first, verdict last
    ("keep", 1, KEEP, None),
    ("`KEEP`", 1, KEEP, None),
    ("", 2, UNPARSEABLE, None),
    (None, 2, UNPARSEABLE, None),
    ("I am not sure.", 2, UNPARSEABLE, None),
    ("KEEP or REVISE 2", 2, UNPARSEABLE, None),  # contradictory line
    ("REVISE", 2, UNPARSEABLE, None),  # no step number
    ("REVISE 5", 2, UNPARSEABLE, None),  # out of range
    ("REVISE 0", 2, UNPARSEABLE, None),
    ("KEEPING it", 2, UNPARSEABLE, None),  # not the word KEEP
    ("\x00\x01 REVISE 1 \ufffd", 1, REVISE, 0),
]


@pytest.mark.parametrize("reply,steps,kind,step", VERDICTS)
def test_parse_verdict_table(reply, steps, kind, step):
    verdict = parse_verdict(reply, steps)
    assert (verdict.kind, verdict.step) == (kind, step)


def test_shipped_prompts_load_and_document_the_verdict_format():
    for name in ("judge_math", "judge_code"):
        text = load_prompt(name, required=("{question}", "{reference}", "{prefix}", "{steps}"))
        assert "KEEP" in text and "REVISE k" in text
    for name in ("intervention_math", "intervention_code"):
        load_prompt(name, required=("{question}", "{reference}", "{prefix}", "{max_words}"))
    assert load_prompt("Q: {question}") == "Q: {question}"
    with pytest.raises(FileNotFoundError, match="judge_math"):
        load_prompt("judge_maths")
    with pytest.raises(ValueError, match="steps"):
        load_prompt("privileged_note", required=("{steps}",))


def _requests():
    return [
        ReviewRequest("Calculate 3 + 4.", "7", "", ["3 + 4 = 8"], False),
        ReviewRequest("Calculate 2 + 2.", "4", "Let me add.", ["2 + 2 = 4", "So <answer>4</answer>"], True),
    ]


@pytest.fixture()
def hanging_server():
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held, stop = [], threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def test_api_judge_timeout_counts_as_keep(hanging_server):
    judge = ApiJudge(hanging_server, "any", timeout_s=0.5, max_retries=1, max_concurrency=2)
    start = time.perf_counter()
    verdicts = judge.review(_requests())
    elapsed = time.perf_counter() - start
    assert [v.kind for v in verdicts] == [FAILED, FAILED]
    assert judge.endpoint.timeouts == 2 and judge.endpoint.failures == 2
    assert elapsed < 15, "timeouts and retries are bounded"


def test_api_judge_connection_refused_counts_as_failed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    judge = ApiJudge(f"http://127.0.0.1:{port}/v1", "any", timeout_s=1, max_retries=0)
    assert [v.kind for v in judge.review(_requests()[:1])] == [FAILED]


def test_adaptive_stop_fires_on_a_synthetic_gap_series_and_not_before():
    schedule = InterventionSchedule(
        intervention_steps=100, adaptive=True, gap_threshold=0.05, patience=3, smoothing=0.5
    )
    gaps = [0.30, 0.20, 0.10, 0.04, 0.02, 0.01, 0.0, 0.0]
    # EMA: .30, .25, .175, .1075, .06375, .036875 (<.05: 1), .0184 (2), .0092 (3) -> stops at step 7
    fired = [schedule.update(step, gap) for step, gap in enumerate(gaps)]
    assert fired == [False] * 7 + [True]
    assert schedule.smoothed_gap == pytest.approx(0.00921875)
    assert schedule.active(7) is False and schedule.stopped_at == 7
    fresh = InterventionSchedule(intervention_steps=100, adaptive=True, gap_threshold=0.05, patience=3, smoothing=0.5)
    fresh.load_state_dict(schedule.state_dict())
    assert not fresh.active(8)
    # a gap that comes back up resets the count; without `adaptive` only the fixed phase applies
    bouncy = InterventionSchedule(intervention_steps=100, adaptive=True, gap_threshold=0.05, patience=2, smoothing=0.0)
    assert [bouncy.update(s, g) for s, g in enumerate([0.0, 0.2, 0.0, 0.0])] == [False, False, False, True]
    fixed = InterventionSchedule(intervention_steps=5)
    assert not any(fixed.update(s, 0.0) for s in range(5)) and fixed.active(4) and not fixed.active(5)
    with pytest.raises(ValueError, match="adaptive_stop"):
        InterventionSchedule(patience=0)


def test_kappa_estimate_hand_value():
    behaviour = torch.tensor([[0.0, -0.1, -0.3, 0.0], [0.0, -0.2, -2.0, -0.5]])
    mask = torch.tensor([[False, True, True, False], [False, False, True, True]])
    assert kappa_estimate(behaviour, mask) == pytest.approx((-0.1 - 0.3 - 2.0 - 0.5) / 4)
    assert math.isnan(kappa_estimate(behaviour, torch.zeros_like(mask)))
