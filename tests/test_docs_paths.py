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
