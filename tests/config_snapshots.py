"""Resolved-config snapshots of the rows the README and the reproduce sweeps name: each row's composed
config, interpolations resolved, as YAML under tests/snapshots/configs/ (one file per row).

    .venv/bin/python tests/config_snapshots.py --update    # rewrite every snapshot (and drop stale ones)
    .venv/bin/python tests/config_snapshots.py             # list the rows whose snapshot differs

Rows: ``make train`` (no overrides); every ``mintrl-train`` command of README.md (``--plan`` dropped; a
``-m`` multirun expanded into its jobs, the first seed only); every README table row whose first cell is
an override (``method=rail preset=cpu_sql``); every job of ``configs/sweep/reproduce_core*.yaml`` and
``reproduce_agents*.yaml`` (the first seed only); a row's ``seed`` override is dropped (every row at the config's seed). Run-specific values are fixed: ``paths.output_dir`` (:data:`config_signatures.OUTPUT_DIR`),
``PROJECT_ROOT`` unset, ``AGENTBENCH_DIR`` = :data:`AGENTBENCH_DIR`, ``${cpu_precision:}`` =
``<cpu_precision>``; the ``hydra`` node is left out.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # config_signatures, when run as a script

from config_signatures import compose_config, machine_independent_resolvers, row_options, sweep_rows  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from mintrl.build.config import CONFIG_DIR  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SNAPSHOT_DIR = REPO / "tests" / "snapshots" / "configs"
AGENTBENCH_DIR = "<AGENTBENCH_DIR>"
REGENERATE = ".venv/bin/python tests/config_snapshots.py --update"
_TABLE_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")
_COMMAND = re.compile(r"^\s*(?:\.venv/bin/)?mintrl-train\s+(.*)$")


def _expand_multirun(tokens: list[str]) -> list[list[str]]:
    """The jobs of ``mintrl-train -m <tokens>``: every comma list expanded, ``seed`` to its first value."""
    axes = []
    for token in tokens:
        key, sep, value = token.partition("=")
        values = value.split(",") if sep else [value]
        values = values[:1] if key == "seed" else values
        axes.append([f"{key}={v}" if sep else token for v in values])
    return [list(combo) for combo in itertools.product(*axes)]


def command_rows(line: str) -> list[list[str]]:
    """The rows of one ``mintrl-train`` command line (its comment dropped; ``--plan`` dropped; a
    ``-m`` multirun expanded by :func:`_expand_multirun`)."""
    match = _COMMAND.match(line)
    if not match:
        return []
    tokens = [t for t in shlex.split(match.group(1), comments=True) if t != "--plan"]
    if "-m" in tokens or "--multirun" in tokens:
        return _expand_multirun([t for t in tokens if t not in ("-m", "--multirun")])
    return [tokens]


def readme_rows(readme: Path = README) -> list[list[str]]:
    """The rows README.md names, in order of appearance, without repeats: ``make train`` (``[]``),
    each ``mintrl-train`` command (:func:`command_rows`) and each table row whose first cell is a
    backquoted list of overrides."""
    rows: list[list[str]] = [[]]
    for line in readme.read_text().splitlines():
        rows += command_rows(line)
        cell = _TABLE_ROW.match(line)
        if cell and "=" in cell.group(1) and " " not in cell.group(1).split("=", 1)[0]:
            rows.append(cell.group(1).split())
    unique: list[list[str]] = []
    for row in rows:
        if row not in unique:
            unique.append(row)
    return unique


SNAPSHOT_SWEEPS = ("reproduce_core", "reproduce_agents")  # sweeps whose names start so have their rows snapshotted


def reproduce_rows() -> list[list[str]]:
    """Every job of each sweep named ``reproduce_core*`` or ``reproduce_agents*`` (configs/sweep/), the
    first seed only."""
    sweeps = [s for s in row_options("sweep") if s.startswith(SNAPSHOT_SWEEPS)]
    with fixed_environment():
        return [row for s in sweeps for row in sweep_rows(s)]


def all_rows() -> list[list[str]]:
    """The snapshot rows: :func:`readme_rows`, then :func:`reproduce_rows`, each without its ``seed``
    override (every row at the config's seed), without repeats."""
    rows: list[list[str]] = []
    for row in readme_rows() + reproduce_rows():
        row = [o for o in row if not o.startswith("seed=")]
        if row not in rows:
            rows.append(row)
    return rows


def snapshot_name(row: list[str]) -> str:
    """The file name of a row's snapshot: its overrides joined by ``__`` (``make_train`` for none),
    ``/`` as ``-``, ``+`` dropped; e.g. ``method=rail__preset=cpu_sql.yaml``."""
    if not row:
        return "make_train.yaml"
    parts = [re.sub(r"[^A-Za-z0-9_.=,-]", "-", o.lstrip("+")) for o in row]
    return "__".join(parts) + ".yaml"


@contextmanager
def fixed_environment() -> Iterator[None]:
    """``PROJECT_ROOT`` unset and ``AGENTBENCH_DIR`` = :data:`AGENTBENCH_DIR` within the block."""
    saved = {k: os.environ.get(k) for k in ("PROJECT_ROOT", "AGENTBENCH_DIR")}
    os.environ.pop("PROJECT_ROOT", None)
    os.environ["AGENTBENCH_DIR"] = AGENTBENCH_DIR
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def composed_row(row: list[str], config_dir: str | Path = CONFIG_DIR) -> DictConfig:
    """A row's composed config, with the run-specific environment fixed (:func:`fixed_environment`)."""
    with fixed_environment():
        return compose_config(row, config_dir=config_dir)


def resolved_yaml(row: list[str], cfg: DictConfig | None = None) -> str:
    """A row's composed config (``cfg``, else :func:`composed_row`) as YAML, interpolations resolved with
    the run-specific values fixed (module docstring), values left at ``???`` kept, headed by the command
    that composes it."""
    cfg = composed_row(row) if cfg is None else cfg
    with fixed_environment(), machine_independent_resolvers():
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    command = f"mintrl-train {' '.join(row)}" if row else "make train (mintrl-train, no overrides)"
    header = f"# {command}\n# regenerate: {REGENERATE}\n"
    return header + OmegaConf.to_yaml(OmegaConf.create(resolved))


def snapshot_difference(row: list[str], snapshot_dir: Path = SNAPSHOT_DIR, cfg: DictConfig | None = None) -> str | None:
    """None where the row's snapshot file equals its composed config (``cfg``, else composed here),
    else a message: the missing file, or the first lines of the unified diff (snapshot -> composed),
    and how to regenerate."""
    path = snapshot_dir / snapshot_name(row)
    current = resolved_yaml(row, cfg)
    if not path.exists():
        return f"no snapshot {path} for `mintrl-train {' '.join(row)}`: run {REGENERATE}"
    stored = path.read_text()
    if stored == current:
        return None
    diff = difflib.unified_diff(stored.splitlines(), current.splitlines(), str(path), "composed now", lineterm="")
    lines = list(diff)
    shown = "\n".join(lines[:60]) + (f"\n... ({len(lines) - 60} more diff lines)" if len(lines) > 60 else "")
    return (
        f"the composed config of `mintrl-train {' '.join(row)}` differs from {path}:\n{shown}\n"
        f"if the change is intended, run {REGENERATE} and commit tests/snapshots/"
    )


def update(snapshot_dir: Path = SNAPSHOT_DIR) -> list[Path]:
    """Write every row's snapshot and remove the files of rows that no longer exist; returns the
    files written."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for row in all_rows():
        path = snapshot_dir / snapshot_name(row)
        path.write_text(resolved_yaml(row))
        written.append(path)
    for stale in set(snapshot_dir.glob("*.yaml")) - set(written):
        stale.unlink()
    return written


def main(argv: list[str] | None = None) -> int:
    """``--update``: rewrite the snapshots; else print each row whose snapshot differs (exit 1 if any)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite every snapshot and drop stale ones")
    args = parser.parse_args(argv)
    if args.update:
        for path in update():
            print(path.relative_to(REPO))
        return 0
    differences = [d for d in (snapshot_difference(r) for r in all_rows()) if d]
    print("\n\n".join(differences) or "every snapshot matches")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
