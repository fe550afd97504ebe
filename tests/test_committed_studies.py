"""The committed studies are the folders ``results/studies.txt`` lists, and only those reach the
findings (issue 46): ``bash dev.sh demo``, the README's first command, writes its study into
``results/`` too, and a user's own study there must change nothing the generated findings say
or the staleness checks compare. The manifest lists exactly the study folders git tracks, so a
newly committed study cannot be left out of the findings by mistake."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from helpers import ROOT, committed_folders, results_script

RESULTS = ROOT / "results"
# what a user's own runs leave in results/: the demo's study (the same command's folder name), a
# ladder, and a supernet under the name `searchmaps-supernet --space ilr4` gives it (it starts with
# the committed supernets' prefix): copies of committed folders, so every generator that read all
# of results/ would count them (a summary.csv with a baseline, an equal_flops.csv, a
# supernet_validation.csv)
USER_STUDIES = {"ilr4-rope-b3.7e06-tok2e05": "ilr-table1-rope-tokens",
                "ilr-table1-rope-ladder-b5e12": "ilr-table1-rope-ladder",
                "ilr4-supernet-uniform-b1e+07": "ilr4-supernet-uniform"}
MARK = ".pytest-"  # in the name of every folder these tests put in results/, before the pid of their run


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _sweep_leftovers() -> None:
    """Remove the folders a killed run of these tests left in results/ (its process is gone;
    .gitignore keeps them out of a commit meanwhile)."""
    for folder in RESULTS.glob(f"*{MARK}*"):
        pid = folder.name.split(MARK, 1)[1].split("-", 1)[0]
        if not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def user_studies():
    """The folders of :data:`USER_STUDIES` in results/, each name made unique (this run's pid, a
    random part) so no user's own folder is touched, and removed on the way out, the test passed
    or not."""
    _sweep_leftovers()
    made = []
    try:
        for name, source in USER_STUDIES.items():
            made.append(RESULTS / f"{name}{MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
            shutil.copytree(RESULTS / source, made[-1], ignore=shutil.ignore_patterns("report.html", "optuna.db*"))
        yield made
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def _generated() -> dict[str, object]:
    """Everything the cross-study generators make from results/, computed now."""
    quote = results_script("quote_findings.py")
    across = results_script("findings_across.py")
    return {"pages": quote.PAGES, "blocks": {page: quote.block(page) for page in quote.PAGES},
            "readme": quote.readme_block(), "equal_tokens": across.equal_tokens(),
            "equal_flops": across.equal_flops(), "supernets": across.supernets()}


def test_the_manifest_lists_exactly_the_study_folders_git_tracks():
    """Each line of results/studies.txt a study folder that is there (a study.json or a
    supernet.json), none twice; with git, the same set as the study folders git tracks, so a
    study committed without its line (or a line left for a folder deleted) fails here."""
    names = results_script("committed_studies.py").names()
    assert len(names) == len(set(names)) >= 38
    assert [f.name for f in committed_folders()] == sorted(names)  # every listed folder is there
    for name in names:
        assert (RESULTS / name / "study.json").is_file() or (RESULTS / name / "supernet.json").is_file(), name
    git = shutil.which("git")
    inside = git and subprocess.run([git, "-C", str(ROOT), "rev-parse", "--is-inside-work-tree"],
                                    capture_output=True, text=True).stdout.strip() == "true"
    if not inside:
        pytest.skip("not a git checkout (or no git): the manifest is checked against git's files only there")
    files = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z", "results"], capture_output=True, text=True,
                           check=True).stdout.split("\0")
    tracked = {p.split("/")[1] for p in files if p.count("/") == 2 and p.rsplit("/", 1)[1] in ("study.json",
                                                                                                "supernet.json")}
    assert tracked, "git tracks no study folder under results/"
    assert not tracked - set(names), f"committed but not in results/studies.txt: {sorted(tracked - set(names))}"
    assert not set(names) - tracked, f"in results/studies.txt but not committed: {sorted(set(names) - tracked)}"


def test_a_study_folder_the_manifest_does_not_list_changes_nothing_the_generators_make():
    """With a user's demo study, ladder and supernet in results/ (copies of committed folders:
    every file the generators read, under names that are not in the manifest), every folder
    list, quoted block and finding across studies is what it is without them."""
    before = _generated()
    with user_studies() as mine:
        assert all(f.is_dir() for f in mine)
        assert not {f.name for f in mine} & {f.name for f in committed_folders()}
        after = _generated()
        assert not {f.name for f in mine} & {f for folders in after["pages"].values() for f in folders}
    assert after == before
    assert not list(RESULTS.glob(f"*{MARK}{os.getpid()}-*"))  # nothing left behind


def test_the_newcomers_path_the_staleness_checks_pass_with_a_users_study_in_results():
    """``bash dev.sh demo`` then ``bash dev.sh test``: with a user's own studies in results/, the
    committed pages' checks, run as their commands, still find nothing stale (quote_findings.py
    --check, the attribution page's findings.py --check, the supernet-methods tables)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *args: subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,  # noqa: E731
                                       env=env)
    page = (RESULTS / "supernet-methods" / "README.md").read_text(encoding="utf-8")
    with user_studies():
        for script in ("results/quote_findings.py", "results/ilr-table1-attribution/findings.py"):
            out = run(script, "--check")
            assert out.returncode == 0, (script, out.stdout, out.stderr)
        for name, extra in (("ilr-table1", []), ("ilr4", ["ilr4", "results/ilr4-standalone-20"])):
            out = run("results/supernet-methods/supernet_methods.py", "results", *extra)
            assert out.returncode == 0, out.stderr
            block = page.split(f"<!-- methods-{name}:begin -->", 1)[1].split(f"<!-- methods-{name}:end -->", 1)[0]
            assert out.stdout.strip() == block.strip(), name
    assert not list(RESULTS.glob(f"*{MARK}{os.getpid()}-*"))
