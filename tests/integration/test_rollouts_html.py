"""``mintrl-rollouts RUN --html OUT``: one self-contained page of a run's records, written by the real
record writer (no model: hand records with the keys of :mod:`mintrl.rollout.records`). The browser
test (tests/integration/test_rollouts_browser.py) runs the page's script."""

from __future__ import annotations

import json
import re

import pytest

from mintrl.analysis.rollouts import format_stats
from mintrl.analysis.rollouts_html import page_data, script_json, write_rollouts_page
from mintrl.cli.rollouts import main as rollouts_main
from mintrl.rollout.records import RecordWriter

XSS = "</script><script>alert(1)</script>"
DATA_SCRIPT = re.compile(r'<script type="application/json" id="mintrl-data">(.*?)</script>', re.S)


def record(split, step, row, group, segments, reward, control=False, advantage=None, reviews=(), turns=()):
    """A record as :func:`mintrl.rollout.records.batch_records` writes it (tokens: 1 per character)."""
    tokens = {"policy": 0, "intervention": 0, "guide": 0, "environment": 0}
    for s in segments:
        tokens[s["by"]] += len(s["text"])
    return {
        "split": split,
        "step": step,
        "row": row,
        "group": group,
        "prompt_index": 10 + group,
        "question": f"Calculate {group} + 1.",
        "reference": str(group + 1),
        "control": control,
        "response": "".join(s["text"] for s in segments),
        "segments": list(segments),
        "tokens": tokens,
        "finished": True,
        "reward": reward,
        "advantage": advantage,
        "trains": None if split == "val" else True,
        "first_error": None,
        "reviews": list(reviews),
        "branch": None,
        "turns": list(turns),
    }


def seg(by, text):
    return {"by": by, "text": text}


REVISE = {
    "round": 0,
    "kind": "revise",
    "step": 0,
    "correction": "<answer>1</answer>",
    "revised": True,
    "at_token": 0,
    "written": 18,
    "written_text": "<answer>1</answer>",
}
TURN = {
    "kind": "query",
    "invalid": False,
    "intervened": False,
    "action": "SELECT 1;",
    "observation": "1 <b>row</b>",
    "action_tokens": 9,
    "observation_tokens": 12,
}


def hand_records() -> dict[tuple[str, int], list[dict]]:
    """Train steps 0 and 1 and val step 0: intervened, guided, environment and hostile rollouts;
    rewards 1, 0, 0.5 and none."""
    return {
        ("train", 0): [
            record("train", 0, 0, 0, [seg("policy", "I think 2")], 0.0, control=True, advantage=-0.5),
            record("train", 0, 1, 0, [seg("intervention", "<answer>1</answer>")], 1.0, advantage=1.0, reviews=[REVISE]),
            record("train", 0, 2, 1, [seg("guide", "Hint: "), seg("policy", "3")], None),
        ],
        ("train", 1): [
            record("train", 1, 0, 0, [seg("policy", XSS), seg("policy", " <img src=x onerror=alert(2)>")], 0.5),
            record(
                "train",
                1,
                1,
                0,
                [seg("policy", "SELECT 1;"), seg("environment", "1 <b>row</b>"), seg("policy", "<answer>1</answer>")],
                1.0,
                turns=[TURN, {**TURN, "kind": "answer", "action": "<answer>1</answer>", "observation": ""}],
            ),
        ],
        ("val", 0): [record("val", 0, 0, 0, [seg("policy", "<answer>1</answer>")], 1.0, control=True)],
    }


@pytest.fixture()
def hand_run(tmp_path):
    """A run folder whose ``rollouts/`` the real :class:`RecordWriter` wrote from :func:`hand_records`."""
    writer = RecordWriter(tmp_path / "rollouts", max_mib=None)
    for (split, step), records in hand_records().items():
        writer.write(split, step, records)
    return tmp_path


def embedded_data(text: str) -> dict:
    (blob,) = DATA_SCRIPT.findall(text)
    return json.loads(blob)


