"""runs.csv against the storage (the source of truth), and a report that only reads: real
SQLite files, a real search, real signals. Each test fails without the fix it names."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from helpers import run_cli, run_cli_warm, study_info, study_records
from searchmaps.audit import UNTRUSTED, audit_study, stored_records
from searchmaps.ledger import Ledger, check_storage
from searchmaps.results import RunsFile, read_runs

RESULTS = {"1,1,1,1|rope": [10.0, 10.4, 9.8], "2,1,1,1|rope": [9.5, 9.9, 9.6], "4,2,1,1|rope": [9.2, 9.7, 9.4]}


def stored_study(folder: Path, name: str = "s") -> Path:
    """A study folder as a search leaves it: its rows in a real SQLite storage inside the
    folder (the ledger's tables) and the same rows in runs.csv, appended as a driver appends."""
    folder.mkdir(parents=True)
    ledger = Ledger(check_storage(f"sqlite:///{folder / 'optuna.db'}"), name)
    records = [r.replace(study=name) for r in study_records(RESULTS, study=name)]
    ledger.import_rows(lambda r: f"{r.label}#{r.seed}", records)
    RunsFile(folder / "runs.csv").append(records)
    (folder / "study.json").write_text(json.dumps(study_info(name, 3)))
    ledger.engine.dispose()
    return folder


def report(folder, *extra):
    return run_cli_warm("report", folder, "--no-attach", *extra, timeout=300)


def test_a_clean_copy_is_left_byte_for_byte(tmp_path):
    folder = stored_study(tmp_path / "s")
    before = (folder / "runs.csv").read_bytes()
    audit = audit_study(folder, json.loads((folder / "study.json").read_text()))
    assert audit.checked and not audit.repaired and audit.sentence is None
    assert (folder / "runs.csv").read_bytes() == before


@pytest.mark.parametrize("damage", ["cut", "edited-loss", "edited-hash", "edited-seed", "deleted", "duplicated"])
def test_a_damaged_copy_is_restored_from_the_storage_before_the_report(tmp_path, damage):
    folder = stored_study(tmp_path / "s")
    runs = folder / "runs.csv"
    clean = runs.read_bytes()
    lines = clean.decode().splitlines(keepends=True)
    victim = lines[4]
    if damage == "cut":  # a writer killed mid-line: the last row half there
        text = "".join(lines[:-1]) + lines[-1][:40]
    elif damage == "deleted":
        text = "".join(lines[:4] + lines[5:])
    elif damage == "duplicated":
        text = "".join(lines + [victim])
    else:
        cells = next(csv.reader([victim]))
        col = {"edited-loss": "val_loss", "edited-hash": "config_hash", "edited-seed": "seed"}[damage]
        i = next(csv.reader([lines[0]])).index(col)
        assert cells[i] != {"val_loss": "1.5", "config_hash": "forged", "seed": "7"}[col]
        cells[i] = {"val_loss": "1.5", "config_hash": "forged", "seed": "7"}[col]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(cells)
        text = "".join(lines[:4] + [buf.getvalue()] + lines[5:])
    runs.write_text(text)
    out = report(folder)
    assert out.returncode == 0, out.stderr
    assert "restored from the storage" in out.stderr and out.stderr.count("\n") <= 3, out.stderr
    assert runs.read_bytes() == clean  # every cell as the driver wrote it, in its order
    summary = (folder / "summary.csv").read_text()
    assert "4,2,1,1" in summary and len(read_runs(runs)) == 9


def test_a_row_the_storage_does_not_hold_is_moved_aside_not_used(tmp_path):
    folder = stored_study(tmp_path / "s")
    runs = folder / "runs.csv"
    clean = runs.read_bytes()
    lines = clean.decode().splitlines(keepends=True)
    row = next(csv.reader([lines[-1]]))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["forged-run", *row[1:]])
    runs.write_text("".join(lines) + buf.getvalue())
    audit = audit_study(folder, json.loads((folder / "study.json").read_text()))
    assert audit.untrusted == ("forged-run",) and "runs.untrusted.csv" in audit.sentence
    assert runs.read_bytes() == clean
    aside = read_runs(folder / UNTRUSTED)
    assert [r.run_id for r in aside] == ["forged-run"]


