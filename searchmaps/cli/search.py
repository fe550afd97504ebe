"""One search from a checked :class:`~searchmaps.plan.SearchPlan` to its report, as
``searchmaps.run`` and ``searchmaps.supernet --validate`` run it: open (Ray reachable, the
storage, the study folder, ``runs.csv``, the ledger, the Optuna study, the driver), run
(Ray Tune or the local executor trains; Ctrl-C exits 130 and SIGTERM 143, the unfinished work given back), close (the
terminal summary, the report). A command module: it prints one-line errors and returns
exit codes; no library module imports it.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .. import faults
from ..config import ConfigError
from ..data import DataError
from ..ledger import StorageFault
from ..plan import SearchPlan
from ..search import Search, check_results_dir  # noqa: F401  (check_results_dir: cli.supernet's too)
from .common import fail

EXIT_INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM; a BaseException, so no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []  # the signal that stopped the search (Ray may turn it into its own KeyboardInterrupt)


def _on_signal(signum, _frame):
    _received.append(signum)
    raise Interrupted(signum)


def restore_handlers() -> None:
    """Ctrl-C and SIGTERM become :class:`Interrupted` (again: ``ray.init`` and ``ray.shutdown``
    install handlers of their own)."""
    for s in EXIT_INTERRUPTED:
        signal.signal(s, _on_signal)


def headline(plan: SearchPlan) -> str:
    """The plan's space, how much of it fits the budget, and the candidates that makes."""
    kv = len(plan.kv_shares)
    return (f"space {plan.space.name}: {plan.space.count()} maps, {plan.n_feasible} within "
            f"{plan.budget_flops:.4g} FLOPs/token x {len(plan.pes)} PE(s)"
            + (f" x {kv} --kv-share settings" if plan.shares_memory else "")
            + f" = {plan.n_feasible * len(plan.pes) * kv} candidates")


def run_search(prog: str, plan: SearchPlan, ray_address: str | None = None, quiet: bool = False,
               report: bool = True, narrow: Callable[[SearchPlan], SearchPlan] | None = None,
               command: list[str] | None = None, rebuilt: bool = False, executor: str = "ray") -> int:
    """Open, run and close the search of ``plan``; the exit code. ``executor``: a name of
    :data:`searchmaps.executor.REGISTRY` (``ray``: Ray Tune; ``local``: worker processes, no Ray),
    or ``auto``. ``narrow`` (a prescreen)
    may replace the plan once the study folder is made, before the study is opened;
    ``command`` (the words the user ran) is printed back with the seeds to add. A bad
    setting found on the way is one line and exit 2, and takes back the study folder this
    call made; a storage fault exit 1."""
    head = headline(plan)
    # open: every check before Ray starts (which is imported only then: a bad setting answers at once)
    search = Search(plan)
    try:
        from ..executor import make_executor
        from ..report.terminal import ProgressBar

        runner = make_executor(executor, ray_address)
        runner.check()
        plan = search.open(narrow).plan  # (takes back the study folder it made when a check fails)
        bar = ProgressBar(plan, quiet)
        driver = search.driver
        driver.on_row = bar.on_row
    except (ConfigError, DataError) as exc:
        return fail(prog, exc)
    except StorageFault as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted before the search started", file=sys.stderr)
        return EXIT_INTERRUPTED[signal.SIGINT]
    print(head, file=sys.stderr)
    print(f"study {plan.study} ({plan.sampler}, {plan.seeds} seeds) -> {plan.study_dir}/ ; storage "
          f"{plan.storage_for_files() if not plan.default_storage else plan.storage_url}", file=sys.stderr)

    # run: Ctrl-C and SIGTERM become Interrupted wherever the main thread is
    previous = {s: signal.signal(s, _on_signal) for s in EXIT_INTERRUPTED}
    wall, rebuild = 0.0, False

    def started() -> None:
        restore_handlers()  # after ray.init: Ray's own handlers print C++ stacks on SIGTERM
        faults.point("ray-start")  # the executor started (the point keeps its name for the local one)
        bar.start(driver.remaining() * (1 if plan.analysis.promote else plan.rungs))

    try:
        wall = search.train(runner, started)
    except (KeyboardInterrupt, SystemExit) as exc:  # ours, or Ray's when the signal arrived inside its C++ wait
        if isinstance(exc, SystemExit) and exc.code != signal.SIGTERM:
            raise
        # SIGTERM while ray.init runs: Ray's handler calls sys.exit(15)
        signum = getattr(exc, "signum", None) or (signal.SIGTERM if isinstance(exc, SystemExit) else
                                                  _received[-1] if _received else signal.SIGINT)
        for s in EXIT_INTERRUPTED:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        bar.close()
        closed = close_what_it_can(driver, tries=CLOSE_TRIES)
        runner.stop()  # (also after a signal inside ray.init)
        print(f"{prog}: interrupted ({signal.Signals(signum).name}); {closed} "
              f"— run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED[signum]
    except ConfigError as exc:
        driver.close()
        return fail(prog, exc)
    except StorageFault as exc:
        bar.close()
        return storage_failed(prog, exc, driver, runner)
    else:
        # close: the handlers stay until the report is written, so a signal here ends the run with its code too
        try:
            bar.close()
            try:
                driver.close()
            except StorageFault as exc:
                return storage_failed(prog, exc, driver, runner)
            runner.stop()
            restore_handlers()  # ray.shutdown() puts Python's default handlers back
            lost = lost_storage_file(plan)
            if lost is not None and not rebuilt:  # the rows went to a deleted file: runs.csv holds them
                print(f"{prog}: {lost} was deleted while the search ran; every row is in runs.csv — rebuilding the "
                      f"storage from it", file=sys.stderr)
                rebuild = True
            else:
                from ..audit import audit_runs
                from ..report.terminal import summarise

                audit = audit_runs(plan.study_dir / "runs.csv", driver.rows())  # the storage is the source of truth
                if audit.sentence:
                    print(f"{prog}: {audit.sentence}", file=sys.stderr)

                summarise(plan, driver.progress, driver.rows(), wall, command)
                if report:
                    write_report(prog, plan)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", None) or (_received[-1] if _received else signal.SIGINT)
            for s in EXIT_INTERRUPTED:
                signal.signal(s, signal.SIG_IGN)
            print(f"{prog}: interrupted ({signal.Signals(signum).name}) while writing the summary and report; "
                  f"every training is recorded — run the same command again to write them", file=sys.stderr)
            return EXIT_INTERRUPTED[signum]
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if s == signal.SIGINT and h is None else h)
    if rebuild:  # the same command again, at once: a new storage, its trials told from runs.csv's rows
        return run_search(prog, plan, ray_address, quiet, report, command=command, rebuilt=True, executor=executor)
    return 0


