"""Rollout records without a model: building them from a hand batch, the size cap, and the viewer
(``mintrl-rollouts``) on a hand-written record file."""

from __future__ import annotations

import gzip
import json
from importlib import resources

import pytest
import torch

from mintrl.analysis.rollouts import (
    HIGHLIGHT_OFF,
    HIGHLIGHT_ON,
    filter_records,
    format_record,
    format_run,
    format_stats,
    highlight,
    read_records,
    record_files,
    step_stats,
    summary_line,
)
from mintrl.analysis.rollouts_html import TEMPLATE
from mintrl.cli.rollouts import main as rollouts_main
from mintrl.core.batch import BranchRecord, Rollout, collate_rollouts, concat_batches
from mintrl.core.verdict import KEEP, REVISE, Verdict
from mintrl.data.base import PromptItem
from mintrl.rollout.markdown import NOT_APPLIED, marked, review_line
from mintrl.rollout.records import RecordWriter, batch_records, concat_records, record_path
from mintrl.rollout.verdicts import apply_verdict
from mintrl.text.steps import split_steps

EOS = 1


class CharTokenizer:
    """One token per character (id = code point); id 1 is EOS, a special token."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == EOS))


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def item(index: int, question: str) -> PromptItem:
    return PromptItem(index=index, question=question, reference="7", prompt_ids=ids("Q:"), entry={})


# ---------------------------------------------------------------- records from a batch


def hand_batch():
    """Group 0: a control row and a semi row the judge revised once ("3+4=8" cut at step 1, the
    intervention wrote "=7"); a branched row of the control row. Group 1: one control row without reward."""
    tok = CharTokenizer()
    control = Rollout(group=0, is_control=True, prompt_ids=ids("Q:"), row=0)
    control.append(ids("3+4=7") + [EOS], [-0.5] * 6, intervention=False)
    control.finished, control.reward = True, 1.0
    semi = Rollout(group=0, is_control=False, prompt_ids=ids("Q:"), row=1)
    chunk = ids("ok\n\n3+4=8")
    steps = split_steps(tok.decode(chunk), ("blank_line",))
    assert [s.text for s in steps] == ["ok\n\n", "3+4=8"]
    fix = apply_verdict(semi, chunk, [-1.0] * len(chunk), False, steps, Verdict(REVISE, 1, "3+4=7"), item(4, "?"), tok)
    assert fix is not None and tok.decode(semi.response_ids) == "ok\n\n"
    semi.append(ids("=7"), [-2.0, -2.0], intervention=True, behaviour=[0.0, 0.0])
    semi.review_records[-1].written = 2
    apply_verdict(
        semi, ids(" done"), [-1.0] * 5, True, split_steps(" done", ("blank_line",)), Verdict(KEEP), item(4, "?"), tok
    )
    semi.reward = 0.0
    branch = Rollout(group=0, is_control=True, prompt_ids=ids("Q:"), row=2, branch=BranchRecord("resample", 2, 0, 1.5))
    branch.append(ids("3+5"), [-0.1] * 3, intervention=False)
    other = Rollout(group=1, is_control=True, prompt_ids=ids("Q:"), row=3)
    other.append(ids("x"), [-0.3], intervention=False)
    other.reward = float("nan")
    batch = collate_rollouts([control, semi, branch, other], 2, 0, 1.0, prompts=[item(4, "3+4?"), item(9, "x?")])
    return batch


def test_batch_records_hold_provenance_verdicts_advantages_and_branches():
    batch = hand_batch()
    batch.extras["advantages"] = torch.tensor([0.5, -0.5, 0.25, float("nan")])
    batch.train_rows = torch.tensor([True, True, True, False])
    records = batch_records(batch, CharTokenizer(), "train", 3)
    assert [r["row"] for r in records] == [0, 1, 2, 3] and [r["group"] for r in records] == [0, 0, 0, 1]
    control, semi, branch, other = records
    assert control["response"] == "3+4=7" and control["tokens"] == {
        "policy": 6,
        "intervention": 0,
        "guide": 0,
        "environment": 0,
    }
    assert control["segments"] == [{"by": "policy", "text": "3+4=7"}] and control["finished"] is True
    assert (control["prompt_index"], control["question"], control["reference"]) == (4, "3+4?", "7")
    assert (control["reward"], control["advantage"], control["trains"], control["control"]) == (1.0, 0.5, True, True)
    assert semi["response"] == "ok\n\n=7 done" and semi["tokens"] == {
        "policy": 9,
        "intervention": 2,
        "guide": 0,
        "environment": 0,
    }
    assert semi["segments"] == [
        {"by": "policy", "text": "ok\n\n"},
        {"by": "intervention", "text": "=7"},
        {"by": "policy", "text": " done"},
    ]
    assert semi["reviews"] == [
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
    ]
    assert (semi["control"], semi["advantage"], semi["reward"]) == (False, -0.5, 0.0)
    assert branch["branch"] == {"kind": "resample", "anchor": 2, "parent": 0, "temperature": 1.5}
    assert control["branch"] is None and control["reviews"] == []
    assert (other["reward"], other["advantage"], other["trains"]) == (None, None, False)  # NaN -> null
    assert [r["first_error"] for r in records] == [None] * 4  # no judge marked a first wrong step
    marked = hand_batch()
    marked.first_error = torch.tensor([-1, 4, -1, 0])
    assert [r["first_error"] for r in batch_records(marked, CharTokenizer(), "train", 3)] == [None, 4, None, 0]
    json.dumps(records, allow_nan=False)  # valid JSON
    # validation batches: no objective, so no advantage
    plain = batch_records(hand_batch(), CharTokenizer(), "val", 0)
    assert [r["advantage"] for r in plain] == [None] * 4 and [r["trains"] for r in plain] == [None] * 4


def test_step_stats_count_what_the_judge_and_intervention_did(tmp_path):
    records = batch_records(hand_batch(), CharTokenizer(), "train", 0)
    branch_reward = records[2]["reward"]
    assert branch_reward == 0.0  # a Rollout's reward before scoring
    stats = step_stats(records)
    # rows: control (6 policy tokens, reward 1), semi (9 policy + 2 intervention, revised at token 4, reward 0),
    # branch (3 policy, reward 0), other (1 policy, reward NaN -> None, left out of the means)
    assert stats == {
        "rollouts": 4,
        "semi": 1,
        "intervened": 1,
        "revises": 1,
        "cuts_at_0": 0,
        "offpolicy_frac": pytest.approx(2 / 21),
        "iv_share_intervened": pytest.approx(2 / 11),
        "reward_control": pytest.approx(0.5),
        "reward_semi": 0.0,
        "rewarded_intervened": 0,
    }
    records[1]["reviews"][0]["at_token"], records[1]["reward"] = 0, 1.0
    again = step_stats(records)
    assert (again["cuts_at_0"], again["rewarded_intervened"], again["reward_semi"]) == (1, 1, 1.0)
    assert step_stats([])["iv_share_intervened"] is None and step_stats([])["reward_control"] is None
    # the table: one row per step file and the pooled row
    writer = RecordWriter(tmp_path / "rollouts", max_mib=None)
    writer.write("train", 0, batch_records(hand_batch(), CharTokenizer(), "train", 0))
    writer.write("train", 1, records)
    table = format_stats(tmp_path)
    lines = table.splitlines()
    assert lines[0].startswith("| step | rollouts | semi-on-policy | intervened | revise verdicts | cut at token 0 |")
    assert lines[2] == "| 0 | 4 | 1 | 1 | 1 | 0 | 0.095 | 0.182 | 0.500 | 0.000 | 0 |"
    assert lines[3] == "| 1 | 4 | 1 | 1 | 1 | 1 | 0.095 | 0.182 | 0.500 | 1.000 | 1 |"
    assert lines[4] == "| all | 8 | 2 | 2 | 2 | 1 | 0.095 | 0.182 | 0.500 | 0.500 | 1 |"
    assert rollouts_main([str(tmp_path), "--stats"]) == 0


def test_traces_follow_select_and_concat():
    batch = hand_batch()
    sub = batch.select(torch.tensor([2, 1]))
    assert [len(t.reviews) for t in sub.traces] == [0, 2] and sub.traces[0].branch.parent == 0
    union = concat_batches([hand_batch(), hand_batch()])
    assert len(union.traces) == 8
    assert [t.branch.parent for t in union.traces if t.branch is not None] == [0, 4]  # second batch offset by 4 rows
    parts = [(2, batch_records(hand_batch(), CharTokenizer(), "train", 0)) for _ in range(2)]
    merged = concat_records(parts)
    assert [r["row"] for r in merged] == list(range(8))
    assert [r["group"] for r in merged] == [0, 0, 0, 1, 2, 2, 2, 3]
    assert [r["branch"]["parent"] for r in merged if r["branch"]] == [0, 4]
    assert parts[1][1][0]["row"] == 0  # inputs unchanged


# ---------------------------------------------------------------- size cap


def fake_records(n: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [
        {"row": i, "response": "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (400,), generator=g))}
        for i in range(n)
    ]


def test_writer_stops_at_the_cap_and_counts_what_it_dropped(tmp_path):
    root = tmp_path / "rollouts"
    writer = RecordWriter(root, max_mib=0.008)  # 8388 bytes; a step of 20 random records: 5174 bytes
    first = writer.write("train", 0, fake_records(20, 0))
    assert first == record_path(root, "train", 0) and first.name == "step_000000.jsonl.gz"
    assert len(read_records(first)) == 20 and writer.dropped == 0 and not writer.full
    assert writer.write("train", 1, fake_records(20, 1)) is not None  # fits partly
    kept = len(read_records(record_path(root, "train", 1)))
    assert 0 < kept < 20 and writer.full and writer.dropped == 20 - kept
    assert writer.write("val", 1, fake_records(5, 2)) is None  # nothing more, counted
    assert writer.dropped == 25 - kept and not record_path(root, "val", 1).exists()
    on_disk = sum(f.stat().st_size for f in root.rglob("*.jsonl.gz"))
    assert on_disk == writer.bytes_written <= 0.008 * 2**20
    assert on_disk > 0.008 * 2**20 - 600  # the cap is filled up to less than one record (~300 bytes compressed)
    # a writer on the same folder (a resumed run) counts the files already there
    again = RecordWriter(root, max_mib=0.008)
    assert again.bytes_written == on_disk
    # no cap: everything is written; the cap must be positive
    assert RecordWriter(tmp_path / "free", max_mib=None).write("train", 0, fake_records(50, 3)) is not None
    with pytest.raises(ValueError, match="callbacks.records.max_mib"):
        RecordWriter(tmp_path / "bad", max_mib=0)


def test_writer_replaces_a_step_file_and_its_size(tmp_path):
    writer = RecordWriter(tmp_path, max_mib=1)
    writer.write("train", 0, fake_records(10, 0))
    writer.write("train", 0, fake_records(3, 1))
    assert len(read_records(record_path(tmp_path, "train", 0))) == 3
    assert writer.bytes_written == record_path(tmp_path, "train", 0).stat().st_size


# ---------------------------------------------------------------- viewer on a hand-written file


def record(row, control, reward, segments, reviews=(), advantage=None, branch=None):
    policy = sum(len(s["text"]) for s in segments if s["by"] == "policy")
    iv = sum(len(s["text"]) for s in segments if s["by"] == "intervention")
    return {
        "split": "train",
        "step": 2,
        "row": row,
        "group": row // 2,
        "prompt_index": 10 + row // 2,
        "question": f"What is {row} + 1?",
        "reference": str(row + 1),
        "control": control,
        "response": "".join(s["text"] for s in segments),
        "segments": segments,
        "tokens": {"policy": policy, "intervention": iv},
        "finished": True,
        "reward": reward,
        "advantage": advantage,
        "trains": True,
        "reviews": list(reviews),
        "branch": branch,
    }


REVISED = {
    "round": 0,
    "kind": "revise",
    "step": 1,
    "correction": "2 + 1 = 3",
    "revised": True,
    "at_token": 9,
    "written": 5,
    "written_text": " = 3.",
}
ROWS = [
    record(0, True, 1.0, [{"by": "policy", "text": "0 + 1 = 1"}], advantage=0.5),
    record(1, True, 0.0, [{"by": "policy", "text": "0 + 1 = 5"}], advantage=-0.5),
    record(
        2,
        False,
        1.0,
        [
            {"by": "policy", "text": "So 2 + 1"},
            {"by": "intervention", "text": " = 3."},
            {"by": "policy", "text": " ok"},
        ],
        [
            REVISED,
            {**REVISED, "round": 1, "kind": "keep", "step": None, "correction": None, "revised": False, "written": 0},
        ],
        advantage=0.75,
    ),
    record(
        3,
        False,
        None,
        [{"by": "policy", "text": "??"}],
        branch={"kind": "intervene", "anchor": 4, "parent": 2, "temperature": 1.0},
    ),
]


@pytest.fixture()
def run_dir(tmp_path):
    for split, step in (("train", 2), ("train", 5), ("val", 0)):
        path = record_path(tmp_path / "rollouts", split, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps({**r, "split": split, "step": step}) + "\n" for r in ROWS)
    return tmp_path


def test_filters():
    assert [r["row"] for r in filter_records(ROWS, intervened=True)] == [2]
    assert [r["row"] for r in filter_records(ROWS, reward=1.0)] == [0, 2]
    assert [r["row"] for r in filter_records(ROWS, reward=0)] == [1]  # a missing reward matches no value
    assert [r["row"] for r in filter_records(ROWS, intervened=True, reward=0.0)] == []
    assert len(filter_records(ROWS)) == 4


def test_format_record_marks_intervention_tokens_and_lists_verdicts():
    text = format_record(ROWS[2], color=False)
    assert text.splitlines()[0] == (
        "== train step 2  row 2  group 1  prompt 11  semi-on-policy  reward 1.000  advantage 0.750  "
        "tokens 11 policy + 5 intervention"
    )
    assert "  question: What is 2 + 1?" in text
    assert "  response: So 2 + 1[[ = 3.]] ok" in text
    assert (
        "  review 0: revise at step 1, cut at token 9; judge's correction: '2 + 1 = 3'; intervention wrote 5 tokens: [[ = 3.]]"
        in text
    )
    assert "  review 1: keep" in text.splitlines()
    assert highlight(ROWS[2]["segments"], color=True) == f"So 2 + 1{HIGHLIGHT_ON} = 3.{HIGHLIGHT_OFF} ok"
    assert HIGHLIGHT_ON not in text
    branched = format_record(ROWS[3])
    assert (
        "reward none  advantage none" in branched and "  branch: intervene from row 2 at token 4 (T = 1.00)" in branched
    )
    assert summary_line(ROWS) == (
        "4 rollouts, 1 with intervention tokens, 1 revise verdicts, off-policy token fraction 0.1389, control reward 0.500"
    )  # 5 intervention of 36 response tokens


def test_the_terminal_viewer_words_verdicts_and_marks_runs_as_the_markdown_does():
    """One wording of a verdict (:func:`mintrl.rollout.markdown.review_line`) in both viewers; each
    quotes the texts its own way (terminal: repr and marks, markdown: code spans)."""
    review = ROWS[2]["reviews"][0]
    assert "  " + review_line(review, repr, lambda text: f"[[{text}]]") in format_record(ROWS[2]).splitlines()
    not_applied = {**review, "revised": False, "written": 0, "correction": ""}
    assert review_line(not_applied) == (
        "review 0: revise at step 1 (not applied: the step is outside the chunk, or the cut would keep fewer than "
        "rollout.min_kept_tokens tokens)"
    )
    assert review_line(review) == (
        "review 0: revise at step 1, cut at token 9; judge's correction: `2 + 1 = 3`; intervention wrote 5 tokens: ` = 3.`"
    )
    guided = [{"by": "guide", "text": "Let x"}, {"by": "policy", "text": " be 2"}]
    assert highlight(guided, color=False) == "{{Let x}} be 2" == marked(guided)
    # the browser page's script words a verdict the same way
    page = resources.files("mintrl.analysis").joinpath(TEMPLATE).read_text(encoding="utf-8")
    assert f'" ({NOT_APPLIED})"' in page and '"; judge\'s correction: "' in page
    assert "`; intervention wrote ${v.written} tokens: `" in page


def test_record_files_and_errors_name_the_folder(run_dir, tmp_path_factory):
    assert [s for s, _ in record_files(run_dir)] == [2, 5]
    assert [s for s, _ in record_files(run_dir / "rollouts", "val")] == [0]  # the records folder itself
    with pytest.raises(FileNotFoundError, match=r"steps there: 2, 5"):
        record_files(run_dir, step=3)
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(FileNotFoundError, match=f"no train rollout records in {empty}/train"):
        record_files(empty)
    assert "### val step 0" in format_run(run_dir, split="val")


def test_cli_prints_filtered_records(run_dir, capsys, tmp_path_factory):
    assert rollouts_main([str(run_dir), "--step", "5", "--intervened"]) == 0
    out = capsys.readouterr().out
    assert "### train step 5" in out and "### train step 2" not in out
    assert out.count("\n== ") == 1 and "So 2 + 1[[ = 3.]] ok" in out  # not a tty: brackets
    assert "4 rollouts, 1 with intervention tokens, 1 revise verdicts" in out and "1 shown" in out
    assert rollouts_main([str(run_dir), "--reward", "1", "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n== ") == 4  # rows 0 and 2 of steps 2 and 5
    assert f"{HIGHLIGHT_ON} = 3.{HIGHLIGHT_OFF}" in out and "[[" not in out
    empty = tmp_path_factory.mktemp("norecords")
    with pytest.raises(SystemExit) as exit_info:
        rollouts_main([str(empty), "--split", "val"])
    assert exit_info.value.code == 2
    assert f"no val rollout records in {empty}/val" in capsys.readouterr().err