def test_without_a_storage_a_cut_line_is_said_not_silently_dropped(tmp_path):
    folder = stored_study(tmp_path / "s")
    (folder / "optuna.db").unlink()
    runs = folder / "runs.csv"
    runs.write_bytes(runs.read_bytes()[:-30])
    out = report(folder)
    assert out.returncode == 0, out.stderr
    assert "ends in a cut line" in out.stderr and "cannot be restored" in out.stderr


def test_the_storage_is_read_without_writing(tmp_path):
    folder = stored_study(tmp_path / "s")
    db = folder / "optuna.db"
    before = db.read_bytes()
    os.chmod(db, 0o444)
    try:
        assert len(stored_records(f"sqlite:///{db}", "s")) == 9
    finally:
        os.chmod(db, 0o644)
    assert db.read_bytes() == before
    assert stored_records(f"sqlite:///{tmp_path / 'absent.db'}", "s") is None
    assert not (tmp_path / "absent.db").exists()  # not created by looking


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))


def test_a_report_never_creates_tables_in_a_storage_outside_its_folder(tmp_path):
    """study.json names an unrelated SQLite file: the report reads only its own folder."""
    folder = stored_study(tmp_path / "s")
    (folder / "optuna.db").unlink()
    other = tmp_path / "unrelated.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    before = other.read_bytes()
    info = json.loads((folder / "study.json").read_text())
    (folder / "study.json").write_text(json.dumps({**info, "storage": f"sqlite:///{other}"}))
    out = run_cli_warm("report", folder, timeout=300)  # attaching the figure too
    assert out.returncode == 0, out.stderr
    assert tables(other) == ["notes"] and other.read_bytes() == before
    assert not (folder / "optuna.db").exists()
    assert "not in the dashboard" in out.stderr  # said, not done


def test_a_report_attaches_to_the_folder_storage_without_creating_tables(tmp_path):
    folder = stored_study(tmp_path / "s")
    db = folder / "optuna.db"
    before = tables(db)  # searchmaps' tables only: Optuna's were never made here
    out = run_cli_warm("report", folder, timeout=300)
    assert out.returncode == 0, out.stderr
    assert tables(db) == before
    assert "not in the dashboard" in out.stderr


@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_and_sigterm_during_a_report_are_one_line(tmp_path, sig, code):
    folder = stored_study(tmp_path / "s")
    out = run_cli("report", folder, "--no-attach", env={**os.environ, "SEARCHMAPS_KILL_AT": f"report-audited:1:{sig}"},
                  timeout=300)
    assert out.returncode == code, (out.returncode, out.stderr[-1500:])
    assert "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0, out.stderr
    assert f"interrupted ({sig})" in out.stderr


@pytest.mark.e2e
def test_sigterm_while_a_search_writes_its_report_is_one_line(space_file, tmp_path, ray_env):
    """After ray.shutdown() (a local Ray) the handlers are ours again: 143 and one line."""
    from test_search import common

    args = [a for a in common(space_file, tmp_path / "res", "--seeds", "1", "--workers", "1") if a != "--no-report"]
    out = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="report:1:SIGTERM"), timeout=600)
    assert out.returncode == 143, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    assert "interrupted (SIGTERM) while writing the summary and report" in out.stderr


def run_args(space_file, results, study, ray_cluster) -> list[str]:
    from test_search import common

    return [*common(space_file, results, "--seeds", "2", "--workers", "1", "--study", study),
            "--ray-address", ray_cluster]


def search_held_after_first_tell(space_file, results, study, ray_env, ray_cluster, meanwhile, **kw) -> tuple[int, str]:
    """A tiny search (2 seeds, 1 worker) that stops itself once its first candidate is told;
    ``meanwhile(study_dir)`` damages its folder, then it goes on: (exit code, stderr).
    ``kw`` goes to the driver's subprocess."""
    from test_search import wait_stopped

    args = run_args(space_file, results, study, ray_cluster)
    proc = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="told:1:stop"), popen=True, **kw)
    try:
        wait_stopped(proc)
        meanwhile(results / study)
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


