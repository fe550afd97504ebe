"""The study's shared state, kept in its storage database next to Optuna's tables:
which drivers are alive, which unit of work (a candidate's seed) is claimed or done,
every result row, and which Optuna trial stands for each candidate.

The storage is the one state every driver of a study shares, on one machine or many,
so everything that must not happen twice is decided here, by single atomic statements:

- a driver **claims** a unit before it trains it (an INSERT on the unit's primary key:
  exactly one driver wins); a claim whose driver died is taken over (an UPDATE that
  names the dead owner: exactly one driver wins again). A driver is dead when it said
  so (it stopped), when its heartbeat is older than :data:`GRACE_S`, or at once when it
  ran on this host and its process is gone;
- a result is **recorded** only by the driver holding the claim, and a rung already
  recorded for a unit is never recorded again, so a training repeated after a crash
  adds no duplicate rows;
- a candidate's Optuna trial is **registered** once (its primary key again) and
  **told** once (a state change from ``open`` that only one driver can make).

No Optuna here; SQLAlchemy Core only. SQLite gets a busy timeout, WAL and
``BEGIN IMMEDIATE`` transactions, so several processes on one machine serialise
instead of failing; PostgreSQL (``pip install -e .[postgres]``) serves many machines.
"""

from __future__ import annotations

import enum
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from .results import RunRecord, Status
from .storage import (StorageError, StorageFault, candidates, check_storage, claims, create_tables,
                      describe_db_error, drivers, make_engine, results, serialise_sqlite, storage_fault)

__all__ = ["CandidateEntry", "CandidateState", "GRACE_S", "HEARTBEAT_S", "Ledger",  # and, from .storage, for callers:
           "StorageError", "StorageFault", "check_storage", "describe_db_error", "make_engine", "results",
           "serialise_sqlite", "storage_fault"]

HEARTBEAT_S = 10.0  # how often a driver says it is alive
GRACE_S = 90.0  # a driver on another host is dead when silent this long


# --------------------------------------------------------------------------- ledger


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CandidateState(enum.StrEnum):
    """Where a candidate's Optuna trial stands (a str: it is stored and compares as its value)."""

    OPEN = "open"  # registered; its trial waits for its result
    TELLING = "telling"  # one driver took the right to tell it
    TOLD = "told"  # its trial has its result


@dataclass(frozen=True)
class CandidateEntry:
    candidate: str
    trial_number: int | None
    state: CandidateState
    driver: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", CandidateState(self.state))


