"""One self-contained HTML page of a run's rollout records (``mintrl-rollouts RUN --html OUT.html``).

The page (template: ``rollouts_page.html`` next to this module) needs no network: its CSS and script
are inline and the records (format: :mod:`mintrl.rollout.records`) are one JSON document in a
``<script type="application/json" id="mintrl-data">`` element, with every ``<``, ``>`` and ``&``
written as a JSON ``\\u`` escape so that no response text (``</script>``, HTML, ``<!--``) can end
the element. The script renders only the selected step's rollouts that pass the filters, one page
(:data:`PAGE_SIZE` rollouts) at a time, each with its tokens coloured by provenance (CSS classes
:data:`TOKEN_CLASSES`), the judge's verdicts, reward, advantage and an episode's turns; above them
the ``--stats`` tables of both splits (:func:`mintrl.analysis.rollouts.format_stats`).

The view is read from the URL fragment at load and written back on each change:
``page.html#split=train&step=1&intervened=yes&reward=1&group=0&kind=semi&page=2`` (``intervened``:
``any|yes|no``; ``reward``: ``any|1|lt1|0|missing``, i.e. = 1, < 1, = 0 or no reward; ``kind``:
``any|control|semi``); a missing or unknown value falls back to the view the page was written with.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path

from mintrl.analysis.rollouts import format_stats, read_records, record_files, records_root, summary_line
from mintrl.rollout.records import SPLITS

PAGE_SIZE = 50  # rollouts rendered per page
TOKEN_CLASSES = {
    "policy": "tok-policy",
    "intervention": "tok-intervention",
    "guide": "tok-guide",
    "environment": "tok-env",
}  # the CSS class of each provenance (the records' ``segments[].by``)
REWARD_FILTERS = ("any", "1", "lt1", "0", "missing")  # the page's reward filter values
TEMPLATE = "rollouts_page.html"
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(data) -> str:
    """``data`` as JSON text that is safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the
    line separators U+2028/U+2029 are written as ``\\u`` escapes (they can only occur inside JSON
    strings, so ``JSON.parse`` gives back the same strings), so ``</script>`` or ``<!--`` in a
    response cannot end the element or change how the HTML parser reads it.

    Raises:
        ValueError: ``data`` holds NaN or an infinity (JSON has none).
        TypeError: ``data`` holds something JSON cannot encode.
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_ESCAPES[m.group(0)], text)


def _markdown_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def stats_html(run: str | Path, split: str) -> str:
    """The ``--stats`` table of one split (:func:`mintrl.analysis.rollouts.format_stats`) as an HTML
    table ``#stats-<split>`` with a heading; each step's row carries ``data-split`` and ``data-step``
    (the pooled row: ``data-step="all"``).

    Raises:
        FileNotFoundError, ValueError: see :func:`mintrl.analysis.rollouts.record_files`.
    """
    lines = format_stats(run, split).splitlines()
    header, rows = _markdown_cells(lines[0]), [_markdown_cells(line) for line in lines[2:]]
    out = [f"<h2>{split}: what the judge and the intervention did</h2>", f'<table id="stats-{split}">']
    out.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
    for row in rows:
        attrs = f' data-split="{split}" data-step="{html.escape(row[0])}"'
        out.append(f"<tr{attrs}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def page_data(
    run: str | Path,
    split: str = "train",
    step: int | None = None,
    intervened: bool = False,
    reward: str = "any",
    page_size: int = PAGE_SIZE,
) -> dict:
    """What the page embeds: ``{"splits": {split: {"steps": {"<step>": {"file", "summary", "records"}}}},
    "open": {...}, "page_size"}`` with every record of both splits (a split without record files has
    no steps), each step's :func:`mintrl.analysis.rollouts.summary_line`, and the view the page opens
    on (``split``, ``step``: None for its first step, ``intervened``: ``yes`` or ``any``, ``reward``).

    Args:
        run: a run folder or its ``rollouts`` folder. split, step: the step shown first.
        intervened: open with only the rollouts with intervention tokens shown.
        reward: the reward filter to open with (one of :data:`REWARD_FILTERS`).
        page_size: rollouts per page (>= 1).

    Raises:
        FileNotFoundError: no record file of either split under the run (the message names the
            records folder), or none of ``split`` at ``step`` (the message names the steps there are).
        ValueError: ``split``, ``reward`` or ``page_size`` out of range.
    """
    if reward not in REWARD_FILTERS:
        raise ValueError(f"reward filter {reward!r} is not one of {', '.join(REWARD_FILTERS)}")
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if step is not None:
        record_files(run, split, step)  # the opening step exists (else the error naming the steps there are)
    splits = {}
    for name in SPLITS:
        try:
            files = record_files(run, name)
        except FileNotFoundError:
            files = []
        steps = {}
        for s, path in files:
            records = read_records(path)
            steps[str(s)] = {"file": path.name, "summary": summary_line(records), "records": records}
        splits[name] = {"steps": steps}
    if not any(v["steps"] for v in splits.values()):
        raise FileNotFoundError(
            f"no rollout records in {records_root(run)} (expected train/ or val/ folders of step_<N>.jsonl.gz files, "
            "written by a training run with callbacks.records.enabled=true)"
        )
    open_view = {"split": split, "step": step, "intervened": "yes" if intervened else "any", "reward": reward}
    return {"splits": splits, "open": open_view, "page_size": int(page_size)}


def rollouts_page(
    run: str | Path,
    split: str = "train",
    step: int | None = None,
    intervened: bool = False,
    reward: str = "any",
    page_size: int = PAGE_SIZE,
) -> str:
    """The page's HTML text (arguments and errors: :func:`page_data`): the template with the run's
    name (its folder's last two parts), its records folder, the ``--stats`` tables of the splits that have records
    (:func:`stats_html`) and the records' JSON (:func:`script_json`)."""
    data = page_data(run, split, step, intervened, reward, page_size)
    root = records_root(run).resolve()
    folder = root.parent if root.name == "rollouts" else root
    name = f"{folder.parent.name}/{folder.name}"  # e.g. runs/<date>, or <multirun>/<job>
    parts = {
        "TITLE": html.escape(f"mintrl rollouts: {name}"),
        "SOURCE": html.escape(str(root)),
        "STATS": "\n".join(stats_html(run, s) for s, v in data["splits"].items() if v["steps"]),
        "DATA": script_json(data),
    }
    template = resources.files("mintrl.analysis").joinpath(TEMPLATE).read_text(encoding="utf-8")
    # one pass: text put in is never searched again for placeholders
    return re.sub(r"__MINTRL_([A-Z]+)__", lambda m: parts[m.group(1)], template)


def write_rollouts_page(run: str | Path, out: str | Path, **view) -> Path:
    """Write :func:`rollouts_page` of ``run`` to ``out`` (UTF-8; parent folders created); ``view``:
    the keyword arguments of :func:`page_data`. Returns ``out`` as a path.

    Raises:
        FileNotFoundError, ValueError: see :func:`page_data`. OSError: ``out`` cannot be written.
    """
    text = rollouts_page(run, **view)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
