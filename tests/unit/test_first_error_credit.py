"""First-error credit (objective=first_error, issue 22 item 4): token advantages on a hand batch,
the loss gradient per token, and the config checks."""

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config, check_first_error
from mintrl.core.batch import RolloutBatch
from mintrl.objective import FirstErrorCredit, first_error_token_advantages, step_totals, unmarked_failed_errors
from mintrl.objective.first_error_credit import response_start


def test_token_advantages_by_hand():
    # row 0: prompt 2 columns, error at response token 3 -> columns 2, 3, 4 before, 5.. after
    # row 1: no error marked -> its sequence advantage everywhere
    # row 2: prompt 1 column, error at response token 0 -> every response column after
    adv = first_error_token_advantages(
        torch.tensor([-0.5, 0.75, -1.25]), torch.tensor([3, -1, 0]), torch.tensor([2, 3, 1]), 7, before=0.25, after=2.0
    )
    assert adv.tolist() == [
        [0.25, 0.25, 0.25, 0.25, 0.25, -2.0, -2.0],
        [0.75] * 7,
        [0.25, -2.0, -2.0, -2.0, -2.0, -2.0, -2.0],
    ]


def _hand_batch() -> RolloutBatch:
    """One prompt, 4 rollouts with rewards 1, 0, 0, 0; rows 1 and 2 have a marked first error
    (response tokens 1 and 0), row 3 (failed) none; 12 response tokens in all."""
    prompt = [2, 2, 2, 1]  # prompt lengths (columns)
    resp = [3, 4, 2, 3]  # response lengths
    width = 6
    ids = torch.zeros(4, width, dtype=torch.long)
    attn = torch.zeros(4, width, dtype=torch.long)
    mask = torch.zeros(4, width, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt, resp)):
        ids[i, : p + r] = torch.arange(5, 5 + p + r)
        attn[i, : p + r] = 1
        mask[i, p : p + r] = True
    return RolloutBatch(
        input_ids=ids,
        attention_mask=attn,
        response_mask=mask,
        intervention_mask=torch.zeros_like(mask),
        rollout_logprobs=torch.full((4, width), -1.0) * mask,
        rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]),
        group_index=torch.zeros(4, dtype=torch.long),
        is_control=torch.ones(4, dtype=torch.bool),
        num_groups=1,
        first_error=torch.tensor([-1, 1, 0, -1]),
    )


def test_prepare_gives_hand_token_advantages():
    batch = _hand_batch()
    assert response_start(batch).tolist() == [2, 2, 2, 1]
    objective = FirstErrorCredit(credit_before=0.3, credit_after=1.5, eps=0.0)
    stats = objective.prepare(batch, logprob_fn=None)
    # group rewards 1, 0, 0, 0: mean 0.25, Bessel std sqrt(0.75 / 3) = 0.5 -> +1.5, -0.5, -0.5, -0.5
    seq = batch.extras["advantages"]
    assert seq.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])
    adv = batch.extras["token_advantages"]
    on = batch.loss_mask
    # row 0 (success): its sequence advantage on its 3 response tokens
    assert adv[0][on[0]].tolist() == pytest.approx([1.5, 1.5, 1.5])
    # row 1: error at response token 1 of 4 -> +0.3, then -1.5 x 3
    assert adv[1][on[1]].tolist() == pytest.approx([0.3, -1.5, -1.5, -1.5])
    # row 2: error at its first token -> all -1.5
    assert adv[2][on[2]].tolist() == pytest.approx([-1.5, -1.5])
    # row 3: failed, no error found -> keeps -0.5
    assert adv[3][on[3]].tolist() == pytest.approx([-0.5, -0.5, -0.5])
    assert stats["objective/first_error_rows"] == 2.0
    assert stats["objective/first_error_before_frac"] == pytest.approx((1 / 4 + 0 / 2) / 2)


def test_unmarked_after_penalises_a_failed_rollout_without_a_found_error():
    # the hand batch with unmarked=after: row 3 (reward 0, no error found) gets -1.5 on every token
    # instead of its sequence advantage -0.5; row 0 (a success, unmarked) keeps +1.5; rows 1-2 as before
    batch = _hand_batch()
    stats = FirstErrorCredit(credit_before=0.3, credit_after=1.5, unmarked="after", eps=0.0).prepare(batch, None)
    adv, on = batch.extras["token_advantages"], batch.loss_mask
    assert [adv[i][on[i]].tolist() for i in range(4)] == [
        pytest.approx([1.5, 1.5, 1.5]),
        pytest.approx([0.3, -1.5, -1.5, -1.5]),
        pytest.approx([-1.5, -1.5]),
        pytest.approx([-1.5, -1.5, -1.5]),
    ]
    assert stats["objective/first_error_unmarked_rows"] == 1.0
    assert stats["objective/first_error_rows"] == 2.0  # judge-marked rows only
    assert stats["objective/first_error_before_frac"] == pytest.approx((1 / 4 + 0 / 2) / 2)


