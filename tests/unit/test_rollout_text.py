"""Rollouts as markdown without a model (issue 40, items 1 and 4): the rendering of hand-made records
and batches (intervention and guide marks, verdicts, reward and advantage, an episode's turns in
order), the seeded pick of rows, the TensorBoard text callback and its switches, and the evaluation's
sample turns and episode progress bar."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from mintrl.analysis.rollouts import highlight
from mintrl.build.config import CONFIG_DIR
from mintrl.core.batch import ReviewRecord, Rollout, TurnRecord, collate_rollouts
from mintrl.core.verdict import VerdictKind
from mintrl.data.base import PromptItem
from mintrl.eval.evaluate import EvalProgress, sample_turns, without_lightning_bar
from mintrl.rollout.markdown import (
    ENVIRONMENT_MARKS,
    INTERVENTION_MARKS,
    code_span,
    fenced,
    last_line,
    marked,
    pick_rows,
    record_markdown,
    step_markdown,
    with_action_segments,
)
from mintrl.rollout.records import batch_records
from mintrl.training.callbacks.rollout_text import TAG, RolloutText

EOS = 1


class CharTokenizer:
    """One token per character (id = code point); id 1 is EOS, a special token."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == EOS))


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def item(index: int, question: str) -> PromptItem:
    return PromptItem(index=index, question=question, reference="7", prompt_ids=ids("Q:"), entry={})


SEMI = {  # a semi-on-policy row the judge revised once (cut at token 4; the intervention wrote "=7"), then kept
    "split": "train",
    "step": 3,
    "row": 1,
    "group": 0,
    "prompt_index": 4,
    "question": "Add the numbers.\nWhat is 3+4?\n",
    "reference": "7",
    "control": False,
    "response": "ok\n\n=7 done",
    "segments": [
        {"by": "policy", "text": "ok\n\n"},
        {"by": "intervention", "text": "=7"},
        {"by": "policy", "text": " done"},
    ],
    "tokens": {"policy": 9, "intervention": 2, "guide": 0, "environment": 0},
    "finished": True,
    "reward": 0.0,
    "advantage": -0.5,
    "trains": True,
    "first_error": None,
    "reviews": [
        {
            "round": 0,
            "kind": "revise",
            "step": 1,
            "correction": "3+4=7",
            "revised": True,
            "at_token": 4,
            "written": 2,
            "written_text": "=7",
        },
        {
            "round": 1,
            "kind": "keep",
            "step": None,
            "correction": None,
            "revised": False,
            "at_token": 11,
            "written": 0,
            "written_text": "",
        },
    ],
    "branch": None,
    "turns": [],
}

SEMI_MD = (
    "#### row 1, group 0, semi-on-policy\n\n"
    "reward 0.000, advantage -0.500; tokens: 9 policy, 2 intervention\n\n"
    "prompt (last line):\n\n```\nWhat is 3+4?\n```\n\n"
    "response ([[intervention]], {{guide}}):\n\n```\nok\n\n[[=7]] done\n```\n\n"
    "judge's verdicts:\n\n"
    "- review 0: revise at step 1, cut at token 4; judge's correction: `3+4=7`; intervention wrote 2 tokens: `=7`\n"
    "- review 1: keep"
)


def test_a_single_turn_record_renders_marks_verdicts_reward_and_advantage():
    assert record_markdown(SEMI) == SEMI_MD


def test_a_guided_truncated_control_record_without_verdicts_or_reward():
    record = {
        **SEMI,
        "row": 0,
        "control": True,
        "question": None,
        "segments": [{"by": "guide", "text": "Let x"}, {"by": "policy", "text": " be 2"}],
        "tokens": {"policy": 5, "intervention": 0, "guide": 5, "environment": 0},
        "finished": False,
        "reward": None,
        "advantage": None,
        "reviews": [],
    }
    assert record_markdown(record) == (
        "#### row 0, group 0, control, truncated\n\n"
        "reward none, advantage none; tokens: 5 policy, 0 intervention, 5 guide\n\n"
        "prompt (last line):\n\n```\n\n```\n\n"
        "response ([[intervention]], {{guide}}):\n\n```\n{{Let x}} be 2\n```\n\n"
        "judge's verdicts: none"
    )


