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
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

from .config import ConfigError
from .results import RunRecord, Status

HEARTBEAT_S = 10.0  # how often a driver says it is alive
GRACE_S = 90.0  # a driver on another host is dead when silent this long
SQLITE_TIMEOUT_S = 60.0

_meta = sa.MetaData()
drivers = sa.Table(
    "searchmaps_drivers", _meta,
    sa.Column("id", sa.String(96), primary_key=True),
    sa.Column("study", sa.String(255), nullable=False, index=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("beat_at", sa.Float, nullable=False),
    sa.Column("stopped", sa.Boolean, nullable=False, default=False),
)
claims = sa.Table(
    "searchmaps_claims", _meta,
    sa.Column("study", sa.String(255), primary_key=True),
    sa.Column("unit", sa.String(512), primary_key=True),
    sa.Column("candidate", sa.String(255), nullable=False),
    sa.Column("driver", sa.String(96), nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
    sa.Column("done", sa.Boolean, nullable=False, default=False),
)
results = sa.Table(
    "searchmaps_results", _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(255), nullable=False, index=True),
    sa.Column("unit", sa.String(512), nullable=False),
    sa.Column("rung", sa.Integer, nullable=False),
    sa.Column("run_id", sa.String(96), nullable=False, unique=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)
candidates = sa.Table(
    "searchmaps_candidates", _meta,
    sa.Column("study", sa.String(255), primary_key=True),
    sa.Column("candidate", sa.String(255), primary_key=True),
    sa.Column("trial_number", sa.Integer, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),  # a CandidateState
    sa.Column("driver", sa.String(96), nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)


class StorageError(ConfigError):
    """The storage cannot be used; the message names ``--storage`` and what to change."""


class StorageFault(RuntimeError):
    """The storage, or a file of the study folder, failed while a search ran (a full disk,
    a database that went down): a fault of the machine, not of the flags. The message is
    one line naming what failed (a URL without its password) and the cause."""


def storage_fault(exc: BaseException, url: str) -> StorageFault:
    """The :class:`StorageFault` for ``exc``, a database error (SQLAlchemy's, or one that
    Optuna wrapped around it) from the storage at ``url``, or an ``OSError`` on a file."""
    cause = exc
    while cause is not None and not isinstance(cause, (sa.exc.SQLAlchemyError, OSError)):
        cause = cause.__cause__ or cause.__context__
    cause = cause or exc
    if isinstance(cause, OSError) and not isinstance(cause, sa.exc.SQLAlchemyError):
        what = cause.filename or "a file of the study folder"
        return StorageFault(f"{what}: {cause.strerror or describe_db_error(cause)}")
    shown = sa.engine.make_url(url).render_as_string(hide_password=True)
    orig = getattr(cause, "orig", None) or cause
    # the driver's first line says what happened ("server closed the connection unexpectedly",
    # "database or disk is full"); the lines after it are hints
    first = next((ln.strip() for ln in str(orig).splitlines() if ln.strip()), "") or describe_db_error(cause)
    return StorageFault(f"the storage {shown} failed: {first[:200]}")


# --------------------------------------------------------------------------- engine


def make_engine(url: str) -> sa.engine.Engine:
    """An engine for ``url`` that several processes can share (see the module doc).
    Raises :class:`StorageError` for a malformed URL, an unknown database kind or a
    missing driver package."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise StorageError(f"--storage {url!r} is not a database URL; use e.g. sqlite:///path/optuna.db "
                           f"or postgresql://user:password@host/database") from None
    kw: dict = {}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise StorageError("--storage: an in-memory SQLite database cannot hold a study; give a file "
                               "(sqlite:///path/optuna.db) or leave --storage out")
        kw["connect_args"] = {"timeout": SQLITE_TIMEOUT_S}
    elif parsed.get_backend_name() == "postgresql":
        kw["connect_args"] = {"connect_timeout": 10}
        kw["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(parsed, **kw)
    except sa.exc.NoSuchModuleError:
        raise StorageError(f"--storage: unknown database kind {parsed.drivername!r}; use sqlite:///... "
                           f"or postgresql://...") from None
    except ModuleNotFoundError as exc:
        extra = " (pip install -e .[postgres])" if parsed.get_backend_name() == "postgresql" else ""
        raise StorageError(f"--storage: the database driver {exc.name!r} for {parsed.drivername} is not "
                           f"installed{extra}") from None
    if parsed.get_backend_name() == "sqlite":
        serialise_sqlite(engine)
    return engine


def serialise_sqlite(engine: sa.engine.Engine) -> None:
    """Make every transaction on a SQLite engine take the write lock at BEGIN (``BEGIN
    IMMEDIATE``): a deferred transaction that reads and then writes can meet another
    writer and fail at once with "database is locked", whatever the busy timeout; an
    immediate one waits its turn. WAL lets readers (the dashboard) go on meanwhile.
    This is SQLAlchemy's documented recipe for pysqlite; it also applies to pooled
    connections opened before it, which are closed here."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):  # pragma: no cover - exercised by every test
        dbapi_conn.isolation_level = None  # pysqlite: no implicit BEGIN of its own
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):  # pragma: no cover
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()


def describe_db_error(exc: Exception) -> str:
    """The useful line of a database error (the driver's own words, without SQL)."""
    orig = getattr(exc, "orig", None) or exc
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("(Background on", "[SQL", "DETAIL"))]
    return (lines[-1] if lines else type(orig).__name__)[:200]


