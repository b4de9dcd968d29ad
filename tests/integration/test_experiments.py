"""The rows of the paper's comparison: every method, experiment and former experiment row (ROWS of
test_method_axis: `method=<name>` + preset + overrides) composes with the paper's settings; OPD, SFT+GRPO
and the teacher judge-intervention on the real embedded model; every embedded-model row trains (slow)."""

import inspect
from pathlib import Path

import pytest
import torch
from conftest import ARITHMETIC
from hydra import compose, initialize_config_dir
from hydra._internal.utils import _locate
from hydra.utils import instantiate
from omegaconf import OmegaConf
from test_method_axis import ROWS

from mintrl.build.components import ModelContext, build_components
from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.build.run import run
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.rule import RuleIntervention
from mintrl.intervention.self_privileged import privileged_prompt_ids
from mintrl.judge.always_keep import AlwaysKeepJudge
from mintrl.model import load_policy
from mintrl.model.logprobs import token_logprobs
from mintrl.objective import GRPO, AdvantageRegression, InterventionGRPO, Objective, OnPolicyDistillation
from mintrl.reward import ReasoningGymReward
from mintrl.rollout.single_turn import SingleTurnRollout
from mintrl.sampler import HFSampler
from mintrl.sft import SFTStage, collect_demonstrations

EXPERIMENTS = sorted(
    str(p.relative_to(Path(CONFIG_DIR) / "experiment"))[:-5] for p in (Path(CONFIG_DIR) / "experiment").rglob("*.yaml")
)
METHODS = sorted(p.stem for p in (Path(CONFIG_DIR) / "method").glob("*.yaml"))
# every spelling of a row: each experiment, each method alone, each former experiment's new spelling
SPELLINGS = sorted(
    {f"experiment={name}" for name in EXPERIMENTS}
    | {f"method={m}" for m in METHODS}
    | {r.spelling for r in ROWS.values()}
)
MATH_ROWS = ["base_eval", "grpo", "opd", "sft_grpo", "mentor", "intervention_grpo", "mintrl_proxy", "mintrl_const"]


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def _row(name: str) -> list[str]:
    """The overrides of a row by its former experiment name (test_method_axis.ROWS)."""
    return ROWS[name].spelling.split()


@pytest.mark.parametrize("domain", ["math", "code"])
@pytest.mark.parametrize("row", MATH_ROWS)
def test_every_table_1_row_has_a_spelling_at_both_scales(row, domain):
    embedded, paper = _compose(*_row(f"{domain}/{row}_cpu")), _compose(*_row(f"{domain}/{row}"))
    assert embedded.domain == paper.domain == domain
    assert embedded.model._target_.endswith("embedded_smollm2") and paper.model.path == "Qwen/Qwen3-1.7B"
    assert embedded.objective._target_ == paper.objective._target_


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_row_composes_and_its_objective_instantiates(spelling):
    cfg = _compose(*spelling.split())
    check_config(cfg)
    objective = instantiate(cfg.objective, context=None)
    assert isinstance(objective, Objective)
    assert f"{type(objective).__module__}.{type(objective).__qualname__}" == cfg.objective._target_
    if spelling.startswith(("method=", "experiment=")):
        assert cfg.task_name != "train", "each method and experiment names its runs"


def _unknown_arguments(node, path="") -> list[str]:
    """Config keys that the ``_target_`` they configure does not accept (recursively)."""
    bad = []
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            params = inspect.signature(_locate(node["_target_"])).parameters
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                bad += [f"{path}.{k}" for k in node if not k.startswith("_") and k not in params]
        for key, value in node.items():
            bad += _unknown_arguments(value, f"{path}.{key}" if path else key)
    return bad


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_component_accepts_every_configured_argument(spelling):
    cfg = OmegaConf.to_container(_compose(*spelling.split()), resolve=False)
    assert _unknown_arguments(cfg) == []


