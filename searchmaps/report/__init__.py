"""The study report: which reuse maps really win, as one page that opens offline.

    python -m searchmaps.report results/<study> [--alpha 0.05] [--test ttest|signflip|wilcoxon]
        [--correction holm|bonferroni] [--reference MAP|MAP|PE] [--planned A/B ...] [--storage URL] [--no-attach]

:func:`write_report` reads ``runs.csv`` and ``study.json`` of a study folder, runs
:func:`searchmaps.stats.analyze` on the successful runs of the study's last horizon, and
writes ``summary.csv`` (one row per candidate), ``planned.csv`` (with planned
comparisons) and ``report.html`` (the result in words, Pareto front, ranking, planned
comparisons, significance matrix, learning curves and the protocol) next to them. It
returns a :class:`Report`; the command line also attaches its Pareto figure to the
Optuna study, so ``optuna-dashboard`` shows it.

Modules, in the order data flows: ``summary`` (loading and tables, pandas only),
``sentences`` (text only), ``figures`` (plotly only), ``page`` (HTML), ``write`` (the one
call), ``__main__`` (the command line); ``terminal`` is what a search prints (its progress
bar and summary, read from the same rows as the report).

Default test: the paired t-test. The exact sign-flip and Wilcoxon tests cannot be primary
at the seed counts users run: their smallest two-sided p is 2 / 2**n (0.25 with 3 seeds,
0.0625 with 5), so with 3-5 seeds they never reach 0.05, let alone Holm's alpha / m over
all pairs; chosen anyway, the report and the command line say so.
"""

from .summary import ReportError
from .write import Report, write_report

__all__ = ["Report", "ReportError", "write_report"]