def lost_storage_file(plan: SearchPlan) -> Path | None:
    """The SQLite file of the study's storage when it is gone (deleted while the search
    ran: the open connection kept writing to the deleted file); None otherwise."""
    url = plan.storage_url
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url[len("sqlite:///"):])
    return None if path.is_file() else path


CLOSE_TRIES = 5  # an interrupted driver's close, tried again while SQLite says "database is locked"


def close_what_it_can(driver, tries: int = 1) -> str:
    """Close the driver (give back its claims, close its unfinished trials, bring runs.csv up
    to date) as far as the storage lets it; what was closed, as words for the last line. A
    storage fault is tried again ``tries`` times in all (an interrupted search can meet SQLite's
    "database is locked" for a moment, the signal having cut a transaction short); after that,
    or on any other failure, the next run closes what is left."""
    for attempt in range(tries):
        try:
            return f"{driver.close()} unfinished trial(s) closed"
        except StorageFault:
            if attempt < tries - 1:
                time.sleep(0.5 * (attempt + 1))
        except Exception:  # runs.csv, or anything else the storage's failure left behind
            break
    return (f"{driver.closed} unfinished trial(s) closed" if driver.closed is not None
            else "unfinished trials are closed by the next run")


def storage_failed(prog: str, fault: Exception, driver, runner) -> int:
    """The storage or the study folder failed mid-search (a fault of the machine): close
    what the storage still lets us close, stop the executor (a local Ray), say so in one line naming what
    to put right (the fault's hint), exit 1. Every row stored before the fault stays; the
    next run trains the rest."""
    closed = close_what_it_can(driver)
    runner.stop()
    hint = getattr(fault, "hint", "free the space or bring the database back")
    print(f"{prog}: {fault}; {closed} — {hint}, then run the same command again to resume", file=sys.stderr)
    return 1


def os_reason(exc: OSError) -> str:
    """An OSError in a few words: its reason and the file (the target of a rename)."""
    path = exc.filename2 or exc.filename
    return f"{exc.strerror or type(exc).__name__}" + (f": {path}" if path else "")


def write_report(prog: str, plan: SearchPlan) -> None:
    """The report is a view of the results: a failure here never fails the search."""
    from ..plan import read_study_json
    from ..report import ReportError
    from ..report import write_report as write
    from ..study import attach_figure

    faults.point("report")
    try:
        report = write(plan.study_dir, alpha=plan.analysis.alpha)
    except (ReportError, ConfigError) as exc:
        print(f"{prog}: no report: {exc}", file=sys.stderr)
        return
    except OSError as exc:  # a full disk, or report.html is not a file: every row is already written
        print(f"{prog}: no report: it could not be written in {plan.study_dir} ({os_reason(exc)}); "
              f"fix that, then python -m searchmaps.report {plan.study_dir} writes it", file=sys.stderr)
        return
    why = attach_figure(plan.study_dir, read_study_json(plan.study_dir / "study.json"), report.pareto_figure,
                        storage=plan.storage_url)
    if why:
        print(f"{prog}: warning: the Pareto figure is not in the dashboard ({why})", file=sys.stderr)
    print(f"report: {report.path}", file=sys.stderr)
