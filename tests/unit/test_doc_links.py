"""Every relative link of the user documentation resolves.

Checked files: ``README.md``, ``docs/*.md`` and ``benchmarks/README.md``. A link is an inline markdown
link or image, ``[text](target)`` / ``![alt](target)``, or a reference definition ``[label]: target``,
outside fenced code blocks and inline code spans. ``http(s)://`` and ``mailto:`` targets are skipped.
A target's path is resolved relative to the file holding the link and must exist; a ``#anchor``
(alone: the same file) must equal the slug of a heading of the target file, by GitHub's rule:
lowercase, markup removed, every character but letters, digits, ``_``, ``-`` and spaces dropped,
spaces turned into ``-``, and ``-1``, ``-2``, ... appended to repeated slugs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:.+?)\1")
# [text](target "title") or ![alt](target); the text may hold one level of nested brackets
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target "title", which CommonMark reads as a definition only where it starts a paragraph
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?\s*(?:\"[^\"]*\"|'[^']*'|\([^)]*\))?\s*$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SKIPPED = ("http://", "https://", "mailto:")


def doc_files() -> list[Path]:
    """The checked markdown files, relative order fixed."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines outside fenced code blocks."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is None:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text (before the duplicate suffix)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w: letters, digits and _ (unicode letters kept, as GitHub does)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, duplicates suffixed ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """``(line number, target)`` of every link in ``path``'s prose (inline code spans removed)."""
    out, previous = [], ""
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        ref = REFERENCE.match(line)
        starts_paragraph = not previous.strip() or REFERENCE.match(previous)
        previous = line
        if ref and starts_paragraph:
            out.append((n, ref.group(1)))
            continue
        for m in INLINE_LINK.finditer(INLINE_CODE.sub("", line)):
            out.append((n, m.group(1)))
    return out


def broken_links(path: Path) -> list[str]:
    """A message per relative link of ``path`` whose file or heading anchor does not exist."""
    problems = []
    for n, target in links(path):
        if not target or target.startswith(SKIPPED):
            if not target:
                problems.append(f"{path.name}:{n}: empty link target")
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        if not dest.exists():
            problems.append(f"{path.name}:{n}: {target!r}: no file {dest}")
            continue
        if anchor:
            if dest.is_dir() or dest.suffix.lower() != ".md":
                problems.append(f"{path.name}:{n}: {target!r}: an anchor into a file that is not markdown")
            elif anchor.lower() not in anchors(dest):
                problems.append(f"{path.name}:{n}: {target!r}: no heading with anchor #{anchor} in {dest.name}")
    return problems


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert path.is_file(), f"{path} is missing"
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_checker_finds_broken_links_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    heading = "## Faults: what `judge/failed` means\n\n"
    (tmp_path / "docs" / "guide.md").write_text("# A guide\n\n" + heading + heading)
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n"
        "[ok](docs/guide.md) [ok anchor](docs/guide.md#faults-what-judgefailed-means)\n"
        "[repeated heading](docs/guide.md#faults-what-judgefailed-means-1) [self](#title)\n"
        "[web](https://example.org/missing) `[code span](missing.md)`\n"
        "```\n[in a fence](missing.md)\n```\n"
        "[no file](docs/missing.md)\n"
        "[no heading](docs/guide.md#no-such-heading)\n"
        "[0.1, 0.2]: not a definition inside a paragraph\n"
        "\n[ref]: docs/also-missing.md\n"
    )
    problems = broken_links(readme)
    assert len(problems) == 3, problems
    assert "README.md:8" in problems[0] and "docs/missing.md" in problems[0]
    assert "README.md:9" in problems[1] and "#no-such-heading" in problems[1]
    assert "README.md:12" in problems[2] and "also-missing.md" in problems[2]


@pytest.mark.parametrize(
    "heading, expected",
    [
        ("Two commands", "two-commands"),
        ("Faults: retries, timeouts, fallbacks", "faults-retries-timeouts-fallbacks"),
        ("`env=shell`: one sandboxed bash per episode", "envshell-one-sandboxed-bash-per-episode"),
        ("LoRA (`model/lora=default`)", "lora-modelloradefault"),
        ("12 steps: MInTRL-Const vs GRPO on `sql_lookup`", "12-steps-mintrl-const-vs-grpo-on-sql_lookup"),
        ("[Linked](x.md) heading", "linked-heading"),
    ],
)
def test_slug_follows_githubs_rule(heading, expected):
    assert slug(heading) == expected