def test_the_marks_are_the_terminal_viewers_and_texts_stay_verbatim():
    assert INTERVENTION_MARKS == ("[[", "]]") and ENVIRONMENT_MARKS == ("<<env: ", ">>")
    runs = [{"by": "policy", "text": "a"}, {"by": "environment", "text": "obs"}, {"by": "intervention", "text": "b"}]
    assert marked(runs) == "a<<env: obs>>[[b]]" == highlight(runs, color=False)  # the terminal viewer's marks
    # a code block inside the text cannot close the fence; code spans outnumber the backticks inside
    assert fenced("a\n```py\nx\n```") == "````\na\n```py\nx\n```\n````"
    assert fenced("<answer>7</answer>") == "```\n<answer>7</answer>\n```"
    assert code_span("a`b") == "``a`b``" and code_span("`x") == "`` `x ``" and code_span("l1\nl2") == "`l1⏎l2`"
    assert last_line("one\ntwo  \n\n") == "two" and last_line(None) == ""
    review = {**SEMI["reviews"][0], "revised": False, "written": 0, "correction": ""}
    assert record_markdown({**SEMI, "reviews": [review]}).endswith(
        "judge's verdicts:\n\n- review 0: revise at step 1 (not applied: the step is outside the chunk, or the cut "
        "would keep fewer than rollout.min_kept_tokens tokens)"
    )


def episode_batch():
    """One semi-on-policy episode of 2 turns: the action "ab" + intervention "CD" (the judge revised
    it), an observation turn of 7 tokens ("1" returned), then the answer and EOS; reward 1."""
    ep = Rollout(group=0, is_control=False, prompt_ids=ids("Q:"), row=0)
    ep.append(ids("ab"), [-1.0] * 2, intervention=False)
    ep.append(ids("CD"), [-1.0] * 2, intervention=True, behaviour=[0.0] * 2)
    ep.observe(ids("|obs 1|"))
    ep.append(ids("<answer>1</answer>") + [EOS], [-0.5] * 19, intervention=False)
    ep.turns = [TurnRecord(0, 4, 11, "query", False, True, "1"), TurnRecord(11, 30, 30, "answer", False, False, "")]
    ep.review_records = [ReviewRecord(0, VerdictKind.REVISE, 0, "CD", True, 2, written=2)]
    ep.finished, ep.reward = True, 1.0
    return collate_rollouts([ep], 1, 0, 1.0, prompts=[item(5, "Table t.\nWhich row?")])


EPISODE_HEAD = (
    "#### row 0, group 0, semi-on-policy\n\n"
    "reward 1.000, advantage none; tokens: 21 policy, 2 intervention, 7 environment\n\n"
    "prompt (last line):\n\n```\nWhich row?\n```\n\n"
)
EPISODE_TAIL = (
    "observation (7 tokens):\n\n```\n1\n```\n\n"
    "**turn 2**: answer, 19 action tokens\n\n```\n<answer>1</answer>\n```\n\n"
    "judge's verdicts:\n\n- review 0: revise at step 0, cut at token 2; judge's correction: `CD`; "
    "intervention wrote 2 tokens: `CD`"
)


def test_an_episode_renders_its_turns_in_order_with_marks_inside_the_actions():
    batch, tok = episode_batch(), CharTokenizer()
    records = batch_records(batch, tok, "train", 2)
    # as the records file keeps it: the action's text without its provenance
    assert record_markdown(records[0]) == (
        EPISODE_HEAD + "**turn 1**: query, intervened, 4 action tokens\n\n```\nabCD\n```\n\n" + EPISODE_TAIL
    )
    shown = with_action_segments(records, batch, tok)
    assert shown[0]["turns"][0]["segments"] == [{"by": "policy", "text": "ab"}, {"by": "intervention", "text": "CD"}]
    assert "segments" not in records[0]["turns"][0]  # the records are not changed
    assert record_markdown(shown[0]) == (
        EPISODE_HEAD + "**turn 1**: query, intervened, 4 action tokens\n\n```\nab[[CD]]\n```\n\n" + EPISODE_TAIL
    )
    with pytest.raises(ValueError, match="2 records for a batch of 1 rows"):
        with_action_segments(records * 2, batch, tok)


