"""One driver's side of a search: the :class:`~searchmaps.scheduler.Scheduler` decides,
the :class:`~searchmaps.ledger.Ledger` makes its decisions safe to share with other
drivers, the :class:`~searchmaps.study.SearchStudy` keeps Optuna in step, and
``runs.csv`` receives every row. An executor (Ray Tune, :mod:`searchmaps.executor`) asks
:meth:`Driver.next_unit` for work and hands each result to :meth:`Driver.complete`;
both may be called from several threads.

Order of writes, so that a kill at any point loses and repeats nothing: a unit is claimed
in the storage before it trains; its rows go to the storage (the source of truth) before
``runs.csv`` (a copy, caught up from the storage on every start); the claim is marked done
with the rows; the candidate's trial is told last (a teller that dies is replaced).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import faults
from .ledger import HEARTBEAT_S, Ledger, storage_fault
from .plan import SearchPlan, pack_key
from .results import Role, RunRecord, RunsFile, Status, failed_record
from .scheduler import Finished, Pack, PromotionRule, RacingRule, RungDone, Scheduler, Tuned, Unit
from .study import STORAGE_ERRORS, SearchStudy
from .units import Job, Run

REFRESH_S = 2.0  # how often a waiting driver reads other drivers' rows from the storage
MAX_CRASHES = 2  # a training whose process died runs again this many times, then counts as failed


def _faults_of_the_storage(method):
    """A driver method whose storage or study folder fails (disk full, database down)
    raises :class:`~searchmaps.ledger.StorageFault`, one line, instead of the database
    driver's own exception from deep inside Ray Tune."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except STORAGE_ERRORS as exc:
            raise storage_fault(exc, self.plan.storage_url) from exc

    return call


@dataclass
class Progress:
    trainings: int = 0  # units (a whole ladder, or one rung with promotion) finished by this driver
    train_s: float = 0.0  # their workers' wall seconds
    recovered: int = 0  # trials closed at start because no live driver owned them
    rebuilt: int = 0  # trials opened again at start for candidates with rows the storage had lost
    not_rebuilt: tuple[str, ...] = ()  # candidates with rows that this search does not include