def test_unmarked_counts_in_both_modes_and_skips_rows_without_reward():
    # row 3 (failed, unmarked) loses its reward: no row is unmarked-and-valid, row 3 trains on nothing
    batch = _hand_batch()
    batch.rewards = torch.tensor([1.0, 0.0, 0.0, float("nan")])
    stats = FirstErrorCredit(unmarked="after").prepare(batch, None)
    assert stats["objective/first_error_unmarked_rows"] == 0.0 and not batch.loss_mask[3].any()
    assert torch.isfinite(batch.extras["token_advantages"]).all()
    # default mode counts the unmarked failed rows too, and leaves their advantage alone
    batch = _hand_batch()
    stats = FirstErrorCredit(eps=0.0).prepare(batch, None)
    assert stats["objective/first_error_unmarked_rows"] == 1.0
    assert batch.extras["token_advantages"][3][batch.loss_mask[3]].tolist() == pytest.approx([-0.5] * 3)


def test_unmarked_failed_errors_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.5, float("nan"), 0.0])
    first_error = torch.tensor([-1, -1, -1, -1, 2])
    # success; failed unmarked; partial reward unmarked; no reward; failed but marked
    assert unmarked_failed_errors(rewards, first_error).tolist() == [False, True, True, False, False]


def test_unknown_unmarked_is_refused():
    with pytest.raises(ValueError, match=r"^objective.unmarked must be one of sequence, after, got 'none'$"):
        FirstErrorCredit(unmarked="none")


def test_loss_gradient_per_token_is_minus_advantage_over_tokens():
    # ratio 1 (log-probs equal to the rollout's): d loss / d logprob_t = -A_t / (12 tokens), token-mean
    batch = _hand_batch()
    objective = FirstErrorCredit(credit_before=0.3, credit_after=1.5, eps=0.0)
    objective.prepare(batch, logprob_fn=None)
    logprobs = batch.rollout_logprobs.clone().requires_grad_(True)
    out = objective(batch, logprobs, step_totals(batch.loss_mask))
    out.loss.backward()
    expected = torch.zeros(4, 6)
    expected[batch.loss_mask] = -torch.tensor([1.5, 1.5, 1.5, 0.3, -1.5, -1.5, -1.5, -1.5, -1.5, -0.5, -0.5, -0.5]) / 12
    assert torch.allclose(logprobs.grad, expected, atol=1e-7)
    # loss = mean of -A_t over the 12 tokens
    assert out.loss.item() == pytest.approx(-(4.5 + 0.3 - 4.5 - 3.0 - 1.5) / 12)


def test_a_marked_row_without_reward_gets_no_signal():
    batch = _hand_batch()
    batch.rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    objective = FirstErrorCredit()
    stats = objective.prepare(batch, logprob_fn=None)
    assert not batch.loss_mask[1].any()
    assert stats["objective/first_error_rows"] == 1.0  # row 2 only
    assert torch.isfinite(batch.extras["token_advantages"]).all()


def test_negative_credit_is_refused():
    with pytest.raises(ValueError, match=r"^objective.credit_after must be >= 0, got -1.0$"):
        FirstErrorCredit(credit_after=-1.0)


def _cfg(judge: str, rollout: str = "mintrl.rollout.single_turn.SingleTurnRollout"):
    return OmegaConf.create(
        {
            "objective": {"_target_": "mintrl.objective.first_error_credit.FirstErrorCredit"},
            "judge": {"_target_": judge},
            "rollout": {"_target_": rollout},
        }
    )


def test_config_check_needs_a_judge_that_finds_errors():
    check_first_error(_cfg("mintrl.judge.rule.RuleJudge"))
    with pytest.raises(ValueError, match="judge=AlwaysKeepJudge never finds one"):
        check_first_error(_cfg("mintrl.judge.always_keep.AlwaysKeepJudge"))
    with pytest.raises(ValueError, match="needs the single-turn rollout"):
        check_first_error(_cfg("mintrl.judge.rule.RuleJudge", "mintrl.rollout.episodes.EpisodeRollout"))


def test_config_check_refuses_guided_rollouts():
    """A guided rollout's response starts with guide tokens: the objective would count the first error
    from after them while the rollout counts it from the response start, so the pair is refused."""
    for guide in ("mintrl.guide.prefix.PrefixGuide", "mintrl.guide.demonstration.DemonstrationGuide"):
        cfg = _cfg("mintrl.judge.rule.RuleJudge")
        cfg.guide = {"_target_": guide}
        with pytest.raises(ValueError, match=r"objective=FirstErrorCredit .* guide=\w+Guide"):
            check_first_error(cfg)
    cfg = _cfg("mintrl.judge.rule.RuleJudge")
    cfg.guide = {"_target_": "mintrl.guide.base.NoGuide"}  # guide=none adds no rollouts
    check_first_error(cfg)


def test_composed_first_error_with_a_prefix_guide_is_refused():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", "method=first_error", "guide=prefix"])
    with pytest.raises(ValueError) as refused:
        check_config(cfg)
    assert str(refused.value) == (
        "objective=FirstErrorCredit places the judge's first error that many tokens after a rollout's guide "
        "tokens, but the rollout engine counts it from the start of the response, guide tokens included: with "
        "guide=PrefixGuide the credit would fall on the wrong tokens; use guide=none"
    )