@pytest.mark.e2e
def test_a_copy_cut_mid_search_is_whole_when_the_search_ends(space_file, tmp_path, ray_env, ray_cluster):
    """The driver stops itself after the first candidate is told; meanwhile its runs.csv
    loses a row it had already read past and half of its last line; the search goes on
    and ends with every row, and says so."""
    def cut(folder):  # the first row lost whole (the driver has read past it), the last cut after 25 bytes
        lines = (folder / "runs.csv").read_bytes().splitlines(keepends=True)
        (folder / "runs.csv").write_bytes(b"".join([lines[0], *lines[2:-1], lines[-1][:25]]))

    results = tmp_path / "res"
    code, err = search_held_after_first_tell(space_file, results, "cut", ray_env, ray_cluster, cut)
    runs = results / "cut" / "runs.csv"
    assert code == 0, err[-2000:]
    rows = read_runs(runs)
    assert sorted((r.map, r.seed) for r in rows) == sorted((m, s) for m in ("1,1", "2,1", "1,2") for s in (0, 1))
    assert "restored from the storage" in err, err[-2000:]
    assert not runs.read_bytes().endswith(b",") and runs.read_text().count("\n") == 7


@pytest.mark.e2e
def test_an_optuna_db_deleted_mid_search_is_said_and_rebuilt_from_runs_csv(space_file, tmp_path, ray_env, ray_cluster):
    """The driver stops itself after the first candidate is told and its optuna.db is deleted
    meanwhile: the search goes on (its connection writes to the deleted file), says so at the
    end and rebuilds the storage from runs.csv, so the folder ends with a whole study."""
    from test_search import MAPS, assert_each_pair_once, assert_study_closed, trials

    results = tmp_path / "res"
    code, err = search_held_after_first_tell(space_file, results, "gone", ray_env, ray_cluster,
                                             lambda folder: (folder / "optuna.db").unlink())
    assert code == 0, err[-2000:]
    assert "optuna.db was deleted while the search ran; every row is in runs.csv" in err, err[-2000:]
    rows = read_runs(results / "gone" / "runs.csv")
    assert_each_pair_once(rows, MAPS, seeds=2)
    assert (results / "gone" / "optuna.db").is_file()
    assert_study_closed(trials(results, "gone"))  # every candidate told again from the rows


