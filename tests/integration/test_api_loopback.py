"""The black-box API judge and intervention against a real loopback server serving the embedded
model, and the rollout engine applying the adaptive stop."""

import pytest
import torch

from mintrl.build.components import ModelContext
from mintrl.core.verdict import KEEP, REVISE, UNPARSEABLE, ReviewRequest
from mintrl.intervention.api import ApiIntervention
from mintrl.intervention.base import InterventionRequest
from mintrl.judge.api import ApiJudge
from mintrl.sampler.chat_server import ChatServer


@pytest.fixture(scope="module")
def server(embedded):
    with ChatServer(embedded.model, embedded.tokenizer, model_name="smollm2") as s:
        yield s


def _requests():
    return [
        ReviewRequest("Calculate 3 + 4.", "7", "", ["3 + 4 = 8"], False),
        ReviewRequest("Calculate 2 + 2.", "4", "Let me add.", ["2 + 2 = 4", "So <answer>4</answer>"], True),
    ]


def test_api_judge_against_the_loopback_server(server, monkeypatch):
    monkeypatch.setenv("MINTRL_TEST_KEY", "secret-value")
    judge = ApiJudge(
        server.base_url, "smollm2", api_key_env="MINTRL_TEST_KEY", timeout_s=60, max_concurrency=2, max_new_tokens=8
    )
    assert "secret-value" not in repr(judge.endpoint)
    torch.manual_seed(0)
    verdicts = judge.review(_requests())
    assert len(verdicts) == 2 and all(v.kind in (KEEP, REVISE, UNPARSEABLE) for v in verdicts)
    assert judge.endpoint.calls == 2 and judge.endpoint.failures == 0


def test_api_intervention_against_the_loopback_server(server, embedded):
    intervention = ApiIntervention(ModelContext(embedded), server.base_url, "smollm2", timeout_s=60)
    request = InterventionRequest("Calculate 3 + 4.", "7", [1, 2], [], "3 + 4 =", None)
    torch.manual_seed(0)
    (fix,) = intervention.intervene([request], max_new_tokens=6)
    assert 0 < len(fix.ids) <= 6 and fix.logprobs == [0.0] * len(fix.ids)
    assert intervention.white_box is False and intervention.endpoint.failures == 0


def test_rollout_engine_applies_the_adaptive_stop(embedded, tokenizer):
    from conftest import ARITHMETIC

    from mintrl.data.reasoning_gym import ReasoningGymPrompts
    from mintrl.intervention.rule import RuleIntervention
    from mintrl.judge.rule import RuleJudge
    from mintrl.reward import ReasoningGymReward
    from mintrl.rollout.single_turn import SingleTurnRollout
    from mintrl.sampler import HFSampler

    items = ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=4, val_size=2).build("train", tokenizer)
    # a threshold no gap can reach from below (rewards are in [0, 1]): the first intervened step ends the phase
    engine = SingleTurnRollout(
        HFSampler(embedded.model, tokenizer),
        RuleJudge(),
        RuleIntervention(ModelContext(embedded)),
        ReasoningGymReward(),
        tokenizer,
        n_control=1,
        n_semi=1,
        chunk_size=8,
        max_reviews=1,
        continuation_len=8,
        max_response_tokens=16,
        progress=False,
        adaptive_stop={"gap_threshold": 2.0, "patience": 1, "smoothing": 0.0},
    )
    torch.manual_seed(0)
    first = engine.generate(items[:2], step=0)
    assert first.stats["rollout/intervention_phase"] == 1.0 and first.stats["rollout/adaptive_stop"] == 0.0
    assert first.stats["rollout/gap_smoothed"] == pytest.approx(first.stats["reward/gap"])
    second = engine.generate(items[2:4], step=1)
    assert second.stats["rollout/intervention_phase"] == 0.0 and second.is_control.all()