def test_page_is_self_contained_and_embeds_every_record(hand_run, capsys):
    out = hand_run / "pages" / "run.html"
    assert rollouts_main([str(hand_run), "--html", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} ({out.stat().st_size} bytes)\n"
    text = out.read_text(encoding="utf-8")
    assert f"<title>mintrl rollouts: {hand_run.parent.name}/{hand_run.name}</title>" in text
    assert f'<p class="source">records: {hand_run.resolve() / "rollouts"}</p>' in text
    # no external assets: no URL, no linked stylesheet or script, no import
    assert re.search(r"https?://", text) is None
    assert re.search(r"<link|<script[^>]* src=|@import|<iframe", text) is None
    # the hostile response cannot end the data element: 2 script elements (data, code) in the page
    assert text.count("<script") == 2 and text.count("</script>") == 2
    assert XSS not in text and "<img src=x" not in text
    data = embedded_data(text)
    for (split, step), records in hand_records().items():
        assert data["splits"][split]["steps"][str(step)]["records"] == records  # survives exactly
    rewards = [r["reward"] for s in data["splits"].values() for v in s["steps"].values() for r in v["records"]]
    assert rewards == [0.0, 1.0, None, 0.5, 1.0, 1.0]
    assert data["splits"]["train"]["steps"]["1"]["records"][0]["response"] == XSS + " <img src=x onerror=alert(2)>"
    assert data["splits"]["train"]["steps"]["0"]["summary"] == (
        "3 rollouts, 1 with intervention tokens, 1 revise verdicts, off-policy token fraction 0.6429, "
        "control reward 0.000"
    )
    assert data["open"] == {"split": "train", "step": None, "intervened": "any", "reward": "any"}
    assert data["page_size"] == 50
    # a CSS class per provenance, in the style sheet and in the script's map
    for cls in ("tok-policy", "tok-intervention", "tok-guide", "tok-env"):
        assert f".{cls}" in text and f'"{cls}"' in text
    # the --stats tables of both splits, one row per step and the pooled row
    for split, steps in (("train", ["0", "1", "all"]), ("val", ["0", "all"])):
        assert f'<table id="stats-{split}">' in text
        rows = re.findall(rf'<tr data-split="{split}" data-step="([^"]+)">', text)
        assert rows == steps
    first_row = format_stats(hand_run, "train").splitlines()[2]
    assert first_row == "| 0 | 3 | 2 | 1 | 1 | 1 | 0.643 | 1.000 | 0.000 | 1.000 | 1 |"
    assert '<tr data-split="train" data-step="0"><td>0</td><td>3</td><td>2</td><td>1</td><td>1</td><td>1</td>' in text


def test_script_json_escapes_what_could_end_the_element():
    data = {"response": XSS + " <!-- & \u2028"}
    text = script_json(data)
    assert (
        text
        == '{"response":"\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e \\u003c!-- \\u0026 \\u2028"}'
    )
    assert json.loads(text) == data


def test_opening_view_and_errors(hand_run, tmp_path, capsys):
    out = tmp_path / "view.html"
    argv = [str(hand_run / "rollouts"), "--html", str(out), "--split", "val", "--step", "0", "--intervened"]
    assert rollouts_main([*argv, "--reward", "1"]) == 0
    capsys.readouterr()
    assert embedded_data(out.read_text())["open"] == {"split": "val", "step": 0, "intervened": "yes", "reward": "1"}
    assert page_data(hand_run, page_size=2)["page_size"] == 2
    # a step without a file names the steps there are; a folder without records is named
    with pytest.raises(FileNotFoundError, match=r"no train rollout records of step 5 in .*; steps there: 0, 1"):
        write_rollouts_page(hand_run, out, step=5)
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(SystemExit):
        rollouts_main([str(empty), "--html", str(out)])
    assert f"no rollout records in {empty} (expected train/ or val/ folders" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rollouts_main([str(hand_run), "--html", str(out), "--reward", "0.5"])
    assert "--reward 0.5 is none of them" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rollouts_main([str(hand_run), "--html", str(out), "--stats"])
    assert "give one of --html and --stats" in capsys.readouterr().err
    with pytest.raises(ValueError, match="reward filter 'high' is not one of any, 1, lt1, 0, missing"):
        page_data(hand_run, reward="high")
