"""``searchmaps-report results/<study> ...`` (``python -m searchmaps.report``): rebuild a
study's report (other α, test, reference or planned comparisons) and attach its Pareto
figure to the Optuna study. Bad input is one line on stderr and exit code 2. Never loads
torch."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from .. import faults
from ..audit import audit_study
from ..report import ReportError, write_report
from ..stats import FAMILY_WISE, METHODS
from .common import Parser, fail
from .flags import add_analysis_args


def _study_info(study_dir) -> dict | None:
    try:
        info = json.loads((Path(study_dir) / "study.json").read_text())
    except (OSError, ValueError):
        return None  # write_report names what is wrong with the folder
    return info if isinstance(info, dict) else None


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="searchmaps.report", description="Write summary.csv and report.html for a study folder.")
    p.add_argument("study_dir", help="results/<study>, as written by searchmaps.run")
    add_analysis_args(p, report=True)
    p.add_argument("--test", choices=METHODS, default="ttest",
                   help="paired test (default ttest; the other of ttest/signflip is shown beside it). The exact "
                        "signflip and wilcoxon tests cannot reject anything with few seeds: the report says when")
    p.add_argument("--correction", default="holm", metavar="{" + ",".join(FAMILY_WISE) + "}",
                   help="over all candidate pairs, and over the planned comparisons (default holm). fdr_bh is "
                        "refused: the top group needs family-wise control")
    p.add_argument("--target-effect", default=None, metavar="E",
                   help="print how many seeds the top-group rule needs to rule out a map E worse than the best "
                        "(E in nats of validation loss, the scale of the tests, or 1%% of the best mean loss)")
    p.add_argument("--reference", default=None, help="baseline MAP or MAP|PE (default: the all-ones map)")
    p.add_argument("--published-sd", type=float, default=None, metavar="SD",
                   help="seed sd assumed in a published single-seed ranking, in its unit (perplexity), added to τ's "
                        "interval against it (default: study.json's published.sd, else 0.25: ILR's 0.2-0.3)")
    p.add_argument("--no-attach", action="store_true", help="do not attach the figure to the Optuna study")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # else SIGTERM ends the process without a word
    try:
        return _report(p, args)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"{p.prog}: interrupted ({signal.Signals(signum).name}); the study's rows are untouched — run the "
              f"same command again to write the report", file=sys.stderr)
        return 128 + signum


class _Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupted(signum, _frame):
    raise _Interrupted(signum)


def _report(p: Parser, args) -> int:
    info = _study_info(args.study_dir)
    if info is not None:  # the storage is the source of truth: runs.csv repaired before it is read
        audit = audit_study(args.study_dir, info, args.storage)
        if audit.sentence:
            print(f"{p.prog}: warning: {audit.sentence}", file=sys.stderr)
    faults.point("report-audited")
    try:
        report = write_report(args.study_dir, alpha=args.alpha, method=args.test, correction=args.correction,
                              reference=args.reference, planned=args.planned, target=args.target_tokens,
                              rule=args.top_group, target_effect=args.target_effect,
                              published_sd=args.published_sd)
    except ReportError as exc:
        return fail(p.prog, exc)
    except OSError as exc:  # a full disk, or a file in the way: the machine's, not the study's
        path = exc.filename2 or exc.filename
        print(f"{p.prog}: error: the report could not be written in {args.study_dir} ({exc.strerror or exc}"
              + (f": {path})" if path else ")"), file=sys.stderr)
        return 1
    for warning in report.warnings:
        print(f"{p.prog}: warning: {warning}", file=sys.stderr)
    if not args.no_attach:
        from ..study import attach_figure  # Optuna: only here, never in the report itself

        why = attach_figure(report.path.parent, report.info, report.pareto_figure, storage=args.storage)
        if why:
            print(f"{p.prog}: warning: the Pareto figure is not in the dashboard ({why}); the report is written "
                  f"anyway", file=sys.stderr)
    if report.planning is not None:
        print(report.planning["sentence"])
    print(report.path)
    return 0
