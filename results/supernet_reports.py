"""Rebuild ``report.md`` (and the git-ignored ``report.html``) of every committed supernet folder
from its committed rows, training nothing (issue 33: committed folders keep their CSV and JSON
files and ``report.md``).

It does what ``python -m searchmaps.supernet`` does after reading a finished folder back --
:func:`searchmaps.report.supernet.write_page` with the folder's scores, the stand-alone truth it
was validated against (and, for a landmark folder, the landmark correction) -- without the
command's own rewrite of ``supernet.json`` (the command records today's full configuration there,
which has gained keys since these folders were trained). ``supernet.csv``, ``supernet.json`` and
``supernet_validation.csv`` come out byte-identical (``git status`` shows only report.md): the
validation is recomputed from the rows, and where it equals the committed file's row to within
float rounding (:func:`searchmaps.report.committed.same_csv`; two ``ilr4`` landmark folders' fitted
``landmark_a``/``landmark_b`` differ in the last digit or two, which no page prints) the
committed bytes are put back; a validation that differs by more is left written and named on
stderr (then the folder's truth has changed). ``study_reports.py`` does the same for the search
studies.

:data:`TRUTH` names each folder's truth, the one its committed ``supernet_validation.csv`` was made
against (results/supernet-validation/README.md and results/supernet-methods/README.md give the
commands): ILR's 11-map study for the ``ilr-table1`` folders and for the two first ``ilr4`` folders
(``-uniform``, ``-sandwich``), the fitted-rate study for ``-uniform-lr1e-3``, and the 20-map
stand-alone study for the later ``ilr4`` folders (supernet_methods.py compares the two first ones
against it too, in its table only).

    python results/supernet_reports.py                 # every folder in TRUTH
    python results/supernet_reports.py FOLDER ...      # some of them (names under results/)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from searchmaps.report import committed

RESULTS = Path(__file__).resolve().parent
T1, FAIRLR, ILR4 = "results/ilr-table1-rope-tokens", "results/ilr-table1-rope-fairlr", "results/ilr4-standalone-20"
# folder -> (the --validate-against study, --landmarks K)
TRUTH = {
    **{f"ilr-table1-supernet-{m}": (T1, 0) for m in (
        "fair", "fair-split-depth", "sandwich", "sandwich-distill", "sandwich-distill-ft32k", "uniform",
        "uniform-distill", "uniform-ft32k", "uniform-lrfit", "uniform-split-depth")},
    "ilr-table1-supernet-uniform-landmarks3": (T1, 3),
    "ilr-table1-supernet-uniform-lr1e-3": (FAIRLR, 0),
    "ilr4-supernet-uniform": (T1, 0),
    "ilr4-supernet-sandwich": (T1, 0),
    **{f"ilr4-supernet-{m}": (ILR4, 0) for m in ("fair", "sandwich-distill", "uniform-split-depth")},
    **{f"ilr4-supernet-{m}-landmarks3": (ILR4, 3) for m in ("uniform", "sandwich", "sandwich-distill")},
}


def rebuild(folder: str) -> Path:
    """``write_page`` of one folder as ``python -m searchmaps.supernet`` calls it (the default
    top-group rule and α, the budget of the folder's ``supernet.json``)."""
    from searchmaps.report import supernet as section
    from searchmaps.report.summary import load_runs
    from searchmaps.results import records_frame, statistics_rows
    from searchmaps.stats import DEFAULT_RULE

    study = RESULTS / folder
    against, landmarks = TRUTH[folder]
    # read back as ensure_scores reads it
    scores = pd.read_csv(study / "supernet.csv", dtype={"map": str, "pe": str, "teacher": str, "lr_grid": str})
    scores["candidate"] = section.labels(scores)
    truth = statistics_rows(records_frame(load_runs(RESULTS.parent / against)))
    info = None
    if landmarks:
        from searchmaps.supernet.landmarks import calibrate

        scores, truth, info = calibrate(scores, truth, landmarks)
    budget = float(json.loads((study / "supernet.json").read_text())["key"]["budget_flops"])
    path = study / "supernet_validation.csv"
    before = path.read_bytes() if path.is_file() else None
    page = section.write_page(study, scores, truth, against, DEFAULT_RULE, 0.05, budget, extra=info)
    if before is not None and path.read_bytes() != before:
        if committed.same_csv(path.name, before, path.read_bytes()):
            path.write_bytes(before)
        else:
            print(f"{path}: the validation against {against} differs from the committed one", file=sys.stderr)
    return page


def main(argv: list[str]) -> int:
    for folder in argv or sorted(TRUTH):
        if folder not in TRUTH:
            print(f"{folder}: not a committed supernet folder (one of {', '.join(sorted(TRUTH))})", file=sys.stderr)
            return 2
        print(rebuild(folder).with_name("report.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
