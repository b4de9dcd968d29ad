"""Truncation + intervention (token ids, provenance) and semi-on-policy rollouts of the real model."""

import math

import pytest
import torch
from conftest import ARITHMETIC

from mintrl.build.components import ModelContext
from mintrl.core.batch import Rollout
from mintrl.core.verdict import ReviewRequest
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.reward import ReasoningGymReward, extract_answer
from mintrl.rollout.single_turn import SingleTurnRollout
from mintrl.rollout.stats import rollout_stats
from mintrl.rollout.verdicts import apply_verdict
from mintrl.sampler import HFSampler
from mintrl.text.steps import split_steps, token_index_of_char


@pytest.fixture(scope="module")
def items(tokenizer):
    return ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=16, val_size=4).build("train", tokenizer)


def test_truncation_and_intervention_ids_and_provenance(embedded, tokenizer, items):
    item = items[0]  # "Calculate a + b."
    a, b = item.entry["metadata"]["expression"].split(" + ")
    good = f"{a} + {b} = {int(a) + int(b)}"
    bad_text = f"First, {good}\n\nThen {a} + {b} = 99\n\nSo"
    prefix = tokenizer.encode("Let me add.\n\n", add_special_tokens=False)
    chunk = tokenizer.encode(bad_text, add_special_tokens=False)
    rollout = Rollout(group=0, is_control=False, prompt_ids=item.prompt_ids)
    rollout.append(prefix, [-0.1] * len(prefix), intervention=False)
    steps = split_steps(tokenizer.decode(chunk))
    verdict = RuleJudge().review_one(
        ReviewRequest(item.question, item.reference, tokenizer.decode(prefix), [s.text for s in steps], False)
    )
    assert verdict.revise and verdict.step == 1 and verdict.correction == good

    fix = apply_verdict(rollout, chunk, [-0.5] * len(chunk), False, steps, verdict, item, tokenizer)
    kept = rollout.response_ids[len(prefix) :]
    assert rollout.response_ids[: len(prefix)] == prefix and kept == chunk[: len(kept)]
    kept_text = tokenizer.decode(kept)
    # the whole first step is kept, nothing of the wrong one (a token straddling the cut is dropped)
    assert kept_text.startswith(f"First, {good}") and f"First, {good}\n\n".startswith(kept_text)
    assert fix.response_text == "Let me add.\n\n" + kept_text and fix.response_ids == rollout.response_ids
    correction = RuleIntervention(ModelContext(embedded)).intervene([fix], max_new_tokens=16)[0].ids
    assert tokenizer.decode(correction) == ("" if kept_text[-1].isspace() else " ") + good
    rollout.append(correction, [math.nan] * len(correction), intervention=True)
    assert rollout.intervention == [False] * (len(prefix) + len(kept)) + [True] * len(correction)
    assert (rollout.reviews, rollout.revisions) == (1, 1)


def test_keep_appends_the_whole_chunk(tokenizer, items):
    rollout = Rollout(group=0, is_control=False, prompt_ids=items[0].prompt_ids)
    chunk = tokenizer.encode("All good.", add_special_tokens=False) + [2]
    steps = split_steps(tokenizer.decode(chunk))
    verdict = RuleJudge().review_one(ReviewRequest("q", "7", "", [s.text for s in steps], True))
    assert apply_verdict(rollout, chunk, [-1.0] * len(chunk), True, steps, verdict, items[0], tokenizer) is None
    assert rollout.response_ids == chunk and rollout.finished and not any(rollout.intervention)


def test_token_index_of_char_drops_straddling_tokens(tokenizer):
    ids = tokenizer.encode("Hello world\n\nNext", add_special_tokens=False)
    cut = token_index_of_char(tokenizer, ids, len("Hello world\n\n"))
    assert len(tokenizer.decode(ids[:cut])) <= len("Hello world\n\n") < len(tokenizer.decode(ids[: cut + 1]))


def test_extract_answer():
    assert extract_answer("x <answer> 12 </answer> then <answer>13</answer>") == "13"
    assert extract_answer("3 + 4 = 7, so 1,200 apples") == "1200"
    assert extract_answer("no answer") is None


