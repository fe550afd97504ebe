"""The shared state in the storage: one contract, run on SQLite and on a real PostgreSQL
server. Other drivers are real processes; a dead one is a process that was killed."""

import multiprocessing as mp
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa
from helpers import record

from searchmaps.storage import metadata as _meta
from searchmaps.ledger import (GRACE_S, Ledger, StorageError, check_storage, create_tables, drivers, make_engine,
                               storage_fault)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'optuna.db'}"
    return request.getfixturevalue("postgres_url")


def ledger(url, study="s"):
    lg = Ledger(url, study)
    lg.register()
    return lg


def dead_driver_claim(url: str, unit: str, study: str = "s") -> None:
    """A driver in another process claims ``unit`` and is killed before it finishes."""
    code = ("import os, signal; from searchmaps.ledger import Ledger; lg = Ledger(%r, %r); lg.register(); "
            "assert lg.claim(%r, 'c'); os.kill(os.getpid(), signal.SIGKILL)") % (url, study, unit)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -9, out.stderr


def test_a_unit_is_claimed_by_one_live_driver(url):
    a, b = ledger(url), ledger(url)
    assert a.claim("u#0", "u") and a.claim("u#0", "u")  # claiming again is idempotent
    assert not b.claim("u#0", "u")
    assert b.claim("u#1", "u")
    assert b.busy_candidates() == {"u"}


def test_a_finished_unit_is_never_claimed_again(url):
    a, b = ledger(url), ledger(url)
    assert a.claim("u#0", "u") and a.finish("u#0")
    a.stop()
    assert not b.claim("u#0", "u")
    assert b.done_units() == {"u#0"}


def test_a_killed_drivers_claim_is_taken_over_at_once_on_the_same_host(url):
    dead_driver_claim(url, "u#0")
    b = ledger(url)
    assert b.claim("u#0", "u")
    assert not ledger(url).claim("u#0", "u")  # and only by one


def test_a_dead_drivers_open_claims_are_cleared_when_a_driver_stops_and_live_ones_stay(url):
    """A driver killed after storing a unit's rows (before marking its claim done) leaves an
    open claim no later driver needs to take over: the next driver to stop clears it, and
    marks the dead driver stopped; a live driver's claim is left alone."""
    dead_driver_claim(url, "u#0")
    a, b = ledger(url), ledger(url)
    assert a.claim("u#1", "u")
    assert set(b.open_claims()) == {"u#0", "u#1"}
    b.stop()
    assert b.open_claims() == {"u#1": a.driver_id}
    with b.engine.begin() as conn:
        assert not conn.execute(sa.select(drivers.c.id).where(drivers.c.stopped.is_(False),
                                                              drivers.c.id != a.driver_id)).all()
    c = ledger(url)
    assert c.claim("u#0", "u")  # free again: claimed afresh
    a.stop()
    c.stop()
    assert c.open_claims() == {}


def test_a_silent_driver_on_another_host_loses_its_claims_after_the_grace_period(url):
    a, b = ledger(url), ledger(url)
    assert a.claim("u#0", "u")
    with a.engine.begin() as conn:  # a seen from b: another host, heartbeat fresh
        conn.execute(drivers.update().where(drivers.c.id == a.driver_id).values(host="elsewhere", pid=1))
    assert not b.claim("u#0", "u")
    with a.engine.begin() as conn:  # ... then silent for longer than the grace period
        conn.execute(drivers.update().where(drivers.c.id == a.driver_id).values(beat_at=time.time() - GRACE_S - 1))
    assert b.claim("u#0", "u")
    assert not a.finish("u#0")  # the old owner's late result is not recorded over it
    assert a.record("u#0", [record()]) == []


def test_a_stopped_driver_gives_its_unfinished_claims_back(url):
    a, b = ledger(url), ledger(url)
    assert a.claim("u#0", "u") and a.claim("u#1", "u") and a.finish("u#1")
    a.stop()
    assert b.claim("u#0", "u") and not b.claim("u#1", "u")


def test_rows_are_recorded_only_by_the_owner_and_each_rung_once(url):
    a, b = ledger(url), ledger(url)
    assert a.claim("u#0", "u")
    assert b.record("u#0", [record()]) == []  # not b's claim
    first = a.record("u#0", [record(rung=0), record(rung=1)])
    assert [r.rung for r in first] == [0, 1] and all(r.study == "s" for r in first)
    again = a.record("u#0", [record(rung=0), record(rung=1), record(rung=2)])  # a repeated training
    assert [r.rung for r in again] == [2]
    a.record("u#0", [record(rung=3, status="crashed"), record(rung=3, status="crashed")])  # history, every time
    assert a.crash_count("u#0") == 2
    rows = a.results()
    assert [r.rung for _, r in rows] == [0, 1, 2, 3, 3]
    assert [r.rung for _, r in a.results(after=rows[2][0])] == [3, 3]
    assert ledger(url, "other").results() == []  # studies are separate


def test_a_candidate_is_registered_once_and_told_once(url):
    a, b = ledger(url), ledger(url)
    assert a.register_candidate("c", 0).trial_number == 0
    assert b.register_candidate("c", 5).trial_number == 0  # b's trial is the duplicate
    assert a.replace_trial("c", 0, 7) and not b.replace_trial("c", 0, 8)
    assert a.begin_tell("c") and not b.begin_tell("c")
    a.end_tell("c")
    assert a.entry("c").state == "told" and not b.begin_tell("c")


