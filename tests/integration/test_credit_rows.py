"""First-error credit and intervention SFT (issue 22 items 4-5) on the real embedded tokenizer and
model: the judge's cut of a hand response, the InT example spliced from it (exact ids, loss mask),
the rollout engine's first-error marks, and two-step runs of method=int and method=first_error."""

import pytest
import torch
from conftest import ARITHMETIC, TINY_RUN
from hydra import compose, initialize_config_dir

from mintrl.build.components import ModelContext, build_components
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.core.batch import collate_rollouts
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.base import InterventionRequest
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.objective import SupervisedNLL
from mintrl.rollout.error_location import locate_first_errors
from mintrl.sft import intervention_example

# step 0 holds a true claim, step 1 the first false one ("2 + 2 = 5"), step 2 a wrong answer
RESPONSE = "Step: 1 + 1 = 2.\n\nThen 2 + 2 = 5.\n\n<answer>9</answer>"


@pytest.fixture(scope="module")
def items(tokenizer):
    return ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=4, val_size=2).build("train", tokenizer)


def test_intervention_example_of_a_hand_rollout(embedded, tokenizer, items):
    ids = tokenizer.encode(RESPONSE, add_special_tokens=False)
    logprobs = [-0.5 - 0.01 * k for k in range(len(ids))]
    (mark,) = locate_first_errors(RuleJudge(), tokenizer, [ids], [True], [items[0]])
    assert mark.step == 1 and mark.verdict.correction == "2 + 2 = 4"
    # the cut: every token wholly before "Then" (the step starts at character 18)
    assert tokenizer.decode(ids[: mark.token]) == "Step: 1 + 1 = 2.\n\n"
    assert tokenizer.decode(ids[: mark.token + 1]) != "Step: 1 + 1 = 2.\n\n"
    (fix,) = RuleIntervention(ModelContext(embedded)).intervene(
        [_request(items[0], ids[: mark.token], tokenizer, mark.verdict)], 16
    )
    correction = tokenizer.encode("2 + 2 = 4", add_special_tokens=False)  # the prefix ends in "\n\n": no space
    assert fix.ids == correction
    example = intervention_example(0, items[0].prompt_ids, ids, logprobs, mark, fix)
    # token in, token out: the sampled prefix ids, then the correction ids, no EOS
    assert example.prompt_ids == list(items[0].prompt_ids)
    assert example.response_ids == ids[: mark.token] + correction
    assert example.intervention == [False] * mark.token + [True] * len(correction)
    assert example.logprobs[: mark.token] == logprobs[: mark.token] and not example.finished
    assert tokenizer.eos_token_id not in example.response_ids
    batch = collate_rollouts([example], 1, tokenizer.pad_token_id or 0, 1.0)
    SupervisedNLL().prepare(batch, logprob_fn=None)
    p, n = len(example.prompt_ids), len(example.response_ids)
    expected = torch.zeros_like(batch.loss_mask)
    expected[0, p : p + n] = True  # loss on prefix + correction, none on the prompt
    assert torch.equal(batch.loss_mask, expected)
    assert batch.intervention_mask[0].nonzero().flatten().tolist() == list(range(p + mark.token, p + n))
    assert batch.input_ids[0, p : p + n].tolist() == ids[: mark.token] + correction


def _request(item, prefix, tokenizer, verdict):
    return InterventionRequest(
        item.question, item.reference, list(item.prompt_ids), prefix, tokenizer.decode(prefix), verdict
    )


def test_a_correct_or_claimless_response_has_no_first_error(tokenizer, items):
    right = tokenizer.encode(f"<answer>{items[0].reference}</answer>", add_special_tokens=False)
    nothing = tokenizer.encode("I am not sure.", add_special_tokens=False)
    assert locate_first_errors(RuleJudge(), tokenizer, [right, nothing], [True, True], items[:2]) == [None, None]


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_first_error_row_marks_failed_rollouts(tmp_path):
    cfg = _compose("method=first_error", f"paths.output_dir={tmp_path}", *TINY_RUN, "rollout.progress=false")
    c = build_components(cfg, trainer=False)
    assert c.rollout.mark_first_error  # switched on by the objective's needs_first_error
    c.datamodule.setup("fit")
    torch.manual_seed(0)
    batch = c.rollout.generate(c.datamodule.train_items[:2])
    marked = batch.first_error >= 0
    lengths = batch.response_mask.sum(-1)
    assert (batch.rewards[marked] < 1).all() and (batch.first_error[marked] < lengths[marked]).all()
    assert batch.stats["judge/first_error_found"] == float(marked.sum())
    assert batch.stats["judge/first_error_reviewed"] == float((batch.rewards < 1).sum())
    assert marked.sum() >= 1


def _tiny_run(method, tmp_path, *extra):
    return run(
        _compose(
            f"method={method}",
            f"paths.output_dir={tmp_path}",
            "trainer.max_steps=2",
            *TINY_RUN,
            "rollout.progress=false",
            *extra,
        )
    )


@pytest.mark.slow
def test_int_row_trains_two_steps_after_its_sft_stage(tmp_path):
    summary = _tiny_run("int", tmp_path, "sft.prompts=8", "sft.steps=2", "sft.rows_per_step=4")
    sft = summary["sft"]
    assert sft["sampled"] == 16 and sft["failed"] >= sft["errors_found"] >= sft["corrected"] >= sft["kept"] > 0
    assert sft["steps"] == 2 and (tmp_path / "hf_sft_policy").is_dir()
    assert summary["steps"] == 2 and (tmp_path / "hf_policy" / "model.safetensors").is_file()


@pytest.mark.slow
def test_first_error_row_trains_two_steps(tmp_path):
    summary = _tiny_run("first_error", tmp_path)
    assert summary["steps"] == 2 and (tmp_path / "hf_policy" / "model.safetensors").is_file()
