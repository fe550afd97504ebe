"""A search as a library call, for a notebook or a script::

    from searchmaps.cli.run import plan_from_flags
    from searchmaps.search import Search

    plan = plan_from_flags(["--space", "ilr4", "--budget-flops", "3.7e6", "--seeds", "3"])
    outcome = Search(plan).run(executor="local")
    print(outcome.frame().groupby("map").val_ppl.mean())

:meth:`Search.open` opens the study (the storage, the study folder, ``runs.csv``, the
ledger, the Optuna study, the driver); :meth:`Search.run` trains what the storage does not
yet hold with an executor of :data:`searchmaps.executor.REGISTRY`, closes the study and
returns an :class:`Outcome`. Nothing here prints or exits: a bad setting raises
:class:`~searchmaps.config.ConfigError` or :class:`~searchmaps.data.DataError` (and takes
back the study folder this call made), the storage or the folder failing raises
:class:`~searchmaps.ledger.StorageFault`, and Ctrl-C passes through once the unfinished work
is given back. ``searchmaps.run`` is this plus its signals, progress bar, summary, report and
exit codes (:mod:`searchmaps.cli.search`). The same study resumes from either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import ConfigError
from .data import DataError
from .plan import SearchPlan
from .results import RunRecord, records_frame


@dataclass(frozen=True)
class Outcome:
    """What a finished :meth:`Search.run` leaves: the study folder, every row the storage
    holds for the study (every driver's, earlier runs' too), how many trainings this call
    ran and in how many wall seconds, and how many unfinished trials its close closed."""

    study_dir: Path
    rows: tuple[RunRecord, ...]
    trainings: int
    wall_s: float
    closed: int

    def frame(self):
        """The rows as a pandas DataFrame (:func:`searchmaps.results.records_frame`: a column per field,
        ``candidate`` the label, ``lr`` the learning rate)."""
        return records_frame(self.rows)


def check_results_dir(path: Path) -> bool:
    """Make the study folder ``path`` (and its parents) and check it is writable; True when
    this call made it (then :func:`forget_new_folder` may take it back)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()  # atomic: of two drivers starting at once, one made it
            made = True
        except FileExistsError:
            made = False
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--results-dir {path} is not writable ({exc.strerror}); choose another") from None
    return made


def forget_new_folder(path: Path) -> None:
    """After a failed check: remove the study folder this command made, if it is still empty
    (never one another driver has begun to fill; the caller never passes one that was there)."""
    try:
        path.rmdir()
    except OSError:
        pass


class Search:
    """The search of ``plan``: :meth:`open`, then :meth:`run` (which opens it if need be)."""

    def __init__(self, plan: SearchPlan):
        self.plan = plan
        self.driver = None  # a searchmaps.driver.Driver once open

    def open(self, narrow: Callable[[SearchPlan], SearchPlan] | None = None) -> Search:
        """Check the storage and the study folder (made if new), open the study and its
        driver, and write ``study.json`` and ``eval_docs.json``. ``narrow`` (a prescreen) may
        replace the plan once the folder is made, before the study is opened."""
        from .driver import Driver
        from .ledger import Ledger, check_storage
        from .results import RunsFile, write_eval_docs
        from .study import SearchStudy

        plan = self.plan
        folder = plan.study_dir
        engine = None if plan.default_storage else check_storage(plan.storage_url)  # the default is in the folder
        made = check_results_dir(folder)
        try:
            RunsFile(folder / "runs.csv").check()
            if narrow is not None:
                plan = narrow(plan)
            engine = engine or check_storage(plan.storage_url)
            ledger = Ledger(engine, plan.study)
            study = SearchStudy(plan, ledger)
            plan.write_study_json(study.seeds_history)
            write_eval_docs(plan.study_dir, plan.eval_docs)  # the report resamples documents with it
            self.driver = Driver(plan, ledger, study)  # reads the study's rows and runs.csv
        except (ConfigError, DataError):
            if made:
                forget_new_folder(folder)
            raise
        self.plan = plan
        return self

    def run(self, executor: str = "auto", ray_address: str | None = None) -> Outcome:
        """Train what the study still needs with ``executor`` (``auto``, ``ray`` or ``local``;
        ``ray_address`` a Ray cluster's), close the study and return its :class:`Outcome`.
        On any exception, Ctrl-C included, the unfinished work is given back (as far as the
        storage lets it) and the executor stopped before it propagates."""
        from .executor import make_executor

        runner = make_executor(executor, ray_address)
        runner.check()
        if self.driver is None:
            self.open()
        driver, wall = self.driver, 0.0
        try:
            wall = self.train(runner)
            closed = driver.close()
        except BaseException:
            try:
                driver.close()
            except Exception:  # the storage still fails: the next run closes what is left
                pass
            raise
        finally:
            runner.stop()
        return Outcome(self.plan.study_dir, tuple(driver.rows()), driver.progress.trainings, wall, closed)

    def train(self, runner, started: Callable[[], None] | None = None) -> float:
        """Train what the open study still needs with ``runner`` (a started-or-not executor of
        :data:`searchmaps.executor.REGISTRY`), its wall seconds (0 when the storage holds every
        training): the executor started, ``started()`` called (the command's signal handlers and
        progress bar), the driver's heartbeat begun, the units executed. Closing the study and
        stopping the executor are the caller's (:meth:`run`, or the command with its signals)."""
        driver = self.driver
        if not driver.has_work():
            return 0.0
        runner.start(self.plan)
        if started is not None:
            started()
        driver.start_heartbeat()
        t0 = time.perf_counter()
        runner.execute(driver)
        return time.perf_counter() - t0
