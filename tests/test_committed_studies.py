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

from searchmaps.report import committed

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
# what a study folder holds on this machine only (git-ignored): left out of a copy
LOCAL = shutil.ignore_patterns("report.html", "optuna.db*", "runs.csv.lock", "checkpoints", "ray", ".write-test")


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
            shutil.copytree(RESULTS / source, made[-1], ignore=LOCAL)
        yield made
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def _generated() -> dict[str, object]:
    """Everything the cross-study generators make from results/, computed now."""
    from searchmaps.report import across

    quote = results_script("quote_findings.py")
    studies = committed_folders()
    return {"pages": quote.PAGES, "blocks": {page: quote.block(page) for page in quote.PAGES},
            "readme": quote.readme_block(), "equal_tokens": across.equal_tokens(studies),
            "equal_flops": across.equal_flops(studies), "supernets": across.supernets(studies)}


def test_the_manifest_lists_exactly_the_study_folders_git_tracks():
    """Each line of results/studies.txt a study folder that is there (a study.json or a
    supernet.json), none twice; with git, the same set as the study folders git tracks, so a
    study committed without its line (or a line left for a folder deleted) fails here."""
    names = committed.names(RESULTS)
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


def test_the_folders_the_scripts_name_by_hand_are_committed_studies():
    """quote_findings.py's pages quote, supernet_reports.py's folders and their truths, and
    study_reports.py's folders are all in results/studies.txt."""
    names = set(committed.names(RESULTS))
    quoted = {f for folders in results_script("quote_findings.py").PAGES.values() for f in folders}
    truth = results_script("supernet_reports.py").TRUTH
    assert quoted <= names and set(truth) <= names, sorted((quoted | set(truth)) - names)
    assert {against.removeprefix("results/") for against, _ in truth.values()} <= names
    assert set(results_script("study_reports.py").studies()) <= names


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
    --check, the attribution page's findings.py --check, the supernet-methods table of ilr4)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *args: subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,  # noqa: E731
                                       env=env)
    page = (RESULTS / "supernet-methods" / "README.md").read_text(encoding="utf-8")
    with user_studies():
        for script in ("results/quote_findings.py", "results/ilr-table1-attribution/findings.py"):
            out = run(script, "--check")
            assert out.returncode == 0, (script, out.stdout, out.stderr)
        # the ilr4 table, the one the user's ilr4 supernet would join (test_study_pages checks both)
        out = run("results/supernet-methods/supernet_methods.py", "results", "ilr4", "results/ilr4-standalone-20")
        assert out.returncode == 0, out.stderr
        block = page.split("<!-- methods-ilr4:begin -->", 1)[1].split("<!-- methods-ilr4:end -->", 1)[0]
        assert out.stdout.strip() == block.strip()
    assert not list(RESULTS.glob(f"*{MARK}{os.getpid()}-*"))


# ---------------------------------------------------------------------------- rebuilt files against committed ones


def test_a_rebuilt_csv_equals_the_committed_one_within_the_fits_drift_and_not_beyond():
    """same_csv (what study_reports.py and supernet_reports.py put committed bytes back by): a
    fit's numbers moved as far as another machine's BLAS moves them (1e-5 relative; a floor E
    on its bound 0 by percents of its 1e-13) are the same scaling.csv; a prediction moved by
    1e-3 (what a page prints), a changed text, a row or a column more are not; a file of no fit
    (equal_flops.csv) is the same only to float rounding."""
    import io

    import numpy as np
    import pandas as pd

    same = committed.same_csv
    ladder = RESULTS / "ilr-table1-rope-ladder"
    old = (ladder / "scaling.csv").read_bytes()
    table = pd.read_csv(io.BytesIO(old))
    numbers = table.select_dtypes("float").columns.drop("E")

    def as_csv(t: pd.DataFrame) -> bytes:
        return t.to_csv(index=False).encode()

    def scaled(t: pd.DataFrame, columns, by: float) -> pd.DataFrame:
        out = t.copy()
        out[columns] = t[columns] * (1 + by * np.cos(np.arange(len(t))))[:, None]
        return out

    drift = scaled(table, numbers, 1e-5).assign(E=table["E"] * 1.03)  # E: on the bound 0, about 1e-13
    assert as_csv(drift) != old and same("scaling.csv", old, as_csv(drift))
    assert same("scaling.csv", old, old) and same("scaling.csv", old, as_csv(table))  # empty cells (NaN) too
    moved = table.copy()
    moved.loc[3, "prediction"] += 1e-3
    assert not same("scaling.csv", old, as_csv(moved))
    bound = table.assign(at_bound=table["at_bound"].fillna("").replace("E=0", "alpha=3"))
    assert not same("scaling.csv", old, as_csv(bound))
    assert not same("scaling.csv", old, as_csv(table.iloc[:-1]))
    assert not same("scaling.csv", old, as_csv(table.assign(extra=1.0)))
    # no fit behind it: float rounding only
    flops = pd.read_csv(ladder / "equal_flops.csv")
    gaps = ["mean", "gap_low", "gap_high"]
    old = (ladder / "equal_flops.csv").read_bytes()
    assert same("equal_flops.csv", old, as_csv(scaled(flops, gaps, 1e-13)))
    assert not same("equal_flops.csv", old, as_csv(scaled(flops, gaps, 1e-5)))


@pytest.mark.e2e
def test_a_committed_ladder_studys_report_rebuilds_as_committed_up_to_the_fits_drift(tmp_path):
    """results/study_reports.py on a copy of the smallest committed ladder (5 maps): report.md
    comes out byte-identical and every CSV file, scaling.csv and gap_trend.csv with their
    iterative fits among them, gets its committed bytes back (none differs beyond the drift),
    whatever this machine's BLAS makes of the fits."""
    name = "ilr-table1-rope-ladder-shallow-lr3e-3"
    study = tmp_path / name
    shutil.copytree(RESULTS / name, study, ignore=LOCAL)
    assert results_script("study_reports.py").rebuild(study) == []
    for path in sorted((RESULTS / name).iterdir()):
        if path.is_file() and not LOCAL(str(path.parent), [path.name]):  # a committed file
            assert (study / path.name).read_bytes() == path.read_bytes(), path.name