def test_step_markdown_heads_the_rollouts_and_separates_them_by_rules():
    assert step_markdown([SEMI, SEMI], "train", 3, 16) == (
        "train step 3: 2 of 16 rollouts\n\n---\n\n" + SEMI_MD + "\n\n---\n\n" + SEMI_MD
    )


REWARDS = [1.0, 0.0, 0.0, 1.0, math.nan, 0.0, 1.0, 0.0]
INTERVENED = [False, False, True, False, False, True, False, False]  # rewarded: 0, 3, 6; unrewarded: 1, 4, 7


def test_pick_rows_is_a_seeded_pick_spread_over_the_kinds_of_rows():
    rows = pick_rows(REWARDS, INTERVENED, 4, 0, 0)
    assert rows == pick_rows(REWARDS, INTERVENED, 4, 0, 0)  # deterministic
    # in turn: intervened, rewarded, unrewarded, intervened
    assert {2, 5} <= set(rows) and len(set(rows) & {0, 3, 6}) == 1 and len(set(rows) & {1, 4, 7}) == 1
    assert rows == [2, 4, 5, 6]  # row 4: reward none counts as unrewarded
    assert pick_rows(REWARDS, INTERVENED, 3, 0, 0) == [4, 5, 6]  # one of each kind
    assert pick_rows(REWARDS, INTERVENED, 4, 0, 1) == [1, 2, 3, 5]  # another step, another draw
    assert pick_rows(REWARDS, INTERVENED, 100, 0, 0) == list(range(8))
    assert pick_rows(REWARDS, [False] * 8, 2, 0, 0) == [3, 5]  # no intervention: one rewarded, one not
    assert pick_rows([], [], 4, 0, 0) == []


class RecordingTB(TensorBoardLogger):
    """A TensorBoardLogger whose writer records the ``add_text`` calls."""

    def __init__(self, save_dir):
        super().__init__(save_dir)
        self.texts = []

    @property
    def experiment(self):
        return SimpleNamespace(add_text=lambda tag, text, global_step: self.texts.append((tag, text, global_step)))


def semi_batch():
    """Group 0: a control row (reward 1) and a semi row (reward 0) with intervention tokens "=7"."""
    control = Rollout(group=0, is_control=True, prompt_ids=ids("Q:"), row=0)
    control.append(ids("3+4=7") + [EOS], [-0.5] * 6, intervention=False)
    control.finished, control.reward = True, 1.0
    semi = Rollout(group=0, is_control=False, prompt_ids=ids("Q:"), row=1)
    semi.append(ids("3+4"), [-1.0] * 3, intervention=False)
    semi.append(ids("=7"), [-2.0] * 2, intervention=True, behaviour=[0.0] * 2)
    semi.finished, semi.reward = True, 0.0
    batch = collate_rollouts([control, semi], 1, 0, 1.0, prompts=[item(4, "Sum.\n3+4?")])
    batch.extras["advantages"] = torch.tensor([0.5, -0.5])
    batch.step = 3
    return batch


def test_the_callback_writes_the_picked_rows_as_text_on_rank_0_with_tensorboard_only(tmp_path):
    batch, tok = semi_batch(), CharTokenizer()
    logger = RecordingTB(tmp_path)
    trainer = SimpleNamespace(loggers=[logger], is_global_zero=True, datamodule=None)
    module = SimpleNamespace(tokenizer=tok)
    RolloutText(rollouts=1, seed=0).on_train_batch_end(trainer, module, None, batch, 0)
    assert logger.texts == [
        (
            TAG,
            "train step 3: 1 of 2 rollouts\n\n---\n\n"
            "#### row 1, group 0, semi-on-policy\n\n"
            "reward 0.000, advantage -0.500; tokens: 3 policy, 2 intervention\n\n"
            "prompt (last line):\n\n```\n3+4?\n```\n\n"
            "response ([[intervention]], {{guide}}):\n\n```\n3+4[[=7]]\n```\n\n"
            "judge's verdicts: none",
            3,
        )
    ]
    assert TAG == "rollouts/train"
    logger.texts.clear()
    RolloutText().on_train_batch_end(trainer, module, None, batch, 0)  # 4 asked, 2 rows: both, in row order
    assert [text.count("#### row ") for _, text, _ in logger.texts] == [2]
    assert logger.texts[0][1].startswith("train step 3: 2 of 2 rollouts\n\n---\n\n#### row 0, group 0, control\n\n")
    logger.texts.clear()
    RolloutText(enabled=False).on_train_batch_end(trainer, module, None, batch, 0)
    RolloutText().on_train_batch_end(
        SimpleNamespace(**{**vars(trainer), "is_global_zero": False}), module, None, batch, 0
    )
    RolloutText().on_train_batch_end(trainer, module, None, ["not a rollout batch"], 0)
    assert logger.texts == []
    csv = SimpleNamespace(loggers=[CSVLogger(tmp_path)], is_global_zero=True, datamodule=None)
    assert RolloutText.writer(csv) is None
    RolloutText().on_train_batch_end(csv, module, None, batch, 0)  # no TensorBoard: nothing, no error
    with pytest.raises(ValueError, match="callbacks.rollout_text.rollouts must be an integer >= 1, got 0"):
        RolloutText(rollouts=0)