SCHEMA_LOCK = 0x5EA2C4  # the PostgreSQL advisory lock drivers take while they create the tables


def create_tables(engine: sa.engine.Engine, tries: int = 6) -> None:
    """Create searchmaps' tables if they are missing. Two drivers started at the same
    instant on a fresh PostgreSQL database would both issue ``CREATE TABLE`` and one would
    fail on PostgreSQL's catalogue (``pg_type_typname_nsp_index``): there the creation runs
    under a transaction-scoped advisory lock, so the second driver waits and then finds
    the tables. A race the lock does not cover (another client's DDL) is tried again."""
    for attempt in range(tries):
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
                _meta.create_all(conn)
            return
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
            if attempt == tries - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def check_storage(url: str) -> sa.engine.Engine:
    """Connect, create searchmaps' tables if needed and write one row: the checks a
    search would otherwise fail on minutes later, after Ray started. Returns the engine;
    raises :class:`StorageError` with one line naming ``--storage``."""
    engine = make_engine(url)
    parsed = engine.url
    if parsed.get_backend_name() == "sqlite":
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise StorageError(f"--storage {url}: folder {folder} does not exist; create it or choose another path")
        if not os.access(folder, os.W_OK):
            raise StorageError(f"--storage {url}: folder {folder} is not writable (SQLite needs to write its "
                               f"journal there); choose another path")
    try:
        create_tables(engine)
        with engine.begin() as conn:
            probe = f"probe-{uuid.uuid4().hex}"
            conn.execute(drivers.insert().values(id=probe, study="", host="", pid=0, started_at=0.0,
                                                 beat_at=0.0, stopped=True))
            conn.execute(drivers.delete().where(drivers.c.id == probe))
    except sa.exc.SQLAlchemyError as exc:
        shown = parsed.render_as_string(hide_password=True)
        raise StorageError(f"--storage {shown}: cannot use it ({describe_db_error(exc)}); check the host, port, "
                           f"user, password and database name, and that it is writable") from None
    return engine


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
        """This driver is done: give back its unfinished claims and say so."""
        with self.engine.begin() as conn:
            conn.execute(claims.delete().where(claims.c.study == self.study, claims.c.driver == self.driver_id,
                                               claims.c.done.is_(False)))
            conn.execute(drivers.update().where(drivers.c.id == self.driver_id).values(stopped=True))

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

    def claim(self, unit: str, candidate: str) -> bool:
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
            return self.claim(unit, candidate)
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
