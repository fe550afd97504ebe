"""The committed study folders, as ``results/studies.txt`` lists them (issue 46: ``bash dev.sh
demo``, the README's first command, writes its study into ``results/`` too, and a user's own
study there must change nothing the committed findings say or the tests compare).

Every generator of findings across studies (``quote_findings.py``, ``findings_across.py``,
``supernet-methods/supernet_methods.py``) and the tests that check the committed pages take
their folders from :func:`folders`, never from every folder under ``results/``. The manifest
is one folder name a line; lines starting with ``#`` and blank lines are skipped. A folder it
lists that is missing is an error (a typo, or a study deleted without its line), not a study
quietly left out; ``tests/test_committed_studies.py`` checks it lists exactly the study folders
git tracks.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent
MANIFEST = "studies.txt"


def names(results: Path = RESULTS) -> list[str]:
    """The folder names ``results/studies.txt`` lists, in its order."""
    lines = (Path(results) / MANIFEST).read_text(encoding="utf-8").splitlines()
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def folders(file: str | None = None, results: Path = RESULTS) -> list[Path]:
    """The committed study folders under ``results`` (sorted by name), only those holding
    ``file`` when it is given; FileNotFoundError for a listed folder that is not there."""
    out = []
    for name in sorted(names(results)):
        folder = Path(results) / name
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: listed in {Path(results) / MANIFEST} but not there")
        if file is None or (folder / file).is_file():
            out.append(folder)
    return out
