"""Known failure cases of RL-for-LLM frameworks, tried against mintrl (issue 18).

Every item has a test that failed on the code before its fix, except item 7, whose cases already
held and are kept as guards; other cases that already held are marked where they are. The values
asserted are computed by hand, by enumeration, or in float64 next to the float32 code under test.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.metrics.pass_at_k import PassAtK, pass_at_k
from mintrl.model import load_policy
from mintrl.model.logprobs import token_logprobs
from mintrl.model.shared_prompts import shared_prompt_hidden
from mintrl.objective import group_advantages, kl_penalty, mentor_advantages
from mintrl.reward import MathVerifyReward, ReasoningGymReward, Reward, extract_answer, score_rewards
from mintrl.rollout.guards import GuardedReward

# --- 1. all-equal groups give exactly zero advantage -------------------------------------------------


@pytest.mark.parametrize("size", [2, 7, 8, 16, 64, 1000])
@pytest.mark.parametrize("value", [0.95, 0.01, 0.1, 1 / 3, 0.7, -0.3, 123.456])
def test_group_advantages_all_equal_group_is_exactly_zero(size, value):
    rewards = torch.full((size,), value, dtype=torch.float32)
    group = torch.zeros(size, dtype=torch.long)
    valid = torch.ones(size, dtype=torch.bool)
    for scale_std in (True, False):
        adv = group_advantages(rewards, group, 1, valid, scale_std=scale_std, eps=1e-6)
        assert torch.equal(adv, torch.zeros(size)), (size, value, scale_std, adv[:3].tolist())


def test_group_advantages_mixed_group_matches_float64():
    rewards = torch.tensor([0.0] + [0.95] * 7, dtype=torch.float32)
    adv = group_advantages(rewards, torch.zeros(8, dtype=torch.long), 1, torch.ones(8, dtype=torch.bool), eps=1e-6)
    r = rewards.double()
    expected = (r - r.mean()) / (r.std() + 1e-6)  # Bessel-corrected, as the docstring says
    # by hand: mean 0.83125, std = sqrt((0.83125^2 + 7 * 0.11875^2) / 7) = 0.3359...; a_0 = -2.4749
    assert torch.isfinite(adv).all()
    assert adv.double().tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert adv[0].item() == pytest.approx(-0.83125 / ((0.83125**2 + 7 * 0.11875**2) / 7) ** 0.5, abs=1e-5)


def test_group_advantages_equal_groups_next_to_a_mixed_group_and_invalid_rows():
    # group 0: eight 0.95 and one invalid NaN row; group 1: 0.01 x 5; group 2: 0 and 1
    rewards = torch.tensor([0.95] * 8 + [float("nan")] + [0.01] * 5 + [0.0, 1.0], dtype=torch.float32)
    group = torch.tensor([0] * 9 + [1] * 5 + [2, 2])
    valid = torch.isfinite(rewards)
    adv = group_advantages(rewards, group, 3, valid, eps=1e-6)
    assert torch.equal(adv[:14], torch.zeros(14))
    s = 0.5**0.5  # std of {0, 1}
    assert adv[14:].tolist() == pytest.approx([-0.5 / (s + 1e-6), 0.5 / (s + 1e-6)])


def test_mentor_advantages_equal_control_rewards_are_exactly_zero():
    # 16 controls all 0.95 and 4 guided rows (0.95 -> 0 above baseline, 1.0 -> alpha * 0.05)
    rewards = torch.tensor([0.95] * 16 + [0.95, 1.0, 0.0, 0.95], dtype=torch.float32)
    control = torch.tensor([True] * 16 + [False] * 4)
    adv = mentor_advantages(
        rewards, torch.zeros(20, dtype=torch.long), control, 1, torch.ones(20, dtype=torch.bool), alpha=0.5
    )
    assert torch.equal(adv[:16], torch.zeros(16))
    assert adv[16].item() == 0.0 and adv[18].item() == 0.0 and adv[19].item() == 0.0
    assert adv[17].item() == pytest.approx(0.5 * 0.05, abs=1e-7)


# --- 2. the k3 KL estimate is never negative ---------------------------------------------------------


def test_k3_kl_is_non_negative_and_accurate_for_tiny_log_ratios():
    # logp - ref = -1e-6, i.e. d = ref - logp = +1e-6: exp(d) - d - 1 in float32 gave -5.96e-8
    for logp, ref in ((-1e-6, 0.0), (0.0, 1e-6), (0.0, -1e-6)):
        k3 = kl_penalty(torch.tensor([logp]), torch.tensor([ref]), "k3")
        assert k3.dtype == torch.float32
        d = float(torch.tensor([ref]) - torch.tensor([logp]))  # the float32 d, +-9.99999997e-07
        assert k3.item() >= 0.0
        assert k3.item() == pytest.approx(d * d / 2 + d**3 / 6, rel=1e-6)  # exp(d) - 1 - d = d^2/2 + d^3/6 + ...


def test_k3_kl_is_non_negative_on_a_dense_grid_and_matches_float64():
    tiny = torch.logspace(-12, -1, 500)
    d = torch.cat([torch.linspace(-25, 25, 20001), tiny, -tiny, tiny, -tiny])
    logp = torch.randn(d.numel(), generator=torch.Generator().manual_seed(0)).float() - 3.0
    logp[-1000:] = 0.0  # the last tiny ratios are taken at logp = 0, where d keeps all its digits
    ref = logp + d.float()
    k3 = kl_penalty(logp, ref, "k3")
    assert (k3 >= 0).all(), k3.min().item()
    dd = (ref.double() - logp.double()).clamp(-20, 20)  # the d that float32 actually holds
    expected = torch.expm1(dd) - dd
    assert torch.allclose(k3.double(), expected, rtol=1e-6, atol=0.0)


def test_k3_kl_gradient_is_one_minus_exp_d():
    logp = torch.tensor([-1.0, 0.0], requires_grad=True)
    ref = torch.tensor([-2.0, -1e-6])
    kl_penalty(logp, ref, "k3").sum().backward()
    # d/dlogp (exp(d) - 1 - d) with d = ref - logp: -(exp(d) - 1); at d = -1e-6 that is 1e-6 - 5e-13
    d = float(ref[1])
    assert logp.grad.tolist() == pytest.approx([1 - math.exp(-1.0), -math.expm1(d)], rel=1e-6)


# --- 3. boxed answers, GSM8K's #### marker, numeric equality -----------------------------------------


def _math(response: str, gold: str) -> float:
    return MathVerifyReward()([response], [SimpleNamespace(reference=gold)])[0]


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        (r"\fbox{42}", "42", 1.0),
        (r"\fbox{-3}", "-3", 1.0),
        (r"\fbox{3.5}", "3.5", 1.0),
        (r"The final answer is \fbox{42}.", "42", 1.0),
        (r"First \boxed{41}, then on reflection \boxed{42}", "42", 1.0),  # the last box wins
        (r"First \boxed{41}, then on reflection \boxed{42}", "41", 0.0),
        (r"so \boxed{\frac{1}{2^{3}}} and 7 more", r"\frac{1}{8}", 1.0),  # nested groups kept
        (r"\boxed{41} and then \boxed{42", "42", 0.0),  # the unclosed box is no answer: 41 is
        (r"\boxed{41} and then \boxed{42", "41", 1.0),
        (r"3 + 39 = 42, so \boxed{42", "42", 0.0),  # an unclosed box only: no answer at all
        ("She pays 12 * 24 = 288.\n#### 288\nThat is 3 boxes and 17 eggs left over.", "288", 1.0),
        ("#### 1,250 dollars, 3 times 4", "1250", 1.0),
        (r"\boxed{\sqrt{17}}", "4.123105625617661", 1.0),  # numeric evaluation
        (r"\boxed{\frac{1}{2^{99}}}", r"\frac{1}{2^{98}}", 0.0),  # tiny but different (relative error 1)
        (r"\boxed{\pm 2021}", "2021", 0.0),
        (r"<answer>7</answer> although \boxed{8}", "7", 1.0),  # an <answer> tag still comes first
    ],
)
def test_math_reward_reads_the_last_complete_box(response, gold, expected):
    assert _math(response, gold) == expected


@pytest.mark.parametrize(
    "response, answer",
    [
        (r"so \boxed{\frac{1}{2}} since 2 halves", r"\frac{1}{2}"),
        (r"\fbox{-3} after 7 tries", "-3"),
        (r"\boxed{41} then \boxed{ 42 } 99", "42"),
        (r"\boxed{\{1, 2\}} 5", r"\{1, 2\}"),
        (r"\boxed{\boxed{42}} 5", "42"),  # the box opened last wins
        (r"so \boxed{42", None),
        (r"\boxed{41} then \boxed{42", "41"),
        ("#### 288\nThat is 3 boxes and 17 eggs.", "288"),
        ("3 + 4 = 7, so 1,200 apples", "1200"),
    ],
)
def test_extract_answer_reads_boxes_and_the_gsm8k_marker(response, answer):
    assert extract_answer(response) == answer


def _gym_entry(task: str) -> SimpleNamespace:
    import reasoning_gym

    return SimpleNamespace(entry=reasoning_gym.create_dataset(task, size=1, seed=0)[0])


def test_reasoning_gym_reward_reads_boxes():
    reward = ReasoningGymReward()
    fraction = _gym_entry("fraction_simplification")  # answer $\dfrac{79}{173}$
    gsm = _gym_entry("gsm_symbolic")  # answer 28080
    assert fraction.entry["answer"] == r"$\dfrac{79}{173}$" and gsm.entry["answer"] == "28080"
    responses = [
        r"The fraction reduces to \boxed{\frac{79}{173}} since 79 is prime.",
        r"So the total is \boxed{28080}. Check: 12 workers and 5 days.",
        "Total: 28080 dollars.\n#### 28080\nThat took 3 steps.",
        r"\boxed{28081} (or 28080 at 3 days)",
    ]
    assert reward(responses, [fraction, gsm, gsm, gsm]) == [1.0, 1.0, 1.0, 0.01]


# --- 4. a reward that returns the wrong number of values stops the run --------------------------------


class _OneValueReward(Reward):
    """A misconfigured reward: one value whatever the number of responses."""

    def __call__(self, responses, items):
        return [1.0]


def test_guarded_reward_with_the_wrong_count_is_a_configuration_error():
    items = [SimpleNamespace(reference="1")] * 3
    with pytest.raises(ValueError, match="returned 1 rewards for 3 responses"):
        score_rewards(_OneValueReward(), ["a", "b", "c"], items)  # the unguarded contract
    guarded = GuardedReward(_OneValueReward(), timeout_s=5.0)
    with pytest.raises(ValueError, match="returned 1 rewards for 3 responses"):
        score_rewards(guarded, ["a", "b", "c"], items)  # what the rollout calls

    # a reward that answers a single response with two values: the same error, in the row-by-row retry
    def flaky_then_two(responses, items):
        if len(responses) > 1:
            raise RuntimeError("batch scorer crashed")  # a transient fault: retried row by row
        return [0.5, 0.5]

    with pytest.raises(ValueError, match="returned 2 rewards for 1 responses"):
        GuardedReward(flaky_then_two)(["a", "b"], items[:2])


# --- 6. pass@k is the exact unbiased estimator; k > n is an error ------------------------------------


def _pass_at_k_by_enumeration(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) that hold a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(1 for s in subsets if min(s) < c), len(subsets))


def test_pass_at_k_edge_cases_by_hand():
    # these held before the fix (guards): the estimator was already exact; the metric and the config were not
    assert pass_at_k(4, 1, 4) == 1.0  # every 4-subset of 4 holds the correct one (a bootstrap gives 0.684)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == 0.25 and pass_at_k(4, 1, 2) == 0.5  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(1, 1, 1) == 1.0
    with pytest.raises(ValueError, match=r"n=2, c=0, k=5"):
        pass_at_k(2, 0, 5)


def test_pass_at_k_equals_enumeration_for_every_small_case():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = _pass_at_k_by_enumeration(n, c, k)
                assert exact == 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_pass_at_k_metric_refuses_k_above_the_samples_per_problem():
    metric = PassAtK(ks=[1, 5])
    with pytest.raises(ValueError, match=r"k=5 .* n=2"):
        metric.update(torch.tensor([[0.0, 0.0], [1.0, 0.0]]))  # 2 samples per problem


def test_config_refuses_val_pass_at_k_above_val_samples_per_prompt():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "paths.output_dir=/tmp/mintrl-test",
                "module.val_pass_at_k=[1,5]",
                "data.val_samples_per_prompt=2",
            ],
        )
    with pytest.raises(ValueError, match=r"module.val_pass_at_k.*k=5.*data.val_samples_per_prompt=2"):
        check_config(cfg)


# --- 7. entropy and token means never count padding --------------------------------------------------
# Held before (guards): the logged train/policy_entropy is masked by the response mask; validation logs
# no entropy (val/response_len counts response tokens); RAIL's pool entropy (test_known_failures_run.py)
# reads the rollouts' own token lists, which hold no padding.


def _tiny_gpt2() -> torch.nn.Module:
    """A 2-layer random GPT-2 (absolute position embeddings), 64-token vocabulary."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=64,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,  # no dropout: PolicyModule puts the policy in train mode
    )
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # sharper than a random init's near-uniform predictions (entropies differ by position)
        model.transformer.wte.weight.mul_(20.0)
        model.transformer.wpe.weight.mul_(20.0)
    return model