@pytest.mark.parametrize("row", MATH_ROWS)
def test_paper_scale_rows_carry_appendix_h_settings(row):
    cfg = _compose(*_row(f"math/{row}"))
    assert cfg.model.path == "Qwen/Qwen3-1.7B" and cfg.teacher_model.path == "Qwen/Qwen3-4B-Instruct-2507"
    assert cfg.data.prompts.chat_template_kwargs.enable_thinking is False
    assert cfg.data.prompts_per_step == 32 and cfg.module.optimizer.lr == 1e-6 and cfg.module.max_grad_norm == 1.0
    r = cfg.rollout
    assert (r.chunk_size, r.max_reviews, r.continuation_len) == (512, 4, 64)
    assert (r.max_response_tokens, r.temperature, r.top_p, r.intervention_steps) == (16384, 1.0, 1.0, 200)
    assert cfg.trainer.max_steps == 500 and cfg.data.prompts.max_prompt_tokens == 2048
    intervened = row in ("mentor", "intervention_grpo", "mintrl_proxy", "mintrl_const")
    if row != "base_eval":  # evaluation only: no training rollouts
        assert (r.n_control, r.n_semi) == ((8, 8) if intervened else (16, 0))
    assert cfg.judge._target_.endswith("SelfPrivilegedJudge" if intervened else "AlwaysKeepJudge")
    if intervened:
        assert cfg.judge.teacher == cfg.intervention.teacher == "Qwen/Qwen3-4B-Instruct-2507"
    if row.startswith("mintrl"):
        assert cfg.objective.beta == 1e-3 and cfg.objective.kappa == (None if row == "mintrl_proxy" else -0.2)
    if row == "sft_grpo":
        assert (
            cfg.sft._target_ == "mintrl.sft.stage.SFTStage"
            and cfg.intervention.teacher == "Qwen/Qwen3-4B-Instruct-2507"
        )
    if row == "base_eval":
        assert cfg.train is False and cfg.data.val_samples_per_prompt == 32
    if row == "opd":
        assert cfg.objective.teacher == "Qwen/Qwen3-4B-Instruct-2507"


def test_guided_paper_rows_carry_their_published_values():
    # LUFFY: github.com/ElliottYan/LUFFY exp_scripts/train.sh (configs/experiment/paper/luffy.yaml)
    luffy = _compose("experiment=paper/luffy")
    assert (luffy.rollout.n_control, luffy.guide.rollouts_per_prompt, luffy.guide.source) == (7, 1, "solution")
    assert (luffy.objective.gamma, luffy.objective.kl_coef, luffy.objective.scale_std) == (0.1, 0.0, False)
    assert (luffy.data.prompts_per_step, luffy.module.minibatches, luffy.module.optimizer.lr) == (128, 2, 1e-6)
    assert luffy.rollout.max_response_tokens == 8192 and luffy.objective.clip_high >= 1e9
    # Prefix-RFT: 1 prefixed rollout in a group of 8, the share decaying from 0.95 over 500 steps
    prefix = _compose("experiment=paper/prefix_rft")
    assert (prefix.rollout.n_control, prefix.guide.rollouts_per_prompt) == (7, 1)
    assert (prefix.guide.schedule, prefix.guide.fraction, prefix.guide.decay_steps) == ("cosine", 0.95, 500)


def test_objective_classes_of_the_rows():
    kinds = {
        row: type(instantiate(_compose(*_row(f"math/{row}_cpu")).objective, context=None))
        for row in MATH_ROWS
        if row != "opd"
    }
    assert kinds["grpo"] is GRPO and kinds["sft_grpo"] is GRPO and kinds["mintrl_const"] is AdvantageRegression
    assert kinds["mentor"] is InterventionGRPO and kinds["intervention_grpo"] is InterventionGRPO


def test_max_steps_must_be_a_multiple_of_updates_per_batch():
    with pytest.raises(ValueError, match=r"trainer.max_steps=5 .* multiple of module.epochs x module.minibatches = 4"):
        check_config(_compose("trainer.max_steps=5", "module.epochs=2", "module.minibatches=2"))
    cfg = _compose("trainer.max_steps=8", "module.epochs=2", "module.minibatches=2")
    check_config(cfg)
    assert cfg.trainer.val_check_interval == 2  # rollout batches: validate once, at the end


