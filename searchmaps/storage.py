"""The storage database of a study: its URL made into an engine several processes can share
(SQLite serialised, PostgreSQL with pre-ping), searchmaps' tables next to Optuna's, the
check a search makes before Ray starts, and the one-line errors a storage gives
(:class:`StorageError`: a flag to change; :class:`StorageFault`: the machine failed
mid-search, with a hint naming the cause). The :class:`~searchmaps.ledger.Ledger` uses them.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

from .config import ConfigError

SQLITE_TIMEOUT_S = 60.0

metadata = sa.MetaData()
drivers = sa.Table(
    "searchmaps_drivers", metadata,
    sa.Column("id", sa.String(96), primary_key=True),
    sa.Column("study", sa.String(255), nullable=False, index=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("beat_at", sa.Float, nullable=False),
    sa.Column("stopped", sa.Boolean, nullable=False, default=False),
)
claims = sa.Table(
    "searchmaps_claims", metadata,
    sa.Column("study", sa.String(255), primary_key=True),
    sa.Column("unit", sa.String(512), primary_key=True),
    sa.Column("candidate", sa.String(255), nullable=False),
    sa.Column("driver", sa.String(96), nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
    sa.Column("done", sa.Boolean, nullable=False, default=False),
)
results = sa.Table(
    "searchmaps_results", metadata,
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
    "searchmaps_candidates", metadata,
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
    a folder made read-only, a database that went down): a fault of the machine, not of
    the flags. The message is one line naming what failed (a URL without its password)
    and the cause; ``hint`` says what to put right (free space, make it writable, bring
    the database back)."""

    def __init__(self, message: str, hint: str = "bring the storage back"):
        super().__init__(message)
        self.hint = hint


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def fault_hint(cause: BaseException, where: str) -> str:
    """What to put right for ``cause`` (an OSError or a database error) on ``where``."""
    text = str(getattr(cause, "orig", None) or cause).lower()
    code = getattr(cause, "errno", None)
    if code in (errno.EISDIR, errno.ENOTDIR) and getattr(cause, "filename", None):
        return f"move {cause.filename} away (a folder stands where a file belongs)"
    if code in NO_SPACE or "disk is full" in text or "no space left" in text:
        return f"free space on the disk of {where}"
    if code in NOT_WRITABLE or "readonly" in text or "read-only" in text or "permission denied" in text:
        return f"make {where} writable again"
    return "bring the database back"


def storage_fault(exc: BaseException, url: str) -> StorageFault:
    """The :class:`StorageFault` for ``exc``, a database error (SQLAlchemy's, or one that
    Optuna wrapped around it) from the storage at ``url``, or an ``OSError`` on a file."""
    cause = exc
    while cause is not None and not isinstance(cause, (sa.exc.SQLAlchemyError, OSError)):
        cause = cause.__cause__ or cause.__context__
    cause = cause or exc
    if isinstance(cause, OSError) and not isinstance(cause, sa.exc.SQLAlchemyError):
        what = cause.filename or "a file of the study folder"
        folder = os.path.dirname(str(cause.filename)) if cause.filename else "the study folder"
        return StorageFault(f"{what}: {cause.strerror or describe_db_error(cause)}", fault_hint(cause, folder))
    parsed = sa.engine.make_url(url)
    shown = parsed.render_as_string(hide_password=True)
    orig = getattr(cause, "orig", None) or cause
    # the driver's first line says what happened ("server closed the connection unexpectedly",
    # "database or disk is full"); the lines after it are hints
    first = next((ln.strip() for ln in str(orig).splitlines() if ln.strip()), "") or describe_db_error(cause)
    where = (os.path.dirname(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database
             else shown)
    return StorageFault(f"the storage {shown} failed: {first[:200]}", fault_hint(cause, where))


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
                metadata.create_all(conn)
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