def without_root_override():
    """In the driver's process, before it runs: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
    from the capability bounding set, so root obeys file modes as any user does (the tests
    run as root, where ``chmod a-w`` blocks nothing). prctl(PR_CAPBSET_DROP, cap)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def can_drop_override() -> bool:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "pass"], preexec_fn=without_root_override).returncode == 0


@pytest.mark.e2e
@pytest.mark.parametrize("fault", ["read-only", "lock-folder"])
def test_a_study_folder_made_unwritable_mid_search_is_one_line_trials_closed_nothing_lost(space_file, tmp_path, fault,
                                                                                         ray_env, ray_cluster):
    """The driver stops itself after the first candidate is told; meanwhile its study folder
    is made read-only (``chmod -R a-w``, the driver running as root without the capability
    that overrides file modes), or a folder takes the place of runs.csv's lock file. It goes
    on, fails on its next write: one line naming the file, the cause and what to put right
    (not a full disk nor a database), exit 1 (a fault of the machine, like a full disk: not
    a flag to change); no trial is left RUNNING and every row recorded stays. Put right,
    the same command finishes the study. Without the fix: a traceback from Ray Tune's log
    handler and a trial left RUNNING."""
    import subprocess

    from test_search import MAPS, assert_each_pair_once, assert_study_closed, trials

    if fault == "read-only" and (os.geteuid() != 0 or not can_drop_override()):
        pytest.skip("needs root that can drop CAP_DAC_OVERRIDE (as another user, chmod a-w alone does it)")
    results = tmp_path / "res"
    folder = results / "ro"
    lock = folder / "runs.csv.lock"
    kept: list[bytes] = []

    def damage(folder):
        kept.append((folder / "runs.csv").read_bytes())
        if fault == "read-only":
            subprocess.run(["chmod", "-R", "a-w", str(folder)], check=True)
        else:
            lock.unlink()
            lock.mkdir()

    try:
        code, err = search_held_after_first_tell(space_file, results, "ro", ray_env, ray_cluster, damage,
                                                 preexec_fn=without_root_override if fault == "read-only" else None)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(folder)], check=True)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1, err[-3000:]
    assert "Traceback" not in err and len(lines) == 3, err[-3000:]  # the headline, the study, the fault
    # Which write meets the fault first is a race: runs.csv (or its lock), or Optuna's
    # SQLite file beside it (seen in CI). Either way the line names the file and the cause,
    # and asks for the folder to be made writable, not for space or a database server.
    storage_first = "readonly database" in lines[-1]
    if fault == "read-only":
        assert "Permission denied" in lines[-1] or storage_first, lines[-1]
        assert f"make {folder} writable again" in lines[-1], lines[-1]
    else:
        assert f"{lock}: Is a directory" in lines[-1] and f"move {lock} away" in lines[-1], lines[-1]
    assert "free space" not in lines[-1] and "bring the database back" not in lines[-1]
    assert "run the same command again" in lines[-1]
    if storage_first:  # a read-only storage cannot close its trials: the next run does (checked below)
        assert f"{folder / 'optuna.db'}" in lines[-1] and "closed by the next run" in lines[-1], lines[-1]
    else:
        assert "trial(s) closed" in lines[-1], lines[-1]
        from optuna.trial import TrialState

        assert not [t.number for t in trials(results, "ro") if t.state == TrialState.RUNNING]
    assert (folder / "runs.csv").read_bytes().startswith(kept[0]) and len(read_runs(folder / "runs.csv")) >= 2
    if fault == "lock-folder":
        lock.rmdir()
    final = run_cli("run", *run_args(space_file, results, "ro", ray_cluster), env=ray_env, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    assert (folder / "runs.csv").read_bytes().startswith(kept[0])  # nothing lost, nothing rewritten
    assert_each_pair_once(read_runs(folder / "runs.csv"), MAPS, seeds=2)
    assert_study_closed(trials(results, "ro"))


@pytest.mark.e2e
def test_no_claim_of_a_killed_driver_survives_the_resumed_runs_end(space_file, tmp_path, ray_env, ray_cluster):
    """Killed between storing a unit's rows and marking its claim done, a driver leaves an
    open claim that the resumed run never needs to take over (the rows are there): the
    resumed run clears it as it stops. Without the fix it stayed open for ever."""
    from test_search import MAPS, assert_each_pair_once

    results = tmp_path / "res"
    args = run_args(space_file, results, "claims", ray_cluster)
    killed = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="recorded:1"), timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    ledger = Ledger(f"sqlite:///{results / 'claims' / 'optuna.db'}", "claims")
    assert ledger.open_claims(), "the kill left no open claim: the test tests nothing"
    final = run_cli("run", *args, env=ray_env, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    assert ledger.open_claims() == {}
    assert_each_pair_once(read_runs(results / "claims" / "runs.csv"), MAPS, seeds=2)


def process_tree(root: int) -> dict[int, str]:
    """The descendants of ``root`` as ``ps`` lists them: pid -> command name."""
    import subprocess

    kids: dict[int, list[int]] = {}
    names = {}
    for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True, text=True).stdout.splitlines():
        pid, ppid, name = line.split(None, 2)
        kids.setdefault(int(ppid), []).append(int(pid))
        names[int(pid)] = name.strip()
    out, todo = {}, list(kids.get(root, ()))
    while todo:
        pid = todo.pop()
        out[pid] = names[pid]
        todo += kids.get(pid, ())
    return out


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.e2e
def test_a_killed_drivers_own_ray_goes_with_it(space_file, tmp_path, ray_env):
    """kill -9 of a driver alone (not its process group) that started its own Ray: every
    process of that Ray (GCS, raylet, workers and the raylet's agents) is gone within 20 s.
    Without the fix the dashboard and runtime-env agents stayed about a minute."""
    import time

    from test_search import common, wait_stopped

    args = common(space_file, tmp_path / "res", "--seeds", "1", "--workers", "1", "--study", "k")
    proc = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="ray-start:1:stop"), popen=True)
    tree: dict[int, str] = {}
    try:
        wait_stopped(proc)
        tree = process_tree(proc.pid)
        assert {"raylet", "gcs_server"} <= set(tree.values()), tree
        os.kill(proc.pid, signal.SIGKILL)  # the driver alone
        proc.wait(timeout=60)
        deadline = time.time() + 20
        while time.time() < deadline and any(running(pid) for pid in tree):
            time.sleep(0.2)
        left = {pid: name for pid, name in tree.items() if running(pid)}
        assert not left, f"outlived the driver by 20 s: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in tree:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.e2e
@pytest.mark.parametrize("sig,code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_while_the_drivers_ray_starts_is_one_line(space_file, tmp_path, ray_env, sig, code):
    """The signal is sent as soon as the driver's own Ray has a GCS server and before its
    raylet is up: ray.init is starting processes, Ray's own SIGTERM handler in place (it
    calls sys.exit(15)). One line, 143 or 130, and no process of that Ray left behind.
    Without the fix SIGTERM exited 15 with no message."""
    import time

    from test_search import common

    args = common(space_file, tmp_path / "res", "--seeds", "1", "--workers", "1", "--study", "sig")
    proc = run_cli("run", *args, env=ray_env, popen=True)
    tree: dict[int, str] = {}
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            tree = process_tree(proc.pid)
            if "gcs_server" in tree.values():
                break
            time.sleep(0.05)
        assert "gcs_server" in tree.values() and "raylet" not in tree.values(), tree
        os.kill(proc.pid, getattr(signal, sig))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and len(lines) == 3, err[-2000:]  # headline, study, the signal
    assert f"interrupted ({sig})" in lines[-1] and "run the same command again to resume" in lines[-1]
    assert not read_runs(tmp_path / "res" / "sig" / "runs.csv")  # nothing trained
    deadline = time.time() + 20
    while time.time() < deadline and any(running(pid) for pid in tree):
        time.sleep(0.2)
    assert not [pid for pid in tree if running(pid)]


class _FlakyDriver:
    """What run_search closes after a signal: ``close`` fails with the storage fault the
    CI log showed ("database is locked", the signal having cut a transaction short) a given
    number of times, then closes one trial."""

    def __init__(self, faults: int, error: Exception | None = None):
        self.faults, self.error, self.calls, self.closed = faults, error, 0, None

    def close(self) -> int:
        from searchmaps.storage import StorageFault

        self.calls += 1
        if self.calls <= self.faults:
            raise self.error or StorageFault("the storage sqlite:///x/optuna.db failed: database is locked")
        self.closed = 1
        return 1


def test_an_interrupted_driver_closes_after_a_locked_moment_and_says_what_is_left_otherwise():
    from searchmaps.cli.search import CLOSE_TRIES, close_what_it_can

    flaky = _FlakyDriver(faults=2)  # locked twice, then free: the interrupt path closes its trial
    assert close_what_it_can(flaky, tries=CLOSE_TRIES) == "1 unfinished trial(s) closed" and flaky.calls == 3
    stuck = _FlakyDriver(faults=99)  # locked throughout: one line, no traceback, the next run closes them
    assert close_what_it_can(stuck, tries=2) == "unfinished trials are closed by the next run" and stuck.calls == 2
    broken = _FlakyDriver(faults=99, error=OSError("runs.csv: read-only file system"))  # not the storage: no retry
    assert close_what_it_can(broken, tries=CLOSE_TRIES) == "unfinished trials are closed by the next run"
    assert broken.calls == 1