@pytest.fixture(scope="module")
def items(tokenizer):
    return ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=8, val_size=2).build("train", tokenizer)


def _on_policy_batch(embedded, tokenizer, items, n=2):
    engine = SingleTurnRollout(
        HFSampler(embedded.model, tokenizer, dtype="fp32"),
        AlwaysKeepJudge(),
        RuleIntervention(ModelContext(embedded)),
        ReasoningGymReward(),
        tokenizer,
        n_control=2,
        n_semi=0,
        max_response_tokens=12,
        progress=False,
    )
    torch.manual_seed(0)
    return engine.generate(items[:n])


def _logprob_fn(model, ids, attn, mask, temperature):
    with torch.no_grad():
        return token_logprobs(model, ids, attn, mask, temperature)[0]


def test_opd_against_itself_has_zero_reverse_kl(embedded, tokenizer, items):
    batch = _on_policy_batch(embedded, tokenizer, items)
    objective = OnPolicyDistillation(ModelContext(embedded), teacher=None)
    objective.setup(embedded.model)
    objective.prepare(batch, _logprob_fn)
    mask = batch.response_mask
    gap = (batch.extras["teacher_logprobs"] - batch.rollout_logprobs)[mask].abs()
    assert gap.max() < 1e-3, "teacher = the policy at step 0: log-probs agree with the sampler's"


def test_opd_privileged_teacher_logprobs_line_up_with_the_response(embedded, tokenizer, items):
    note = "{question}\n(The answer is {reference}.)"
    batch = _on_policy_batch(embedded, tokenizer, items)
    objective = OnPolicyDistillation(ModelContext(embedded), teacher=None, privileged_note=note)
    objective.setup(embedded.model)
    objective.prepare(batch, _logprob_fn)
    for i in (0, 3):
        item = batch.prompts[int(batch.group_index[i])]
        response = batch.input_ids[i, batch.response_mask[i]].tolist()
        prompt = privileged_prompt_ids(tokenizer, note, item.question, item.reference)
        ids = torch.tensor([prompt + response])
        target = torch.zeros_like(ids, dtype=torch.bool)
        target[0, len(prompt) :] = True
        direct = _logprob_fn(embedded.model, ids, torch.ones_like(ids), target, 1.0)[0, len(prompt) :]
        assert torch.allclose(batch.extras["teacher_logprobs"][i, batch.response_mask[i]], direct, atol=1e-4)
    # at theta = pi_t the token-mean loss equals the mean per-token reverse KL estimate
    from mintrl.objective import step_totals

    out = objective(batch, batch.rollout_logprobs.clone(), step_totals(batch.loss_mask))
    assert out.loss.item() == pytest.approx(out.metrics["objective/reverse_kl"].item(), abs=1e-5)


def test_opd_refuses_a_teacher_with_another_vocabulary(embedded, tokenizer, tmp_path):
    other = load_policy(str(_save_with_extra_token(embedded, tmp_path)))
    assert len(other.tokenizer) == len(tokenizer) + 1
    objective = OnPolicyDistillation(ModelContext(embedded), teacher=str(tmp_path / "teacher"))
    with pytest.raises(ValueError, match="different vocabulary"):
        objective.setup(embedded.model)


def _save_with_extra_token(embedded, tmp_path):
    import copy

    folder = tmp_path / "teacher"
    tok = copy.deepcopy(embedded.tokenizer)
    tok.add_tokens(["<extra_token_for_test>"])
    embedded.model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_rule_demonstrations_are_complete_and_rewarded(embedded, tokenizer, items):
    demos = collect_demonstrations(
        RuleIntervention(ModelContext(embedded)),
        ReasoningGymReward(),
        items[:3],
        tokenizer,
        per_prompt=2,
        max_new_tokens=32,
    )
    assert [d.group for d in demos] == [0, 0, 1, 1, 2, 2]
    for d in demos:
        assert (
            tokenizer.decode(d.response_ids, skip_special_tokens=True)
            == f"The answer is <answer>{items[d.group].reference}</answer>"
        )
        assert d.finished and d.reward == 1.0 and d.behaviour == [0.0] * len(d.response_ids)
    with pytest.raises(ValueError, match="sft.steps"):
        SFTStage(steps=0)


