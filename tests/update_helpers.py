"""Shared test data for optimizer-update tests (tests/unit/test_updates.py, tests/integration/
test_updates_trainer.py): a hand-built rollout batch on a tiny model and the objectives under test."""

import copy

import torch

from mintrl.core.batch import RolloutBatch
from mintrl.model.logprobs import token_logprobs
from mintrl.objective import (
    GRPO,
    LUFFY,
    AdvantageRegression,
    FirstErrorCredit,
    InterventionGRPO,
    OnPolicyDistillation,
    SupervisedNLL,
)


def rollout_batch(model, n=8, seed=0, temperature=0.8):
    """8 rollouts of 2 prompts with different prompt and response lengths, an intervention token in
    some guided rows, rollout-time log-probs a little off the current policy (ratios != 1), and a
    judge-marked first error in three of the four failed rows (first-error credit)."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = [3, 4, 2, 5, 3, 3, 4, 2][:n]
    resp_lens = [5, 2, 7, 1, 4, 6, 3, 5][:n]
    width = max(p + r for p, r in zip(prompt_lens, resp_lens))
    ids = torch.zeros(n, width, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.long)
    resp = torch.zeros(n, width, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens)):
        ids[i, : p + r] = torch.randint(3, 128, (p + r,), generator=g)
        attn[i, : p + r] = 1
        resp[i, p : p + r] = True
    inter = torch.zeros_like(resp)
    for i in (2, 5, 7):
        inter[i, prompt_lens[i] + 1] = True
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, attn, resp, temperature)
    rollout_lp = (lp + 0.3 * torch.randn(lp.shape, generator=g)) * resp
    behaviour = torch.where(inter, torch.zeros_like(rollout_lp), rollout_lp)
    return RolloutBatch(
        input_ids=ids,
        attention_mask=attn,
        response_mask=resp,
        intervention_mask=inter,
        rollout_logprobs=rollout_lp,
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0][:n]),
        group_index=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1][:n]),
        is_control=torch.tensor([True, True, False, False] * 2)[:n],
        num_groups=2,
        finished=torch.tensor([True, True, True, False, True, True, True, True][:n]),
        behaviour_logprobs=behaviour,
        temperature=temperature,
        step=3,
        first_error=torch.tensor([-1, 1, -1, -1, 2, 0, -1, -1][:n]),
    )


OBJECTIVES = {
    "grpo-token-mean-kl-k3": lambda: GRPO(kl_coef=0.1, kl_estimator="k3", mask_truncated=True),
    "dr-grpo-seq-mean-token-sum": lambda: GRPO(
        scale_std=False, aggregation="seq-mean-token-sum", kl_coef=0.05, kl_estimator="k2", token_sum_norm=8.0
    ),
    "grpo-seq-mean-token-mean-k1": lambda: GRPO(
        aggregation="seq-mean-token-mean", kl_coef=0.05, kl_estimator="k1", dual_clip=3.0
    ),
    "mintrl-const": lambda: AdvantageRegression(beta=0.1, kappa=-0.2),
    "mintrl-proxy": lambda: AdvantageRegression(beta=0.1, kappa=None),
    "intervention-grpo": lambda: InterventionGRPO(importance="behaviour", semi_advantage="group"),
    "mentor": lambda: InterventionGRPO(importance="rollout", semi_advantage="mentor", clip_high=0.28, dual_clip=3.0),
    "first-error-seq-mean-token-sum": lambda: FirstErrorCredit(
        credit_before=0.3, credit_after=1.2, aggregation="seq-mean-token-sum", kl_coef=0.05
    ),
    "sft": lambda: SupervisedNLL(),
    "luffy": lambda: LUFFY(gamma=0.1),
    "opd": None,  # make_objective builds it around the model (its teacher is a perturbed copy)
}


def _opd_against(model):
    """OPD with a white-box teacher that is a perturbed copy of ``model`` (non-zero reverse KL)."""
    objective = OnPolicyDistillation(context=None)
    teacher = copy.deepcopy(model)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.05 * torch.randn_like(p))
    objective.teacher = teacher.eval()
    return objective


def make_objective(name: str, model: torch.nn.Module):
    """The objective ``name`` of OBJECTIVES, with what it needs from ``model`` (OPD: a teacher)."""
    if name == "opd":
        return _opd_against(model)
    return OBJECTIVES[name]()