def test_single_turn_rollouts_of_the_embedded_model(embedded, tokenizer):
    # two-digit sums: the 135M model gets most of them wrong, so a batch of 24 semi-on-policy
    # rollouts holds wrong steps the rule judge revises (3-10 of them at seeds 0-7 on one thread)
    items = ReasoningGymPrompts(task_kwargs={**ARITHMETIC, "min_digits": 2, "max_digits": 2}, train_size=16).build(
        "train", tokenizer
    )
    context = ModelContext(embedded)
    engine = SingleTurnRollout(
        HFSampler(embedded.model, tokenizer),
        RuleJudge(),
        RuleIntervention(context),
        ReasoningGymReward(),
        tokenizer,
        n_control=2,
        n_semi=4,
        chunk_size=8,
        max_reviews=2,
        continuation_len=8,
        max_response_tokens=32,
    )
    torch.manual_seed(0)
    batch = engine.generate(items[:6], step=0)
    n = 6 * 6
    assert batch.input_ids.shape[0] == n and batch.group_index.tolist() == [g for g in range(6) for _ in range(6)]
    assert batch.is_control.tolist() == [True, True, False, False, False, False] * 6
    resp = batch.response_mask
    assert (resp.sum(-1) <= 32).all() and (resp.sum(-1) > 0).all()
    assert not batch.intervention_mask[batch.is_control].any(), "control rollouts are pure on-policy"
    assert not (batch.intervention_mask & ~resp).any()
    assert torch.isfinite(batch.rollout_logprobs[resp]).all() and (batch.rollout_logprobs[resp] <= 0).all()
    assert (batch.rollout_logprobs[~resp] == 0).all()
    # behaviour log-probs: the policy's own on its tokens, the rule writer's log 1 = 0 on intervention tokens
    policy_tokens = resp & ~batch.intervention_mask
    assert torch.equal(batch.behaviour_logprobs[policy_tokens], batch.rollout_logprobs[policy_tokens])
    assert (batch.behaviour_logprobs[batch.intervention_mask] == 0).all()
    assert batch.prompts is not None and [p.index for p in batch.prompts] == [it.index for it in items[:6]]
    s = batch.stats
    assert s["rollout/offpolicy_frac"] == pytest.approx(batch.intervention_mask.sum().item() / resp.sum().item())
    assert s["judge/early_cuts"] == 0.0  # rollout.min_kept_tokens 0: every Revise applies
    assert s["judge/keep"] + s["judge/revise"] + s["judge/unparseable"] == pytest.approx(
        s["judge/reviews_per_rollout"] * 24
    )
    assert s["judge/revise"] > 0, "the 135M model makes arithmetic mistakes the rule judge revises"
    assert ((batch.rewards >= 0) & (batch.rewards <= 1)).all()
    # after the intervention phase every rollout is a control rollout
    late = SingleTurnRollout(
        engine.sampler,
        RuleJudge(),
        RuleIntervention(context),
        ReasoningGymReward(),
        tokenizer,
        n_control=1,
        n_semi=1,
        max_response_tokens=8,
        intervention_steps=3,
    ).generate(items[:2], step=3)
    assert (
        late.is_control.all() and not late.intervention_mask.any() and late.stats["rollout/intervention_phase"] == 0.0
    )


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("chunk_size", dict(chunk_size=0)),
        ("continuation_len", dict(continuation_len=-1)),
        ("n_control", dict(n_control=0)),
        ("n_semi", dict(n_semi=-2)),
    ],
)
def test_rollout_rejects_non_positive_sizes(embedded, tokenizer, field, kwargs):
    with pytest.raises(ValueError, match=f"rollout.{field}"):
        SingleTurnRollout(None, None, None, None, tokenizer, **kwargs)


def test_prompt_stream_is_seeded_and_splits_each_global_batch_across_ranks(items):
    from itertools import islice

    from mintrl.data import PromptStream

    one = [[p.index for p in b] for b in islice(iter(PromptStream(items, 4, seed=3)), 6)]
    assert one == [[p.index for p in b] for b in islice(iter(PromptStream(items, 4, seed=3)), 6)]
    assert sorted(i for b in one[:4] for i in b) == list(range(16)), "an epoch covers every prompt once"
    # data.prompts_per_step is the global batch: 2 ranks take 2 of each step's 4 prompts, the
    # single process's batch split in two (the same prompts per optimizer step, each rank its own)
    r0 = [[p.index for p in b] for b in islice(iter(PromptStream(items, 4, seed=3, rank=0, world_size=2)), 6)]
    r1 = [[p.index for p in b] for b in islice(iter(PromptStream(items, 4, seed=3, rank=1, world_size=2)), 6)]
    assert [a + b for a, b in zip(r0, r1)] == one and all(len(b) == 2 for b in r0 + r1)
    # a resumed run (start = batches trained) continues with the same step's share
    resumed = [
        [p.index for p in b] for b in islice(iter(PromptStream(items, 4, seed=3, rank=1, world_size=2, start=4)), 2)
    ]
    assert resumed == r1[4:6]
    with pytest.raises(ValueError, match="prompts_per_step"):
        PromptStream(items, 17, seed=0)
    with pytest.raises(ValueError, match=r"data.prompts_per_step=6 .* multiple of the 4 data-parallel ranks"):
        PromptStream(items, 6, seed=0, rank=1, world_size=4)


