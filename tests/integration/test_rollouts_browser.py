"""The page of ``mintrl-rollouts RUN --html`` in headless Chromium: the view in the URL fragment (step,
split, filters, page) decides which rollouts the page's script renders, and the rendered DOM
(``--dump-dom`` after the script ran) shows each record's tokens with its provenance class.

Needs ``/usr/bin/chromium`` (Debian's ``chromium``; ``make browser`` installs it, ``make test-slow``
runs it first); skipped without it."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from records_helpers import INTERVENING, RECORDS_ONLY
from test_rollouts_html import XSS, hand_records

from mintrl.analysis.rollouts import read_records, record_files, summary_line
from mintrl.analysis.rollouts_html import TOKEN_CLASSES, write_rollouts_page
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.cli.rollouts import main as rollouts_main
from mintrl.rollout.records import RecordWriter

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(),
    reason="needs headless Chromium at /usr/bin/chromium (`make browser`: apt-get install chromium chromium-driver)",
)


class Dom(HTMLParser):
    """What the rendered page shows: the rendered rollouts (their ``data-*`` attributes and response
    runs as ``(class, text)``), the selected option of each ``<select>``, and the text of
    ``#summary`` and ``#shown``."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.rollouts: list[dict] = []
        self.selected: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.tags_in_rollouts: set[str] = set()
        self._select = self._text_id = self._span = None
        self._in_response = self._in_rollouts = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if self._in_rollouts:
            self.tags_in_rollouts.add(tag)
        if tag == "main" and a.get("id") == "rollouts":
            self._in_rollouts = True
        elif tag == "article" and "rollout" in classes:
            self.rollouts.append({k[5:]: v for k, v in a.items() if k.startswith("data-")} | {"segments": []})
        elif tag == "pre" and "response" in classes:
            self._in_response = True
        elif tag == "span" and self._in_response and "tok" in classes:
            self._span = [c for c in classes if c != "tok"][0]
            self.rollouts[-1]["segments"].append((self._span, ""))
        elif tag == "select":
            self._select = a["id"]
        elif tag == "option" and "selected" in a:
            self.selected[self._select] = a["value"]
        elif tag == "p" and a.get("id") in ("summary", "shown"):
            self._text_id = a["id"]
            self.texts[self._text_id] = ""

    def handle_endtag(self, tag):
        if tag == "main":
            self._in_rollouts = False
        elif tag == "pre":
            self._in_response = False
        elif tag == "span":
            self._span = None
        elif tag == "p":
            self._text_id = None

    def handle_data(self, data):
        if self._span is not None:
            cls, text = self.rollouts[-1]["segments"][-1]
            self.rollouts[-1]["segments"][-1] = (cls, text + data)
        if self._text_id is not None:
            self.texts[self._text_id] += data


def dump_dom(page: Path, fragment: str, profile: Path) -> Dom:
    """The DOM of ``page#fragment`` after its script ran (Chromium ``--dump-dom``, 5 s of virtual time)."""
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # as root in a container
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            f"{page.as_uri()}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return Dom(result.stdout)


def segments(record: dict) -> list[tuple[str, str]]:
    """The response runs of a record as the page should render them: ``(class, text)``."""
    return [(TOKEN_CLASSES[s["by"]], s["text"]) for s in record["segments"]]


def rows(dom: Dom) -> list[int]:
    return [int(r["row"]) for r in dom.rollouts]