def test_teacher_judge_and_intervention_share_one_loaded_model(tmp_path):
    c = build_components(
        _compose("judge=teacher", "intervention=teacher", "teacher_model.path=embedded"), trainer=False
    )
    judge_model = c.rollout.judge.inner.sampler.model
    assert judge_model is c.rollout.intervention.sampler.model, "loaded once per run"
    assert judge_model is not c.module.policy and not any(p.requires_grad for p in judge_model.parameters())
    assert c.rollout.intervention.shared_vocab


@pytest.mark.parametrize("row", MATH_ROWS)
def test_code_rows_differ_from_math_rows_only_where_the_paper_says(row):
    math_cfg, code_cfg = _compose(*_row(f"math/{row}")), _compose(*_row(f"code/{row}"))
    assert code_cfg.domain == "code" and code_cfg.reward._target_ == "mintrl.reward.code.CodeReward"
    assert (
        code_cfg.data.prompts._target_ == "mintrl.data.code.CodePrompts"
        and code_cfg.data.prompts.chat_template_kwargs.enable_thinking is False
    )
    r = code_cfg.rollout
    assert (r.chunk_size, r.max_reviews, r.continuation_len) == (128, 4, 64)  # Table 6, code
    if row == "mintrl_const":
        assert code_cfg.objective.kappa == -0.1 and math_cfg.objective.kappa == -0.2
    if code_cfg.judge._target_.endswith("SelfPrivilegedJudge"):
        assert code_cfg.judge.prompt == "judge_code" and math_cfg.judge.prompt == "judge_math"
    a, b = (OmegaConf.to_container(c, resolve=False) for c in (math_cfg, code_cfg))
    if row == "mintrl_const":
        a["objective"]["kappa"] = b["objective"]["kappa"]
    if "prompt" in a["judge"]:
        a["judge"]["prompt"] = b["judge"]["prompt"]  # both judge_${domain}
    a["rollout"]["chunk_size"] = b["rollout"]["chunk_size"]
    for key in (
        "model",
        "teacher_model",
        "objective",
        "module",
        "trainer",
        "judge",
        "intervention",
        "rollout",
        "sft",
        "train",
    ):
        assert a.get(key) == b.get(key), key


@pytest.mark.slow
@pytest.mark.parametrize("row", [f"math/{r}" for r in MATH_ROWS] + [f"code/{r}" for r in MATH_ROWS])
def test_every_cpu_row_trains_two_steps(row, tmp_path):
    overrides = [
        *_row(f"{row}_cpu"),
        f"paths.output_dir={tmp_path}",
        "trainer.max_steps=2",
        "data.prompts_per_step=2",
        "data.prompts.val_size=4",
        "data.val_samples_per_prompt=1",
        "rollout.max_response_tokens=24",
        "rollout.chunk_size=8",
        "rollout.continuation_len=8",
        "rollout.progress=false",
    ]
    if row.endswith("sft_grpo"):
        overrides += ["sft.prompts=8", "sft.steps=2", "sft.rows_per_step=4"]
    if row == "code/sft_grpo":  # 24-token programs never pass: keep every demonstration to exercise the stage
        overrides += ["sft.min_reward=-1"]
    summary = run(_compose(*overrides))
    assert summary["val_reward_first"] is not None
    if row.endswith("base_eval"):
        assert summary["steps"] == 0
        return
    assert summary["steps"] == 2 and (tmp_path / "hf_policy" / "model.safetensors").is_file()
    if row.endswith("sft_grpo"):
        assert summary["sft"]["kept"] > 0 and summary["sft"]["steps"] == 2 and (tmp_path / "hf_sft_policy").is_dir()