def test_collate_refuses_unscored_intervention_tokens(items):
    from mintrl.core.batch import collate_rollouts

    r = Rollout(group=0, is_control=False, prompt_ids=[1, 2])
    r.append([5, 6], [-0.1, -0.2], intervention=False)
    r.append([7], [math.nan], intervention=True, behaviour=[-0.5])
    with pytest.raises(ValueError, match="row 0"):
        collate_rollouts([r], 1, 0, 1.0)
    r.logprobs[-1] = -3.0
    batch = collate_rollouts([r], 1, 0, 1.0)
    assert batch.input_ids.tolist() == [[1, 2, 5, 6, 7]]
    assert batch.response_mask.tolist() == [[False, False, True, True, True]]
    assert batch.intervention_mask.tolist() == [[False, False, False, False, True]]
    assert batch.behaviour_logprobs.tolist() == [pytest.approx([0.0, 0.0, -0.1, -0.2, -0.5])]
    assert batch.rollout_logprobs.tolist() == [pytest.approx([0.0, 0.0, -0.1, -0.2, -3.0])]
    assert batch.rollout_logprobs[0].tolist() == pytest.approx([0.0, 0.0, -0.1, -0.2, -3.0])


def test_min_kept_tokens_keeps_a_chunk_whose_cut_would_leave_too_little(tokenizer, items):
    item = items[0]
    a, b = item.entry["metadata"]["expression"].split(" + ")
    chunk = tokenizer.encode(f"{a} + {b} = 99\n\nSo", add_special_tokens=False)
    steps = split_steps(tokenizer.decode(chunk))
    verdict = RuleJudge().review_one(ReviewRequest(item.question, item.reference, "", [s.text for s in steps], False))
    assert verdict.revise and verdict.step == 0  # the first step is wrong: the cut is at token 0
    applied = Rollout(group=0, is_control=False, prompt_ids=item.prompt_ids)
    fix = apply_verdict(applied, chunk, [-0.5] * len(chunk), False, steps, verdict, item, tokenizer)
    assert fix is not None and applied.response_ids == [] and (applied.revisions, applied.early_cuts) == (1, 0)
    kept = Rollout(group=0, is_control=False, prompt_ids=item.prompt_ids)
    fix = apply_verdict(kept, chunk, [-0.5] * len(chunk), False, steps, verdict, item, tokenizer, min_kept_tokens=1)
    assert fix is None and kept.response_ids == chunk and not any(kept.intervention)
    assert (kept.reviews, kept.revisions, kept.early_cuts) == (1, 0, 1)
    assert kept.review_records[0].kind == "revise" and kept.review_records[0].revised is False
    stats = rollout_stats([Rollout(group=0, is_control=True, prompt_ids=[1]), kept, applied], 1.0)
    assert (stats["judge/early_cuts"], stats["judge/keep"], stats["judge/revise"]) == (1.0, 0.0, 1.0)
    # after 3 accepted tokens the same cut keeps 3: applied at min_kept_tokens=3, not at 4
    prefix = tokenizer.encode("Let me add.", add_special_tokens=False)[:3]
    for need, applies in ((3, True), (4, False)):
        r = Rollout(group=0, is_control=False, prompt_ids=item.prompt_ids)
        r.append(prefix, [-0.1] * 3, intervention=False)
        fix = apply_verdict(r, chunk, [-0.5] * len(chunk), False, steps, verdict, item, tokenizer, min_kept_tokens=need)
        assert (fix is not None) == applies and r.early_cuts == (0 if applies else 1)
        assert r.response_ids == (prefix if applies else prefix + chunk)