class Ledger:
    """One driver's handle on the study's shared state (see the module doc)."""

    def __init__(self, engine: sa.engine.Engine | str, study: str, driver_id: str | None = None):
        self.engine = make_engine(engine) if isinstance(engine, str) else engine
        self.study = study
        self.host = socket.gethostname()
        self.driver_id = driver_id or f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        create_tables(self.engine)

    # ------------------------------------------------------------------ drivers

    def register(self) -> None:
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(drivers.insert().values(id=self.driver_id, study=self.study, host=self.host,
                                                 pid=os.getpid(), started_at=now, beat_at=now, stopped=False))

    def heartbeat(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(drivers.update().where(drivers.c.id == self.driver_id).values(beat_at=time.time()))

    def stop(self) -> None:
        """This driver is done: give back its unfinished claims and say so; and clear what
        dead drivers left (:meth:`clear_dead`)."""
        with self.engine.begin() as conn:
            conn.execute(claims.delete().where(claims.c.study == self.study, claims.c.driver == self.driver_id,
                                               claims.c.done.is_(False)))
            conn.execute(drivers.update().where(drivers.c.id == self.driver_id).values(stopped=True))
        self.clear_dead()

    def clear_dead(self) -> int:
        """Give back the unfinished claims of this study's dead drivers (killed: they never
        said they stopped) and mark those drivers stopped; how many claims. A unit a dead
        driver claimed and no one needs any more (its rows were stored before the kill)
        would otherwise stay claimed for ever. A driver taking one over at this instant
        finds it gone and claims it afresh (:meth:`claim`)."""
        live = self.live_drivers()
        with self.engine.begin() as conn:
            dead = set(conn.execute(sa.select(drivers.c.id).where(drivers.c.study == self.study,
                                                                 drivers.c.stopped.is_(False))).scalars()) - live
            dead |= set(conn.execute(sa.select(claims.c.driver).where(
                claims.c.study == self.study, claims.c.done.is_(False))).scalars()) - live
            if not dead:
                return 0
            n = conn.execute(claims.delete().where(claims.c.study == self.study, claims.c.done.is_(False),
                                                   claims.c.driver.in_(sorted(dead)))).rowcount
            conn.execute(drivers.update().where(drivers.c.study == self.study, drivers.c.id.in_(sorted(dead)))
                         .values(stopped=True))
        return n

    def open_claims(self) -> dict[str, str]:
        """This study's unfinished claims: unit -> the driver holding it."""
        with self.engine.begin() as conn:
            return dict(conn.execute(sa.select(claims.c.unit, claims.c.driver).where(
                claims.c.study == self.study, claims.c.done.is_(False))).all())

    def live_drivers(self) -> set[str]:
        """Drivers of this study that are alive (this one included, unless stopped)."""
        now = time.time()
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(drivers).where(drivers.c.study == self.study,
                                                         drivers.c.stopped.is_(False))).all()
        live = set()
        for r in rows:
            if r.host == self.host and r.id != self.driver_id:
                if _alive(r.pid) and now - r.beat_at < GRACE_S:  # a reused pid does not beat
                    live.add(r.id)
            elif r.id == self.driver_id or now - r.beat_at < GRACE_S:
                live.add(r.id)
        return live

    # ------------------------------------------------------------------ claims

    def claim(self, unit: str, candidate: str, _retry: bool = False) -> bool:
        """Take ``unit`` (a seed of ``candidate``) for this driver. False when it is done,
        or claimed by a live driver."""
        try:
            with self.engine.begin() as conn:
                conn.execute(claims.insert().values(study=self.study, unit=unit, candidate=candidate,
                                                    driver=self.driver_id, claimed_at=time.time(), done=False))
            return True
        except sa.exc.IntegrityError:
            pass
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(claims).where(claims.c.study == self.study, claims.c.unit == unit)).first()
        if row is None:  # released in between: try once more
            return self.claim(unit, candidate, _retry)
        if row.done:
            return False
        if row.driver == self.driver_id:
            return True
        if row.driver in self.live_drivers():
            return False
        with self.engine.begin() as conn:  # the owner is dead: exactly one taker wins
            taken = conn.execute(claims.update().where(
                claims.c.study == self.study, claims.c.unit == unit, claims.c.driver == row.driver,
                claims.c.done.is_(False)).values(driver=self.driver_id, claimed_at=time.time())).rowcount
        if taken == 0 and not _retry:  # another driver won, or cleared the dead claim (clear_dead): look again
            return self.claim(unit, candidate, _retry=True)
        return taken == 1

    def release(self, unit: str) -> None:
        """Give an unfinished claim back (its training crashed and will be run again)."""
        with self.engine.begin() as conn:
            conn.execute(claims.delete().where(claims.c.study == self.study, claims.c.unit == unit,
                                               claims.c.driver == self.driver_id, claims.c.done.is_(False)))

    def finish(self, unit: str) -> bool:
        """Mark this driver's claim done; False if another driver took it over meanwhile."""
        with self.engine.begin() as conn:
            return conn.execute(claims.update().where(
                claims.c.study == self.study, claims.c.unit == unit, claims.c.driver == self.driver_id,
            ).values(done=True)).rowcount == 1

    def busy_candidates(self) -> set[str]:
        """Candidates with an unfinished claim held by a live driver."""
        live = self.live_drivers()
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(claims.c.candidate, claims.c.driver).where(
                claims.c.study == self.study, claims.c.done.is_(False))).all()
        return {r.candidate for r in rows if r.driver in live}

    def done_units(self) -> set[str]:
        with self.engine.begin() as conn:
            return set(conn.execute(sa.select(claims.c.unit).where(claims.c.study == self.study,
                                                                  claims.c.done.is_(True))).scalars())

    # ------------------------------------------------------------------ results

    def record(self, unit: str, records: Iterable[RunRecord]) -> list[RunRecord]:
        """Store result rows of ``unit`` while this driver holds its claim; a rung the unit
        already has a (non-crashed) row for is skipped. Returns the rows stored."""
        records = [r.replace(study=self.study) for r in records]
        stored = []
        now = time.time()
        with self.engine.begin() as conn:
            owner = conn.execute(sa.select(claims.c.driver).where(
                claims.c.study == self.study, claims.c.unit == unit)).scalar()
            if owner != self.driver_id:
                return []
            have = set(conn.execute(sa.select(results.c.rung).where(
                results.c.study == self.study, results.c.unit == unit,
                results.c.status != Status.CRASHED.value)).scalars())
            for r in records:
                if r.status is not Status.CRASHED and r.rung in have:
                    continue
                conn.execute(results.insert().values(study=self.study, unit=unit, rung=r.rung, run_id=r.run_id,
                                                     status=r.status.value, record=r.to_json(), created_at=now))
                have.add(r.rung) if r.status is not Status.CRASHED else None
                stored.append(r)
        return stored

    def import_rows(self, unit_of, records: Iterable[RunRecord]) -> int:
        """Bring rows from a ``runs.csv`` written before the ledger existed into it (once:
        rows whose run id is stored already are skipped); finished units are marked done."""
        n = 0
        now = time.time()
        with self.engine.begin() as conn:
            known = set(conn.execute(sa.select(results.c.run_id).where(results.c.study == self.study)).scalars())
            done = set(conn.execute(sa.select(claims.c.unit).where(claims.c.study == self.study)).scalars())
            for r in records:
                if r.run_id in known:
                    continue
                unit = unit_of(r)
                conn.execute(results.insert().values(study=self.study, unit=unit, rung=r.rung, run_id=r.run_id,
                                                     status=r.status.value, record=r.replace(study=self.study).to_json(),
                                                     created_at=now))
                known.add(r.run_id)
                n += 1
                if r.status is not Status.CRASHED and unit not in done:
                    conn.execute(claims.insert().values(study=self.study, unit=unit, candidate=r.label,
                                                        driver=self.driver_id, claimed_at=now, done=True))
                    done.add(unit)
        return n

    def results(self, after: int = 0) -> list[tuple[int, RunRecord]]:
        """Stored rows with id > ``after``, oldest first, as (id, record)."""
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(results.c.id, results.c.record).where(
                results.c.study == self.study, results.c.id > after).order_by(results.c.id)).all()
        return [(r.id, RunRecord.from_json(r.record)) for r in rows]

    def crash_count(self, unit: str) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(results).where(
                results.c.study == self.study, results.c.unit == unit,
                results.c.status == Status.CRASHED.value)).scalar())

    # ------------------------------------------------------------------ candidates

    def entry(self, candidate: str) -> CandidateEntry | None:
        with self.engine.begin() as conn:
            r = conn.execute(sa.select(candidates).where(candidates.c.study == self.study,
                                                         candidates.c.candidate == candidate)).first()
        return None if r is None else CandidateEntry(r.candidate, r.trial_number, r.state, r.driver)

    def entries(self) -> list[CandidateEntry]:
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(candidates).where(candidates.c.study == self.study)).all()
        return [CandidateEntry(r.candidate, r.trial_number, r.state, r.driver) for r in rows]

    def register_candidate(self, candidate: str, trial_number: int, cap: int | None = None) -> CandidateEntry | None:
        """Say that ``trial_number`` stands for ``candidate``. If another driver registered
        the candidate first, its entry is returned (and the caller's trial is a duplicate).
        With ``cap``, None when the study already has that many candidates (the count and
        the insert are one serialised transaction, so N drivers never exceed it)."""
        try:
            with self.engine.begin() as conn:
                if cap is not None:
                    if self.engine.dialect.name == "postgresql":
                        conn.exec_driver_sql("LOCK TABLE searchmaps_candidates IN SHARE ROW EXCLUSIVE MODE")
                    n = conn.execute(sa.select(sa.func.count()).select_from(candidates).where(
                        candidates.c.study == self.study)).scalar()
                    if n >= cap:
                        return None
                conn.execute(candidates.insert().values(study=self.study, candidate=candidate,
                                                        trial_number=trial_number, state=CandidateState.OPEN,
                                                        driver=self.driver_id, updated_at=time.time()))
            return CandidateEntry(candidate, trial_number, CandidateState.OPEN, self.driver_id)
        except sa.exc.IntegrityError:
            return self.entry(candidate)

    def replace_trial(self, candidate: str, old: int | None, new: int) -> bool:
        """Point an open candidate at a new trial (its old one was closed); only if it
        still points at ``old``."""
        with self.engine.begin() as conn:
            return conn.execute(candidates.update().where(
                candidates.c.study == self.study, candidates.c.candidate == candidate,
                candidates.c.trial_number == old if old is not None else candidates.c.trial_number.is_(None),
                candidates.c.state == CandidateState.OPEN).values(trial_number=new, driver=self.driver_id,
                                                     updated_at=time.time())).rowcount == 1

    def begin_tell(self, candidate: str) -> bool:
        """Take the right to tell the candidate's trial its result: exactly one driver gets
        it (an entry left ``telling`` by a dead driver can be taken again)."""
        with self.engine.begin() as conn:
            if conn.execute(candidates.update().where(
                    candidates.c.study == self.study, candidates.c.candidate == candidate,
                    candidates.c.state == CandidateState.OPEN).values(
                    state=CandidateState.TELLING, driver=self.driver_id, updated_at=time.time())).rowcount == 1:
                return True
        e = self.entry(candidate)
        if e is None or e.state != CandidateState.TELLING or e.driver in self.live_drivers():
            return False
        with self.engine.begin() as conn:
            return conn.execute(candidates.update().where(
                candidates.c.study == self.study, candidates.c.candidate == candidate,
                candidates.c.state == CandidateState.TELLING, candidates.c.driver == e.driver).values(
                driver=self.driver_id, updated_at=time.time())).rowcount == 1

    def reopen_told(self) -> int:
        """Every told candidate open again (``--seeds`` grew: its trial is told anew, with every seed)."""
        with self.engine.begin() as conn:
            return conn.execute(candidates.update().where(candidates.c.study == self.study, candidates.c.state
                                == CandidateState.TOLD).values(state=CandidateState.OPEN, updated_at=time.time())).rowcount

    def end_tell(self, candidate: str, trial_number: int | None = None) -> None:
        values = {"state": CandidateState.TOLD, "updated_at": time.time()}
        if trial_number is not None:
            values["trial_number"] = trial_number
        with self.engine.begin() as conn:
            conn.execute(candidates.update().where(candidates.c.study == self.study,
                                                   candidates.c.candidate == candidate).values(**values))

    def count_candidates(self) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(candidates).where(
                candidates.c.study == self.study)).scalar())