@pytest.mark.parametrize("callbacks", ["default", "sweep"])
def test_the_callback_is_in_both_callback_groups_and_one_override_turns_it_off(callbacks):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"callbacks={callbacks}", "seed=5"])
        off = compose("train", overrides=[f"callbacks={callbacks}", "callbacks.rollout_text=null"])
    made = instantiate(cfg.callbacks.rollout_text)
    assert isinstance(made, RolloutText) and (made.enabled, made.rollouts, made.seed) == (True, 4, 5)
    assert off.callbacks.rollout_text is None


# ---------------------------------------------------------------- evaluation


def test_sample_turns_keep_actions_and_observations_apart_with_roles():
    records = batch_records(episode_batch(), CharTokenizer(), "val", 0)
    assert sample_turns(records[0]["turns"]) == [
        {"role": "assistant", "kind": "query", "text": "abCD"},
        {"role": "environment", "text": "1"},
        {"role": "assistant", "kind": "answer", "text": "<answer>1</answer>"},
    ]
    assert sample_turns([]) == []


def test_the_eval_bar_counts_episodes_as_they_end_from_the_start_of_validation():
    engine = SimpleNamespace(multi_turn=True, on_episodes_end=None)  # an episode engine's capability and reporting hook
    data = SimpleNamespace(val_items=list(range(3)), val_samples_per_prompt=2, rollout=engine)
    trainer = SimpleNamespace(datamodule=data, global_rank=0, world_size=1, is_global_zero=True)
    out = io.StringIO()
    progress = EvalProgress("eval sql", file=out)
    progress.on_validation_start(trainer, None)
    bar = progress.bar
    assert (bar.n, bar.total, bar.unit, bar.desc) == (0, 6, "episode", "eval sql")
    counts = []
    for ended in (2, 1, 3):  # two answered, one more, three at the turn limit (scored by score_final)
        engine.on_episodes_end(ended)
        counts.append(bar.n)
    progress.on_validation_batch_end(trainer, None, None, [None] * 6, 0)
    counts.append(bar.n)
    assert counts == [2, 3, 6, 6]
    progress.on_validation_end(trainer, None)
    assert progress.bar is None and engine.on_episodes_end is None  # the hook is released
    assert "6/6" in out.getvalue() and "episode" in out.getvalue()
    # single-turn rollouts on rank 1 of 2: its share of the problems, counted per generation batch
    single = SimpleNamespace(
        val_items=list(range(5)), val_samples_per_prompt=4, rollout=SimpleNamespace(multi_turn=False)
    )
    rank1 = SimpleNamespace(datamodule=single, global_rank=1, world_size=2, is_global_zero=False)
    progress = EvalProgress(file=io.StringIO())
    progress.on_validation_start(rank1, None)
    assert (progress.bar.total, progress.bar.disable) == (8, True)  # drawn on rank 0 only
    progress.on_validation_batch_end(rank1, None, None, [None] * 8, 0)
    assert progress.bar.n == 8
    progress.close()


def test_eval_turns_lightnings_validation_bar_off():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("eval", overrides=["ckpt_path=base"])
    assert cfg.callbacks.progress is not None
    without_lightning_bar(cfg)
    assert cfg.trainer.enable_progress_bar is False and cfg.callbacks.progress is None
    assert cfg.callbacks.records is not None and cfg.callbacks.rollout_text is not None
