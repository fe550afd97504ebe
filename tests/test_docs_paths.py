"""The user's and contributor's documents name only files that exist: every path in
backticks that starts at a top-level folder of the repository, and every Python file named
in backticks (a bare name is looked for anywhere in the repository), resolves to a file or
folder of this checkout. A module moved or removed without its docs fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "CONTRIBUTING.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
TOP = ("searchmaps/", "tests/", "benchmarks/", "experiments/", "results/", "docs/", "spaces/", ".ci/")
SKIP_DIRS = {".venv", ".git", "node_modules", "__pycache__"}


def repo_files() -> set[str]:
    out = set()
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if rel.parts and rel.parts[0] in SKIP_DIRS or any(part in SKIP_DIRS for part in rel.parts):
            continue
        out.add(str(rel))
    return out


def named_paths(text: str) -> set[str]:
    """Backticked tokens that read as paths of this repository (a top-level folder first, or a
    ``.py`` file); placeholders (``<study>``, ``*``, ``{a,b}``) and shell lines are left out."""
    names = set()
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.strip().rstrip(".,:;")
        if " " in token or any(c in token for c in "<>*{}$~"):
            continue
        if token.startswith(TOP) or token.endswith(".py"):
            names.add(token.split("::")[0])
    return names


def resolves(name: str, doc: str, files: set[str]) -> bool:
    name = name.rstrip("/")
    candidates = [name, f"searchmaps/{name}", f"tests/{name}", str(Path(doc).parent / name)]
    if any(c in files for c in candidates):
        return True
    if "/" not in name:  # a bare file name: anywhere in the repository
        return any(f.endswith("/" + name) or f == name for f in files)
    return any(f.endswith("/" + name) for f in files)  # a path inside a folder the doc is about


@pytest.fixture(scope="module")
def files():
    return repo_files()


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_a_document_names_exists(doc, files):
    missing = sorted(n for n in named_paths((ROOT / doc).read_text()) if not resolves(n, doc, files))
    assert not missing, f"{doc} names files this checkout lacks: {missing}"


def test_the_check_finds_a_missing_module(files):
    """The check is not vacuous: a renamed module is found missing, a real one is not."""
    text = "see `searchmaps/no_such_room.py` and `searchmaps/maps.py` and `test_no_such_file.py`"
    assert named_paths(text) == {"searchmaps/no_such_room.py", "searchmaps/maps.py", "test_no_such_file.py"}
    assert [n for n in sorted(named_paths(text)) if not resolves(n, "docs/x.md", files)] == [
        "searchmaps/no_such_room.py", "test_no_such_file.py"]


def test_the_readme_stays_a_users_document_of_at_most_250_lines():
    """README is install, the two commands, one example per command, the outputs, the report
    and dashboard, stop/resume, a cluster and the committed findings (the generated block
    included); detail goes to docs/ with a one-line pointer (issue 45), so it cannot creep back."""
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"README.md has {n} lines (at most 250): move detail to the docs/ page it belongs to"


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation other than
    ``-`` and ``_`` dropped, spaces to ``-``, a repeated one suffixed ``-1``, ``-2``, ...;
    lines inside fenced code are not headings."""
    anchors, seen, fenced = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} (.+)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_to_a_heading_finds_it(doc):
    """A link `[x](page.md#anchor)` (or `(#anchor)` in the same page) points at a heading the
    page has, so text moved between README and docs/ keeps its pointers live."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
        path = (ROOT / doc).parent / target if target else ROOT / doc
        if path.is_dir():
            path = path / "README.md"
        if not path.is_file() or anchor not in heading_anchors(path.read_text(encoding="utf-8")):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc} links to headings that do not exist: {broken}"


def test_the_anchor_check_follows_githubs_rules():
    text = "# Outputs: `results/<study>/`\n```\n# not a heading\n```\n## Packed seeds (`--pack-seeds`)\n## Data\n## Data\n"
    assert heading_anchors(text) == {"outputs-resultsstudy", "packed-seeds---pack-seeds", "data", "data-1"}
