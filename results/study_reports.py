"""Rebuild ``report.md`` (and the git-ignored ``report.html``) of every committed search study
from its committed rows, training nothing: ``python -m searchmaps.report results/<study>
--no-attach`` on each folder of ``results/studies.txt`` that holds a ``runs.csv`` (issue 33:
committed folders keep their CSV files and report.md; issue 46: without their churn by host).

The rebuild rewrites the folder's CSV files too. The iterative fits behind ``scaling.csv`` and
``gap_trend.csv`` stop elsewhere on another machine's BLAS (up to 7e-5 apart measured, far below
the 3 decimals the pages print), and the other files' numbers can differ by float rounding, so a
CSV file whose texts are the same and whose numbers agree with the committed ones to that
(:func:`searchmaps.report.committed.same_csv`) gets its committed bytes back (its committed rows
under the rebuild's header line, where a column was renamed; ``git status`` then shows only
what really changed, report.md first); one that differs by more is left written and named on
stderr (then the rows, or the code, say something new).

    python results/study_reports.py                 # every committed search study
    python results/study_reports.py FOLDER ...      # some of them (names under results/)
"""

from __future__ import annotations

import sys
from pathlib import Path

from searchmaps.report import committed

RESULTS = Path(__file__).resolve().parent


def studies() -> list[str]:
    """The committed folders a search wrote (a runs.csv; the supernet folders are supernet_reports.py's)."""
    return [f.name for f in committed.folders(RESULTS, "runs.csv")]


def rebuild(study: Path) -> list[str]:
    """Rebuild the report of the study folder ``study``; put back each CSV file that agrees with
    the bytes it had to the fits' drift. Returns the CSV files that differ by more (left as rebuilt)."""
    from searchmaps.cli.report import main as report

    before = {p.name: p.read_bytes() for p in study.glob("*.csv")}
    if report([str(study), "--no-attach"]) != 0:
        raise SystemExit(f"{study}: python -m searchmaps.report failed (above)")
    differ = []
    for name, old in before.items():
        path = study / name
        new = path.read_bytes() if path.is_file() else None
        if new is None or new == old:
            continue
        # the committed rows under the rebuild's header: a renamed column keeps the committed numbers
        kept = new.partition(b"\n")[0] + b"\n" + old.partition(b"\n")[2]
        if committed.same_csv(name, kept, new):
            path.write_bytes(kept)
        else:
            differ.append(name)
    return differ


def main(argv: list[str]) -> int:
    known = studies()
    for folder in argv or known:
        if folder not in known:
            print(f"{folder}: not a committed search study (one of {', '.join(known)})", file=sys.stderr)
            return 2
        for name in rebuild(RESULTS / folder):
            print(f"{RESULTS / folder / name}: differs from the committed file beyond the fits' drift", file=sys.stderr)
        print(RESULTS / folder / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