def _entropy_by_hand(model, ids: list[int], positions: list[int]) -> list[float]:
    """Entropy (nats) of the distribution predicting ``ids[j]`` for each ``j``, from one unpadded forward."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()  # [len, V]
    logp = torch.log_softmax(logits, -1)
    return [float(-(logp[j - 1].exp() * logp[j - 1]).sum()) for j in positions]


def test_train_entropy_counts_the_three_real_tokens_only():
    from functools import partial

    from mintrl.core.batch import RolloutBatch
    from mintrl.objective import GRPO
    from mintrl.objective.aggregation import step_totals
    from mintrl.training.module import PolicyModule

    model = _tiny_gpt2()
    real = [5, 9, 17, 33, 4]  # prompt [5, 9], response [17, 33, 4]
    pad = 7  # an ordinary token id: the model gives pad positions a real (non-zero) entropy
    ids = torch.tensor([real + [pad] * 5])
    attn = torch.tensor([[1] * 5 + [0] * 5])
    resp = torch.tensor([[False, False, True, True, True] + [False] * 5])
    batch = RolloutBatch(
        input_ids=ids,
        attention_mask=attn,
        response_mask=resp,
        intervention_mask=torch.zeros_like(resp),
        rollout_logprobs=torch.zeros(1, 10),
        rewards=torch.tensor([1.0]),
        group_index=torch.tensor([0]),
        is_control=torch.tensor([True]),
        num_groups=1,
        finished=torch.tensor([True]),
        temperature=1.0,
    )
    objective = GRPO()
    module = PolicyModule(model, objective, partial(torch.optim.SGD, lr=0.0), share_prompts=False)
    objective.prepare(batch, module.frozen_logprobs)
    _, metrics = module.accumulate(batch, step_totals(batch.loss_mask), backward=lambda loss: None)
    expected = sum(_entropy_by_hand(model, real, [2, 3, 4])) / 3
    padded_mean = sum(_entropy_by_hand(model, real + [pad] * 5, list(range(2, 10)))) / 8  # what counting pads gives
    assert abs(expected - padded_mean) > 1e-3  # the check can tell the two apart
    assert metrics["train/policy_entropy"] == pytest.approx(expected, abs=1e-5)


# --- 8. left padding: position ids follow the attention mask ----------------------------------------


def _tiny_llama() -> torch.nn.Module:
    """A 2-layer random Llama (rotary positions), 64-token vocabulary."""
    from conftest import tiny_llama

    return tiny_llama(64, 64)


TINY_MODELS = {"gpt2-absolute": _tiny_gpt2, "llama-rotary": _tiny_llama}
# rows: (prompt, response); rows 0 and 2 share a prompt (a group), so the shared-prompt forward runs
ROWS = [([5, 9, 11], [17, 33, 4, 8]), ([6, 12, 13, 14, 15, 20], [21, 22]), ([5, 9, 11], [30, 31, 32])]
PAD = 0


def _left_padded(rows):
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    attn = torch.zeros(len(rows), width, dtype=torch.long)
    target = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (p, r) in enumerate(rows):
        n = len(p) + len(r)
        ids[i, width - n :] = torch.tensor(p + r)
        attn[i, width - n :] = 1
        target[i, width - len(r) :] = True
    return ids, attn, target


def _alone(model, prompt, response) -> torch.Tensor:
    """Log-probs of ``response`` after ``prompt``, the row scored alone (no padding), ``[len(response)]``."""
    ids = torch.tensor([prompt + response])
    target = torch.zeros_like(ids, dtype=torch.bool)
    target[0, len(prompt) :] = True
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), target)
    return lp[0, len(prompt) :]


@pytest.mark.parametrize("kind", list(TINY_MODELS))
@pytest.mark.parametrize("share_prompts", [False, True], ids=["plain-forward", "shared-prompt-forward"])
def test_left_padded_rows_score_as_they_do_alone(kind, share_prompts):
    model = TINY_MODELS[kind]()
    ids, attn, target = _left_padded(ROWS)
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, attn, target, share_prompts=share_prompts)
        if share_prompts:  # the shared path really ran: rows 0 and 2 share their (unpadded) prompt
            assert shared_prompt_hidden(model.get_decoder(), ids, attn, target) is not None
    for i, (p, r) in enumerate(ROWS):
        alone = _alone(model, p, r)
        got = lp[i, ids.shape[1] - len(r) :]
        assert torch.allclose(got, alone, atol=1e-4), (kind, i, float((got - alone).abs().sum()))


@pytest.mark.parametrize("kind", list(TINY_MODELS))
def test_hf_sampler_log_probs_of_left_padded_prefixes_equal_scoring_alone(kind):
    from mintrl.sampler.hf import HFSampler

    model = TINY_MODELS[kind]()
    tokenizer = SimpleNamespace(pad_token_id=PAD, eos_token_id=2)
    sampler = HFSampler(model, tokenizer, continuation_cache_mib=0, dtype="fp32")
    prefixes = [p for p, _ in ROWS]
    torch.manual_seed(1)
    gen = sampler.generate(prefixes, 6)
    for p, tokens, lps in zip(prefixes, gen.token_ids, gen.logprobs):
        alone = _alone(model, p, tokens.tolist())
        assert torch.allclose(lps, alone, atol=1e-4), (kind, p, float((lps - alone).abs().sum()))

    # continuing from kept KV (the rollout loop's chunks): the reused cache is left-padded too
    sampler = HFSampler(model, tokenizer, continuation_cache_mib=64, dtype="fp32")
    first = sampler.generate(prefixes, 3, cache_keys=[0, 1, 2])
    nexts = [p + t.tolist() for p, t, f in zip(prefixes, first.token_ids, first.finished) if not f]
    keys = [k for k, f in enumerate(first.finished) if not f]
    assert nexts, "the test needs an unfinished row"
    second = sampler.generate(nexts, 4, cache_keys=keys)
    assert sampler.reused_tokens > 0
    for p, tokens, lps in zip(nexts, second.token_ids, second.logprobs):
        alone = _alone(model, p, tokens.tolist())
        assert torch.allclose(lps, alone, atol=1e-4), (kind, p, float((lps - alone).abs().sum()))


# --- 9. a bad model path names what is wrong -------------------------------------------------------


@pytest.mark.parametrize("path", ["/nonexistent", "./no/such/folder", "no/such/folder"])
def test_missing_model_folder_is_named(path):
    with pytest.raises(FileNotFoundError, match=f"model.path={path}: no such folder, and not a hub model id"):
        load_policy(path)


def test_model_folder_without_config_or_weights_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model.path=.*: the folder has no config.json and no weights"):
        load_policy(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"model.path=.*: the folder has no weights \(model.safetensors"):
        load_policy(str(tmp_path))
    (tmp_path / "config.json").unlink()
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"model.path=.*: the folder has no config.json$"):
        load_policy(str(tmp_path))
