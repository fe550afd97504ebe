"""The study report: which reuse maps really win, as one page that opens offline.

    python -m searchmaps.report results/<study> [--alpha 0.05] [--test ttest|signflip|wilcoxon]
        [--correction holm|bonferroni] [--top-group RULE] [--reference MAP|MAP|PE] [--planned A/B ...]
        [--target-effect E] [--target-tokens N] [--published-sd SD] [--storage URL] [--no-attach]

:func:`write_report` reads ``runs.csv`` and ``study.json`` of a study folder, runs
:func:`searchmaps.stats.topgroup.analyze` on the rows the statistics use (the successful eval
rows of the study's last horizon) and writes ``summary.csv`` (one row per candidate) and
``report.html`` next to them, plus each section's own files: ``planned.csv`` (planned
comparisons), ``stability.csv``, ``scaling.csv``, ``gap_trend.csv``, ``agreement.csv`` (a
horizon ladder), ``tuning.csv`` (fitted learning rates) and ``supernet_validation.csv`` (a
supernet with stand-alone rows). It returns a :class:`Report`; the command line also
attaches its Pareto figure to the Optuna study, so ``optuna-dashboard`` shows it.

Modules, in import order: ``section`` (the :class:`~searchmaps.report.section.Section`
every section returns, and the one HTML table), ``sentences`` (shared text), ``figures``
(the ranking's plotly figures), ``summary`` (loading and the per-candidate table, pandas
only), ``page`` (lays the sections out as HTML); one module per section of the page:
``ranking`` (the last horizon: result, Pareto front, ranking, significance matrix,
learning curves, ``summary.csv``; runs that did not finish), ``planned``, ``horizons``,
``tuning``, ``supernet``; ``write`` (the one call: statistics, the sections in page order,
every file written, atomically, in one loop), ``__main__`` (the command line).
``terminal`` is what a search prints (its progress bar and summary, read from the same
rows as the report).

Default test: the paired t-test. The exact sign-flip and Wilcoxon tests cannot be primary
at the seed counts users run: their smallest two-sided p is 2 / 2**n (0.25 with 3 seeds,
0.0625 with 5), so with 3-5 seeds they never reach 0.05, let alone Holm's alpha / m over
all pairs; chosen anyway, the report and the command line say so.
"""

from .summary import ReportError
from .write import Report, write_report

__all__ = ["Report", "ReportError", "write_report"]