def test_hostile_and_agent_records_render_as_text(tmp_path):
    writer = RecordWriter(tmp_path / "rollouts", max_mib=None)
    for (split, step), records in hand_records().items():
        writer.write(split, step, records)
    page = write_rollouts_page(tmp_path, tmp_path / "page.html")
    dom = dump_dom(page, "step=1", tmp_path / "profile")
    records = hand_records()[("train", 1)]
    assert rows(dom) == [0, 1] and dom.selected["step"] == "1"
    # the response "</script><script>alert(1)</script> <img ...>" is text of its span, no element
    assert dom.rollouts[0]["segments"] == [("tok-policy", XSS), ("tok-policy", " <img src=x onerror=alert(2)>")]
    assert "img" not in dom.tags_in_rollouts and "script" not in dom.tags_in_rollouts
    # the episode: its observation turn coloured as environment tokens
    assert dom.rollouts[1]["segments"] == segments(records[1])
    assert ("tok-env", "1 <b>row</b>") in dom.rollouts[1]["segments"]
    # step 0: the intervention and guide runs; the reward filter "missing" keeps the row without a reward
    dom0 = dump_dom(page, "step=0", tmp_path / "profile")
    assert [r["segments"] for r in dom0.rollouts] == [segments(r) for r in hand_records()[("train", 0)]]
    assert dom0.rollouts[1]["segments"] == [("tok-intervention", "<answer>1</answer>")]
    missing = dump_dom(page, "step=0&reward=missing", tmp_path / "profile")
    assert rows(missing) == [2] and missing.rollouts[0]["reward"] == "none" and missing.selected["reward"] == "missing"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, embedded):
    """A 2-step run of the main job at test size whose judge revises chunks (the settings of
    tests/integration/test_rollout_records.py) and its page, written by ``mintrl-rollouts --html``
    with 3 rollouts per page (``write_rollouts_page``)."""
    out = tmp_path_factory.mktemp("browser_run")
    overrides = [
        f"paths.output_dir={out}",
        "trainer.max_steps=2",
        "data.prompts_per_step=2",
        "data.prompts.val_size=2",
        "data.val_samples_per_prompt=1",
        "rollout.max_response_tokens=24",
        "rollout.chunk_size=8",
        "rollout.continuation_len=8",
        "rollout.progress=false",
        *INTERVENING,  # the rule judge revises chunks at seed 3: there are intervention tokens
        *RECORDS_ONLY,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    run(cfg)
    page = out / "page.html"
    assert rollouts_main([str(out), "--html", str(page)]) == 0
    small = write_rollouts_page(out, out / "small_pages.html", page_size=3)
    return out, page, small


@pytest.mark.slow
def test_step_selector_and_filters_change_what_is_shown(real_run):
    out, page, small = real_run
    profile = out / "profile"
    train = {step: read_records(path) for step, path in record_files(out, "train")}
    assert sorted(train) == [0, 1] and [len(v) for v in train.values()] == [8, 8]
    # the step selector: each step shows its own 8 rollouts, with the summary of its file
    doms = {step: dump_dom(page, f"split=train&step={step}", profile) for step in (0, 1)}
    for step, dom in doms.items():
        assert dom.selected["step"] == str(step) and dom.selected["split"] == "train"
        assert [r["step"] for r in dom.rollouts] == [str(step)] * 8 and rows(dom) == list(range(8))
        assert [r["segments"] for r in dom.rollouts] == [segments(r) for r in train[step]]
        assert [r["reward"] for r in dom.rollouts] == [str(r["reward"]).removesuffix(".0") for r in train[step]]
        assert dom.texts["summary"] == f"train step {step}: {summary_line(train[step])}"
        assert dom.texts["shown"] == "8 of 8 rollouts shown"
    assert doms[0].rollouts != doms[1].rollouts
    # the intervened filter: yes shows exactly the rollouts with intervention tokens, no the others
    intervened = [r["row"] for r in train[0] if r["tokens"]["intervention"] > 0]
    assert 0 < len(intervened) < 8
    yes = dump_dom(page, "step=0&intervened=yes", profile)
    no = dump_dom(page, "step=0&intervened=no", profile)
    assert rows(yes) == intervened and yes.selected["intervened"] == "yes"
    assert rows(no) == [r for r in range(8) if r not in intervened]
    assert yes.texts["shown"] == f"{len(intervened)} of 8 rollouts shown"
    # intervention tokens carry their colour class: each intervened response has a tok-intervention run
    # whose text is what the intervention wrote
    for shown in yes.rollouts:
        record = train[0][int(shown["row"])]
        written = "".join(s["text"] for s in record["segments"] if s["by"] == "intervention")
        assert "".join(text for cls, text in shown["segments"] if cls == "tok-intervention") == written != ""
    assert all(cls != "tok-intervention" for r in no.rollouts for cls, _ in r["segments"])
    # the reward and group filters
    zero = dump_dom(page, "step=1&reward=0", profile)
    assert rows(zero) == [r["row"] for r in train[1] if r["reward"] == 0.0]
    group = dump_dom(page, "step=1&group=1", profile)
    assert rows(group) == [4, 5, 6, 7] and group.selected["group"] == "1"
    # validation records: the split selector
    val = read_records(record_files(out, "val")[-1][1])
    last = record_files(out, "val")[-1][0]
    dom = dump_dom(page, f"split=val&step={last}", profile)
    assert dom.selected["split"] == "val" and rows(dom) == [r["row"] for r in val]
    # pages of 3 rollouts: page 3 of step 0 holds rows 6 and 7
    paged = dump_dom(small, "step=0&page=3", profile)
    assert rows(paged) == [6, 7] and paged.texts["shown"] == "8 of 8 rollouts shown, 7-8 on this page"
