"""mintrl.analysis is split by concern: every module stays short, and none reaches into another mintrl
module's private (underscore) names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[2] / "src" / "mintrl" / "analysis"
MAX_LINES = 500
MODULES = sorted(ANALYSIS.glob("*.py"))


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a chain of names and attributes, None for any other expression."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_uses(tree: ast.Module) -> list[str]:
    """The private names (one leading underscore) a module takes from mintrl modules, sorted, as
    ``module.name``: ``from mintrl.x import _y``, and ``m._y`` or ``mintrl.x._y`` where ``m`` is bound by an
    import of a mintrl module or name (``import mintrl.x``, ``import mintrl.x as m``, ``from mintrl import x``)."""
    found, bound = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mintrl":
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mintrl":
                    bound[alias.asname or "mintrl"] = alias.name if alias.asname else "mintrl"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = dotted(node.value)
            root = base.split(".")[0] if base else None
            if root in bound:
                found.append(f"{bound[root]}{base[len(root) :]}.{node.attr}")
    return sorted(found)


def test_the_checker_finds_private_imports():
    source = (
        "from mintrl.analysis.runs import _job_order, find_jobs\n"
        "import mintrl.analysis.stats as st\n"
        "from mintrl.analysis import tables\n"
        "import mintrl.analysis.plots\n"
        "st._t975(2); tables._hidden; tables.cell('x'); find_jobs.__doc__; mintrl.analysis.plots._x\n"
        "def f(_local):\n    return _local._y\n"
    )
    assert private_uses(ast.parse(source)) == [
        "mintrl.analysis.plots._x",
        "mintrl.analysis.runs._job_order",
        "mintrl.analysis.stats._t975",
        "mintrl.analysis.tables._hidden",
    ]


def test_the_package_has_its_modules():
    names = {p.stem for p in MODULES}
    assert {"stats", "runs", "measures", "summary", "rows", "tables", "claims", "plots", "report"} <= names
    assert {"knob_effects", "tensorboard", "rollouts", "keywords"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_every_module_is_short_and_uses_only_public_names(path):
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: {len(text.splitlines())} lines"
    assert private_uses(ast.parse(text)) == [], path.name
