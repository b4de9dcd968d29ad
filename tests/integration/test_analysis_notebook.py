"""The analysis notebook executes headless on the fabricated multirun (tests/multirun_helpers.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository


def test_analysis_notebook_executes_headless(multirun, monkeypatch, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    runs = {"none": str(multirun / "0"), "reviews1": str(multirun / "1"), "no events": str(multirun / "10")}
    monkeypatch.setenv("MINTRL_RUNS", json.dumps(runs))
    monkeypatch.setenv("MINTRL_MULTIRUN", str(multirun))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "notebooks" / "analysis.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('PREFIX=' + sys.prefix)"))
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"PREFIX={sys.prefix}" in text  # the kernel runs this venv's python
    assert "skipped no events" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # training dynamics + Figure 6
    tables = "".join(o["data"].get("text/markdown", "") for o in outputs if "data" in o)
    assert "| 1 | rollout.max_reviews=1 | 0.020 | 0.350 | +0.050 |" in tables