def test_a_dead_tellers_candidate_can_be_told_by_another_driver(url):
    a = Ledger(url, "s", driver_id="elsewhere:1:x")
    a.register()
    with a.engine.begin() as conn:
        conn.execute(drivers.update().where(drivers.c.id == a.driver_id).values(host="elsewhere"))
    a.register_candidate("c", 0)
    assert a.begin_tell("c")
    with a.engine.begin() as conn:
        conn.execute(drivers.update().where(drivers.c.id == a.driver_id).values(beat_at=0.0))
    assert ledger(url).begin_tell("c")


def test_the_candidate_cap_holds(url):
    a = ledger(url)
    assert a.register_candidate("c1", 0, cap=2) and a.register_candidate("c2", 1, cap=2)
    assert a.register_candidate("c3", 2, cap=2) is None and a.count_candidates() == 2


def _claimer(url, units, queue):
    lg = Ledger(url, "s")
    lg.register()
    queue.put([u for u in units if lg.claim(u, "c")])


def _registrar(url, n, queue):
    lg = Ledger(url, "s")
    queue.put([c for c in (f"c{i}" for i in range(n)) if (e := lg.register_candidate(c, 0, cap=5)) is not None
               and e.driver == lg.driver_id])


@pytest.mark.parametrize("worker", ["claims", "registrations"])
def test_processes_racing_for_the_same_work_split_it_exactly(url, worker):
    """Four processes, all trying every unit (or candidate) at the same time: each is won
    by exactly one, and the candidate cap is never exceeded."""
    Ledger(url, "s")  # tables first, so the race is about the rows
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    target, arg = (_claimer, [f"u#{i}" for i in range(40)]) if worker == "claims" else (_registrar, 12)
    procs = [ctx.Process(target=target, args=(url, arg, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    won = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    flat = [x for w in won for x in w]
    if worker == "claims":
        assert sorted(flat) == sorted(arg)  # every unit once, none twice
    else:
        assert len(flat) == len(set(flat)) == 5  # the cap, exactly


# ---------------------------------------------------------------------------- bad storage


@pytest.mark.parametrize("make_url, words", [
    (lambda pg, tmp: "not a url", "not a database URL"),
    (lambda pg, tmp: "nosuchdb://x/y", "unknown database kind"),
    (lambda pg, tmp: "mysql://u:p@127.0.0.1/db", "not installed"),
    (lambda pg, tmp: "sqlite:///:memory:", "in-memory"),
    (lambda pg, tmp: f"sqlite:///{tmp}/no/such/folder/optuna.db", "does not exist"),
    (lambda pg, tmp: "sqlite:////proc/searchmaps/optuna.db", "does not exist"),
    (lambda pg, tmp: "sqlite:////proc/optuna.db", "cannot use it"),
    (lambda pg, tmp: "postgresql://postgres:pw@127.0.0.1:1/db", "cannot use it"),
    (lambda pg, tmp: f"postgresql://postgres:wrong@{pg[0]}:{pg[1]}/postgres", "password"),
    (lambda pg, tmp: f"postgresql://postgres:searchmaps-test@{pg[0]}:{pg[1]}/no_such_db", "no_such_db"),
    (lambda pg, tmp: "postgresql://postgres:pw@no-such-host.invalid/db", "cannot use it"),
])
def test_a_storage_that_cannot_work_is_one_line_naming_the_flag(postgres_server, tmp_path, make_url, words):
    with pytest.raises(StorageError) as err:
        check_storage(make_url(postgres_server, tmp_path))
    msg = str(err.value)
    assert msg.startswith("--storage") and words in msg and "\n" not in msg
    # no password shown, anywhere in the line (the short ones as they stand in a URL)
    assert not [p for p in ("wrong", "searchmaps-test", ":pw@", ":p@") if p in msg], msg


def test_a_good_storage_passes_the_check(url):
    engine = check_storage(url)
    with engine.begin() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(drivers)).scalar() == 0


def test_drivers_creating_the_tables_at_the_same_instant_all_succeed(url):
    """Eight connections create the tables of one fresh database at the same instant (what
    two drivers started together do), five times over: all succeed, and the storage check
    passes after. Unlocked, PostgreSQL fails some of them on its catalogue (duplicate key
    in pg_type_typname_nsp_index), as CI once saw."""
    engines = [make_engine(url) for _ in range(8)]
    for _round in range(5):
        _meta.drop_all(engines[0])
        for engine in engines:
            with engine.connect():
                pass  # connected before the start, so the creations meet
        barrier = threading.Barrier(len(engines))
        results = []

        def create(engine):
            barrier.wait()
            try:
                create_tables(engine)
                results.append("ok")
            except sa.exc.SQLAlchemyError as exc:
                results.append(str(exc).splitlines()[0])

        threads = [threading.Thread(target=create, args=(e,)) for e in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == ["ok"] * len(engines), results
    check_storage(url)


def test_a_storage_that_fails_mid_search_is_one_line_without_the_password():
    url = "postgresql://postgres:s3cret@127.0.0.1:1/db"  # nothing listens on port 1: a database that went down
    with pytest.raises(sa.exc.OperationalError) as err:
        make_engine(url).connect()
    msg = str(storage_fault(err.value, url))
    assert msg.startswith("the storage postgresql://postgres:***@127.0.0.1:1/db failed: ")
    assert "\n" not in msg and "s3cret" not in msg and "refused" in msg
    with pytest.raises(OSError) as err:  # a write to a full disk
        with open("/dev/full", "wb") as f:
            f.write(b"row")
    assert str(storage_fault(err.value, url)) == "a file of the study folder: No space left on device"