class Driver:
    @_faults_of_the_storage
    def __init__(self, plan: SearchPlan, ledger: Ledger, study: SearchStudy,
                 on_row: Callable[[RunRecord, int], None] | None = None):
        self.plan = plan
        self.ledger = ledger
        self.study = study
        self.runs = RunsFile(plan.study_dir / "runs.csv")
        self.on_row = on_row
        self.progress = Progress()
        self._lock = threading.RLock()
        self._last_id = 0
        self._last_refresh = 0.0
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._ready: list[Unit] = []  # claimed by has_work() before the executor started
        self.closed: int | None = None  # trials close() closed, once it got that far

        ledger.register()
        rebuilt, left = study.rebuild(self._import_legacy_rows())
        self.progress.rebuilt, self.progress.not_rebuilt = rebuilt, tuple(left)
        self.progress.recovered = study.recover()
        self.scheduler = Scheduler(
            seeds=plan.seeds,
            candidates=plan.candidates,
            propose=study.propose if plan.candidates is None else None,
            known=study.known_candidates() if plan.candidates is None else (),
            racing=RacingRule(plan.analysis.race_start_seeds, plan.analysis.alpha, plan.analysis.top_group_rule) if plan.analysis.racing else None,
            max_crashes=MAX_CRASHES,
            claim=lambda unit: ledger.claim(unit.key, unit.candidate.label),
            rungs=plan.rungs,
            promotion=PromotionRule(plan.analysis.alpha, plan.analysis.top_group_rule) if plan.analysis.promote else None,
            horizons=plan.ladder,
            lr_grid=plan.lr_grid,
            tuning_seeds=plan.tuning_seeds,
        )
        self._refresh(force=True)

    # ------------------------------------------------------------------ life

    def start_heartbeat(self) -> None:
        def beat():
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    self.ledger.heartbeat()
                except Exception:  # best effort: the next beat retries
                    pass

        self._beat = threading.Thread(target=beat, name="searchmaps-heartbeat", daemon=True)
        self._beat.start()

    @_faults_of_the_storage
    def close(self) -> int:
        """Stop: give back unfinished claims, close trials no live driver owns, and bring
        ``runs.csv`` up to date. Returns how many trials were closed."""
        self._stop.set()
        with self._lock:
            self.ledger.stop()
            closed = self.closed = self.study.recover()  # (kept: runs.csv may fail after it)
            self._refresh(force=True)
            if self.scheduler.remaining() == 0:  # the study is done: no run continues from a saved state
                for state in (self.plan.study_dir / "checkpoints").glob("*.pt"):  # (one a kill left behind)
                    state.unlink(missing_ok=True)
        return closed

    # ------------------------------------------------------------------ work

    @_faults_of_the_storage
    def next_unit(self) -> Unit | Pack | object | None:
        """A unit to train now (a :class:`~searchmaps.scheduler.Pack` of seed-units with
        ``--pack-seeds`` 2 or more), :data:`~searchmaps.scheduler.WAIT`, or None (done)."""
        with self._lock:
            if self._ready:
                return self._ready.pop(0)
            self._refresh()
            unit = self.scheduler.next()
            if unit is None and self.plan.candidates is None:  # other drivers may have started candidates since
                self._refresh(force=True)
                unit = self.scheduler.next()
            if isinstance(unit, Unit) and (self.plan.resources.pack_seeds > 1 or self.plan.resources.pack_candidates > 1):
                unit = self.scheduler.pack(unit, self.plan.resources.pack_seeds, self.plan.resources.pack_candidates, key=pack_key)
            if isinstance(unit, (Unit, Pack)):
                faults.point("claimed")
                for cand in (unit.candidates if isinstance(unit, Pack) else (unit.candidate,)):
                    self.study.open(cand)
            self._tell()
            return unit

    @_faults_of_the_storage
    def has_work(self) -> bool:
        """Whether anything is left to train or wait for (a first unit is claimed now and
        handed out first), so a resume with nothing to do need not start Ray."""
        with self._lock:
            unit = self.next_unit()
            if isinstance(unit, (Unit, Pack)):
                self._ready.append(unit)
            return unit is not None

    @_faults_of_the_storage
    def release_ready(self) -> None:
        with self._lock:
            for job in self._ready:
                for unit in _units(job):
                    self.scheduler.release(unit)
                    self.ledger.release(unit.key)
            self._ready.clear()

    def remaining(self) -> int:
        with self._lock:
            return self.scheduler.remaining()

    def spec(self, unit: Unit):
        return self.plan.spec(unit.candidate, unit.seed, unit.lr)

    def job(self, unit: Unit | Pack) -> Job:
        """What a worker needs to train ``unit``: the spec, the ladder, the rungs to train
        and record, and (promotion) the saved state to continue from and to save. A pack's
        job has a :class:`~searchmaps.units.Run` per seed, in the pack's seed order (the same
        per-seed state files as separate trainings: a seed continues packed or alone). A
        whole ladder, alone or packed, saves its state at every rung's cooldown start, and a
        ladder whose first rungs are already recorded (a killed run) continues from the state
        of its last recorded rung when that is there (a pack: when every one of its seeds has
        it; its seeds lack the same rungs). A pack saves its seeds' states at rungs only (no
        snapshot)."""
        if isinstance(unit, Pack):
            alone = [self.job(u) for u in unit.units]
            runs, first = [j.runs[0] for j in alone], alone[0].first
            if runs[0].save_rungs is not None and not (len({j.first for j in alone}) == 1
                                                       and all(r.resume for r in runs)):
                runs, first = [dataclasses.replace(r, resume=None) for r in runs], 0
            return dataclasses.replace(alone[0], unit=unit.key, runs=tuple(runs), packed=True, first=first,
                                       snapshot=None)
        plan = self.plan
        tuning = unit.role == Role.TUNING  # a tuning run trains the first horizon only
        record = self.scheduler.needed(unit)
        first, resume, save, save_rungs = unit.first, None, None, None
        if plan.analysis.promote and not tuning:
            resume = str(plan.checkpoint(unit.candidate, unit.seed, unit.first - 1)) if unit.first else None
            save = str(plan.checkpoint(unit.candidate, unit.seed, unit.last)) if unit.last < plan.rungs - 1 else None
        elif not tuning and plan.rungs > 1:
            states = [plan.checkpoint(unit.candidate, unit.seed, i) for i in range(plan.rungs - 1)]
            save_rungs = tuple(str(p) for p in states)
            start = min(record) if record else 0
            if start > 0 and states[start - 1].is_file():
                first, resume = start, str(states[start - 1])
        snapshot = str(plan.snapshot(unit.key)) if plan.resources.save_every_s > 0 else None  # killed mid-rung, it goes on
        return Job(unit=unit.key, runs=(Run(self.spec(unit), resume, save, save_rungs),), vocab_size=plan.vocab_size,
                   horizons=None if tuning else tuple(plan.ladder) or None, first=first, last=unit.last,
                   record=tuple(record) or None, snapshot=snapshot,
                   snapshot_every_s=plan.resources.save_every_s if snapshot else 600.0)

    @_faults_of_the_storage
    def partial(self, unit: Unit | Pack, records: list[RunRecord]) -> None:
        """Rows of some rungs of a ladder still training (it reports rung by rung)."""
        with self._lock:
            for u, recs in _split(unit, records):
                if recs:
                    self._store(u, recs)
                    self._drop_passed_states(u)

    def _drop_passed_states(self, unit: Unit) -> None:
        """The saved states of ``unit``'s ladder (alone or packed, not promoted) that no resume
        can use any more: a killed ladder goes on from the state at the rung before its first
        unrecorded one, so the states before that go (a ladder keeps one state, not one a rung)."""
        if self.plan.analysis.promote or unit.role == Role.TUNING or self.plan.rungs < 2:
            return
        need = self.scheduler.needed(unit)
        for rung in range((min(need) if need else self.plan.rungs) - 1):
            self.plan.checkpoint(unit.candidate, unit.seed, rung).unlink(missing_ok=True)

    @_faults_of_the_storage
    def complete(self, unit: Unit | Pack, records: list[RunRecord] | None, why: str = "",
                 wall_s: float = 0.0) -> Status | None:
        """Record a finished training (``wall_s``: its worker's seconds); ``records`` None
        means its process died (``why``): returns then how it was recorded (``crashed``: it
        runs again; ``failed``: it died too often; a pack: its first seed's status). A pack
        is recorded seed by seed, as if its seeds had trained separately (the wall seconds
        go to its first seed's count)."""
        if isinstance(unit, Pack):
            statuses = [self.complete(u, None if records is None else recs, why, wall_s if i == 0 else 0.0)
                        for i, (u, recs) in enumerate(_split(unit, records or []))]
            with self._lock:
                self.progress.trainings -= len(unit.units) - 1  # one training ran
            return statuses[0]
        status = None
        with self._lock:
            if records is None:
                status = self.scheduler.crash_status(unit)
                records = [failed_record(self.spec(unit), f"the training process died ({why or 'see Ray logs'})",
                                         status).replace(rung=unit.first)]
            stored = self._store(unit, records, final=True, wall_s=wall_s)
            if not stored and self.scheduler.needed(unit):  # another driver took it over; its rows will come
                self.scheduler.release(unit)
            if self.plan.analysis.promote and unit.first > 0 and not self.scheduler.needed(unit):
                self.plan.checkpoint(unit.candidate, unit.seed, unit.first - 1).unlink(missing_ok=True)
            if not self.plan.analysis.promote and self.plan.rungs > 1 and not self.scheduler.needed(unit):
                for rung in range(self.plan.rungs - 1):  # the ladder is recorded: its saved states are done
                    self.plan.checkpoint(unit.candidate, unit.seed, rung).unlink(missing_ok=True)
            if not self.scheduler.needed(unit):  # (a training that died too often leaves its snapshot)
                self.plan.snapshot(unit.key).unlink(missing_ok=True)
        return status

    def _store(self, unit: Unit, records: list[RunRecord], final: bool = False, wall_s: float = 0.0) -> list[RunRecord]:
        records = [self._check_data(r).replace(role=unit.role) for r in records]
        stored = self.ledger.record(unit.key, records)
        faults.point("recorded")
        if final:
            if any(r.status is Status.CRASHED for r in records):
                self.ledger.release(unit.key)
            else:
                self.ledger.finish(unit.key)
        self.runs.append(stored)
        self.scheduler.add_rows(stored)
        if final:
            self.progress.trainings += 1
            self.progress.train_s += wall_s
        for r in stored:
            if self.on_row:
                self.on_row(r, self.scheduler.remaining())
        self._tell()
        return stored

    def _check_data(self, r: RunRecord) -> RunRecord:
        fp = self.plan.data_fingerprint
        if fp and r.data_fingerprint not in ("", fp):
            return r.replace(status=Status.FAILED, error=f"data on {r.host} differs from the driver's "
                                                         f"(fingerprint {r.data_fingerprint} != {fp})")
        return r

    # ------------------------------------------------------------------ shared state

    def _refresh(self, force: bool = False) -> None:
        """Read rows other drivers stored since the last look (throttled), copy them to
        ``runs.csv`` and give them to the scheduler, with the candidates other drivers'
        optimisers started; now and then retry claims that other drivers held (a dead
        driver's claims become free)."""
        now = time.monotonic()
        if not force and now - self._last_refresh < REFRESH_S:
            return
        self._last_refresh = now
        new = self.ledger.results(after=self._last_id)
        if new:
            self._last_id = new[-1][0]
            rows = [r for _, r in new]
            self.runs.append(rows)
            self.scheduler.add_rows(rows)
        if self.plan.candidates is None:  # an optimiser: other drivers' proposals are this study's candidates too
            self.scheduler.add_candidates(self.study.known_candidates())
        self.scheduler.reconsider()

    def _tell(self) -> None:
        for event in self.scheduler.take_events():
            if isinstance(event, RungDone):
                self.study.report_rung(event)
            elif isinstance(event, Tuned):
                self.study.note_tuning(event)
            elif self.study.tell(event):
                faults.point("told")
            if isinstance(event, Finished) and event.stopped and self.plan.analysis.promote:
                for seed in range(self.plan.seeds):  # a stopped run will not be continued
                    for rung in range(self.plan.rungs):
                        self.plan.checkpoint(event.candidate, seed, rung).unlink(missing_ok=True)

    def _import_legacy_rows(self) -> list[RunRecord]:
        """A study folder whose runs.csv predates the storage's copy of the rows (or whose
        storage was lost): bring its rows into the storage once, so they count as done.
        Returns runs.csv's rows."""
        rows = self.runs.read()
        if rows:
            self.ledger.import_rows(lambda r: Unit(r.candidate, r.seed).key, rows)
        return rows

    @_faults_of_the_storage
    def rows(self) -> list[RunRecord]:
        """Every row of the study, all drivers', from the storage."""
        return [r for _, r in self.ledger.results()]


def _units(job: Unit | Pack) -> tuple[Unit, ...]:
    return job.units if isinstance(job, Pack) else (job,)


def _split(job: Unit | Pack, records: list[RunRecord]) -> list[tuple[Unit, list[RunRecord]]]:
    """Each unit of ``job`` with its records (a plain unit: all of them)."""
    if isinstance(job, Unit):
        return [(job, records)]
    return [(u, [r for r in records if r.seed == u.seed and r.candidate == u.candidate]) for u in job.units]
