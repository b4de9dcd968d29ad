"""The run manifest, manifest.json (mintrl.core.manifest): the commit of a git checkout, clean and with uncommitted
changes, outside a repository, and what a run folder's file gives back."""

from __future__ import annotations

import calendar
import json
import subprocess
import time

import pytest

from mintrl.core import manifest as pv


def _git(cwd, *args):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env={**env, "PATH": "/usr/bin:/bin"}
    ).stdout.strip()


def test_commit_of_a_checkout_clean_then_with_uncommitted_changes(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert pv.git_commit(tmp_path) == head and len(head) == 40
    (tmp_path / "untracked.txt").write_text("not part of the tree\n")
    assert pv.git_commit(tmp_path) == head  # untracked files do not make the tree dirty
    (tmp_path / "a.py").write_text("x = 2\n")
    assert pv.git_commit(tmp_path) == head + " (uncommitted changes)"


def test_commit_is_unknown_outside_a_repository(tmp_path):
    assert pv.git_commit(tmp_path) == "unknown"


def test_written_file_reads_back_and_names_the_imported_package(tmp_path):
    path = pv.write_manifest(tmp_path / "run", argv=["mintrl-train", "seed=3"])
    data = json.loads(path.read_text())
    assert path == tmp_path / "run" / "manifest.json"
    assert data["argv"] == ["mintrl-train", "seed=3"]
    assert data["source"] == str(pv.source_dir()) and data["source"].endswith("mintrl")
    assert data["started_utc"].endswith("Z") and len(data["started_utc"]) == 20
    assert set(data["machine"]) == {"platform", "processor", "cpu_count", "python", "torch"}
    assert pv.read_commit(tmp_path / "run") == data["commit"] != ""
    assert pv.read_started(tmp_path / "run") == calendar.timegm(
        time.strptime(data["started_utc"], "%Y-%m-%dT%H:%M:%SZ")
    )


def test_read_commit_without_file_or_with_a_broken_one(tmp_path):
    assert pv.read_commit(tmp_path) is None and pv.read_started(tmp_path) is None
    (tmp_path / "manifest.json").write_text("{not json")
    assert pv.read_started(tmp_path) is None
    with pytest.raises(ValueError, match="manifest.json"):
        pv.read_commit(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"commit": ""}))
    assert pv.read_commit(tmp_path) is None
