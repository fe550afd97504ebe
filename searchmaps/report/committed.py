"""The committed study folders of a results folder, as its manifest ``studies.txt`` lists
them, and how a rebuilt CSV file is compared with the committed one (issue 46: ``bash dev.sh
demo``, the README's first command, writes its study into ``results/`` too, and a user's own
study there must change nothing the committed findings say or the tests compare).

Every generator of findings across studies (``results/quote_findings.py``,
:mod:`searchmaps.report.across`, ``results/supernet-methods/supernet_methods.py``) and the
tests that check the committed pages take their folders from :func:`folders`, never from every
folder under ``results/``. The manifest is one folder name a line; lines starting with ``#``
and blank lines are skipped. A folder it lists that is missing is an error (a typo, or a study
deleted without its line), not a study quietly left out; ``tests/test_committed_studies.py``
checks that the repository's ``results/studies.txt`` lists exactly the study folders git tracks.

:func:`same_csv` is how a committed CSV file is compared with its rebuild
(``results/study_reports.py``, ``results/supernet_reports.py``): texts the same, numbers to
float rounding, except in the files of the iterative fits (:data:`FITTED`: scipy's
``curve_fit`` and ``least_squares`` stop at their own tolerance, and another machine's BLAS
stops them elsewhere), whose numbers agree to :data:`FIT_TOL`.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

MANIFEST = "studies.txt"
# The files whose numbers come out of iterative fits. Rebuilt here, the committed ones moved by
# up to 7e-5 (A = 33.16, 2e-6 relative), 6e-6 (a floor E = 1.52 the data barely pin down) and
# 2e-6 nats (a prediction or a gap at the target); with OpenBLAS's other kernels
# (OPENBLAS_CORETYPE=Prescott) by 5e-8; a floor on its bound 0 by percents of its 1e-13.
FITTED = ("scaling.csv", "gap_trend.csv")
FIT_TOL = 1e-4  # relative, or absolute (nats): ten times finer than the 3 decimals the pages print
ROUNDING = (1e-9, 1e-12)  # every other file, (relative, absolute): float rounding only


def names(results: Path) -> list[str]:
    """The folder names ``results/studies.txt`` lists, in its order."""
    lines = (Path(results) / MANIFEST).read_text(encoding="utf-8").splitlines()
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def folders(results: Path, file: str | None = None) -> list[Path]:
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


def same_table(old: pd.DataFrame, new: pd.DataFrame, rtol: float, atol: float) -> bool:
    """The two tables agree: the same columns, rows and texts (and booleans), numbers to ``rtol``
    or ``atol`` (NaN equal to NaN, an infinity to itself)."""
    if list(old.columns) != list(new.columns) or len(old) != len(new):
        return False
    for column in old.columns:
        a, b = old[column], new[column]
        numbers = all(pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x) for x in (a, b))
        if numbers:
            if not np.allclose(a.to_numpy(float), b.to_numpy(float), rtol=rtol, atol=atol, equal_nan=True):
                return False
        elif not a.equals(b):
            return False
    return True


def same_csv(name: str, old: bytes, new: bytes) -> bool:
    """The committed bytes ``old`` of the CSV file ``name`` and its rebuild ``new`` say the
    same: :func:`same_table` to :data:`FIT_TOL` for a file of :data:`FITTED`, else to float rounding."""
    rtol, atol = (FIT_TOL, FIT_TOL) if name in FITTED else ROUNDING
    return same_table(pd.read_csv(io.BytesIO(old), low_memory=False), pd.read_csv(io.BytesIO(new), low_memory=False),
                      rtol, atol)
