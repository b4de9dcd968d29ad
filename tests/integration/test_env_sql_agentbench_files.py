"""env=sql on AgentBench's own DB-bench files (a local checkout named by AGENTBENCH_DIR): at least 95% of the
rows load, and at least 95% of the loaded rows' own reference actions score 1 in the environment."""

from __future__ import annotations

import os

import pytest

from mintrl.env.sql.coverage import dbbench_files, file_coverage

TARGET = 0.95  # share of rows loaded, and of loaded rows whose reference scores 1
REQUIRED = ("dev.jsonl", "standard.jsonl")  # the files whose rows hold their tables


@pytest.mark.slow  # about 1 s on 2 cores (360 rows); needs a local AgentBench checkout
def test_agentbench_db_files_load_and_their_references_score():
    root = os.environ.get("AGENTBENCH_DIR")
    if not root:
        pytest.skip("AGENTBENCH_DIR is not set: point it at a checkout of THUDM/AgentBench (or its data/dbbench)")
    files = {os.path.basename(p): p for p in dbbench_files(root)}
    assert set(REQUIRED) <= set(files), f"{root}: no {REQUIRED} in it or in its data/dbbench (found {sorted(files)})"
    for name, path in sorted(files.items()):
        report = file_coverage(path)
        print(report.summary())
        for index, reason in report.refused.items():
            print(f"  refused {index}: {reason}")
        if name not in REQUIRED and (report.error or not report.rows):
            continue  # a file this checkout lacks the contents of (a Git LFS pointer, an empty blob)
        assert report.error is None, f"{name}: {report.error}"
        on_sqlite_files = sum("field 'user_sqlite'" in r for r in report.refused.values())
        eligible = report.rows - on_sqlite_files  # rows whose database is in the row
        if eligible == 0:
            continue
        assert report.loaded >= TARGET * eligible, report.summary()
        assert report.scored >= TARGET * report.loaded, report.summary()
