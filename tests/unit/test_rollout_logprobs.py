"""Rollout log-probs in the trainer's numerics: when they are recomputed, what is replaced, the
mismatch logged; a stale batch's proximal recompute replaces nothing; the LM head in fp32 under bf16
autocast; the CPU's bf16 check."""

from __future__ import annotations

import math

import pytest
import torch

from mintrl.core.batch import Provenance, RolloutBatch
from mintrl.core.precision import cpu_has_fast_bf16
from mintrl.model.logprobs import head_logits
from mintrl.objective.off_policy import PROXIMAL_LOGPROBS, proximal_logprobs
from mintrl.training.rollout_logprobs import (
    adopt_trainer_logprobs,
    keep_proximal_logprobs,
    needs_recompute,
    sampler_mismatch,
)

P, IV, G, N = int(Provenance.POLICY), int(Provenance.INTERVENTION), int(Provenance.GUIDE), int(Provenance.NONE)


@pytest.mark.parametrize(
    "mode, exact, precision, expected",
    [
        ("auto", True, "32-true", False),  # the fp32 policy itself, an fp32 trainer: nothing to recompute
        ("auto", True, "32", False),
        ("auto", False, "32-true", True),  # a bf16 copy or vLLM
        ("auto", True, "bf16-mixed", True),  # an fp32 sampler next to a bf16-mixed trainer
        ("never", False, "bf16-mixed", False),
        ("always", True, "32-true", True),
    ],
)
def test_when_the_trainer_recomputes(mode, exact, precision, expected):
    assert needs_recompute(mode, exact, precision) is expected


def test_mismatch_is_the_mean_abs_gap_and_the_k3_kl_over_masked_tokens():
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
    sampler = torch.tensor([[-1.5, -2.0, -9.0], [-0.3, -2.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    d = [0.5, 0.0, 0.2, -1.0]  # trainer - sampler on the masked tokens
    out = sampler_mismatch(trainer, sampler, mask)
    assert out["train/sampler_mismatch_abs"] == pytest.approx(sum(abs(x) for x in d) / 4)
    assert out["train/sampler_mismatch_kl"] == pytest.approx(sum(math.exp(x) - x - 1 for x in d) / 4)
    empty = sampler_mismatch(trainer, sampler, torch.zeros_like(mask))
    assert empty == {"train/sampler_mismatch_abs": 0.0, "train/sampler_mismatch_kl": 0.0}


def _one_row(rollout: torch.Tensor, behaviour: torch.Tensor) -> RolloutBatch:
    """Row 0: prompt, policy, intervention, guide, padding."""
    return RolloutBatch(
        input_ids=torch.tensor([[5, 6, 7, 8, 0]]),
        attention_mask=torch.tensor([[1, 1, 1, 1, 0]]),
        rollout_logprobs=rollout.clone(),
        rewards=torch.tensor([1.0]),
        group_index=torch.tensor([0]),
        is_control=torch.tensor([True]),
        num_groups=1,
        provenance=torch.tensor([[N, P, IV, G, N]], dtype=torch.int8),
        behaviour_logprobs=behaviour.clone(),
    )


def test_adopted_logprobs_replace_scored_tokens_and_policy_behaviour_only():
    """Row 0: prompt, policy, intervention, guide, padding. The trainer's values replace the rollout
    log-probs of the three scored kinds and the behaviour log-probs of the policy token only (the
    intervention wrote its own token: its behaviour value stays); prompt and padding keep theirs."""
    rollout = torch.tensor([[0.0, -1.0, -2.0, -3.0, 0.0]])
    behaviour = torch.tensor([[0.0, -1.0, -0.25, 0.0, 0.0]])
    batch = _one_row(rollout, behaviour)
    fresh = torch.tensor([[-7.0, -1.5, -2.5, -3.5, -7.0]])
    stats = adopt_trainer_logprobs(batch, fresh)
    assert torch.equal(batch.rollout_logprobs, torch.tensor([[0.0, -1.5, -2.5, -3.5, 0.0]]))
    assert torch.equal(batch.behaviour_logprobs, torch.tensor([[0.0, -1.5, -0.25, 0.0, 0.0]]))
    assert stats["train/sampler_mismatch_abs"] == pytest.approx(0.5)  # the one policy token
    assert stats["train/sampler_mismatch_kl"] == pytest.approx(math.exp(-0.5) + 0.5 - 1)


def test_a_proximal_recompute_replaces_no_behaviour_logprob():
    """A stale batch: the trainer's values are kept as the proximal policy's beside the sampling
    version's rollout and behaviour log-probs, which stay as they were; the shift is logged."""
    rollout = torch.tensor([[0.0, -1.0, -2.0, -3.0, 0.0]])
    behaviour = torch.tensor([[0.0, -1.0, -0.25, 0.0, 0.0]])
    batch = _one_row(rollout, behaviour)
    fresh = torch.tensor([[-7.0, -1.5, -2.5, -3.5, -7.0]])
    stats = keep_proximal_logprobs(batch, fresh)
    assert torch.equal(batch.rollout_logprobs, rollout) and torch.equal(batch.behaviour_logprobs, behaviour)
    assert batch.extras[PROXIMAL_LOGPROBS] is fresh and proximal_logprobs(batch) is fresh
    assert stats == {
        "train/proximal_shift_abs": pytest.approx(0.5),  # the one policy token
        "train/proximal_shift_kl": pytest.approx(math.exp(-0.5) + 0.5 - 1),
    }


def test_lm_head_runs_in_fp32_under_bf16_autocast():
    """Under bf16 autocast an fp32 head gives the fp32 logits bit for bit (not bf16-rounded ones:
    at logits near 20 bf16's spacing is 0.125); a bf16 head runs as it is, cast to fp32."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 32, bias=False)
    hidden = torch.randn(4, 16) * 8
    exact = head(hidden)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = head_logits(head, hidden)
        rounded = head(hidden).float()
    assert under.dtype == torch.float32 and torch.equal(under, exact)
    assert not torch.equal(rounded, exact)  # what the head gave before: autocast's bf16 product
    half = torch.nn.Linear(16, 32, bias=False).to(torch.bfloat16)
    assert torch.equal(head_logits(half, hidden.to(torch.bfloat16)), half(hidden.to(torch.bfloat16)).float())


def test_cpu_bf16_check_reads_the_native_bf16_flags(tmp_path):
    with_flag = tmp_path / "with"
    with_flag.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t: fpu\n")
    without = tmp_path / "without"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512bw\n")
    amx = tmp_path / "amx"
    amx.write_text("flags\t\t: fpu amx_bf16 amx_tile\n")
    assert cpu_has_fast_bf16(str(with_flag)) and cpu_has_fast_bf16(str(amx))
    assert not cpu_has_fast_bf16(str(without)) and not cpu_has_fast_bf16(str(tmp_path / "missing"))
