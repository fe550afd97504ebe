"""Typed result rows and runs.csv: parsed once, appended safely by several writers."""

import csv
import math
import multiprocessing as mp
import shutil
from pathlib import Path

import pytest
from helpers import record

from searchmaps.config import Candidate, ReuseMap
from searchmaps.results import (COLUMNS, ResultsError, RunRecord, RunsFile, Status, perplexity, read_runs,
                                records_frame, statistics_rows)

COMMITTED = Path(__file__).resolve().parent.parent / "results" / "ilr-table1-rope-tokens" / "runs.csv"


def rec(seed=0, m="4,2,1,1", run_id=None):
    """A record with a curve and config values of every kind, its run_id fixed by map and seed."""
    return record(m, seed, loss=2.5, run_id=run_id or f"id-{m}-{seed}-ok", config_hash="abc",
                  curve=({"step": 1, "tokens": 8, "val_loss": 2.5},),
                  config={"model.n_layers": 4, "model.reuse": m, "train.tokens": None, "train.compile": True,
                          "train.lr": 0.003})


def test_a_record_survives_json_and_csv_unchanged(tmp_path):
    r = rec()
    assert RunRecord.from_json(r.to_json()).to_json() == r.to_json()  # (compared as JSON: NaN != NaN)
    f = RunsFile(tmp_path / "runs.csv")
    assert f.append([r]) == 1
    (back,) = f.read()
    assert back.to_json() == r.to_json()  # types restored: int seed, Status, float losses, config scalars
    assert back.status is Status.OK and back.config["train.tokens"] is None and back.config["train.compile"] is True


def test_map_and_pe_are_fields_and_the_label_is_only_a_name():
    r = rec(m="block:2")
    assert (r.map, r.pe, r.label) == ("block:2", "rope", "block:2|rope")
    assert r.candidate == Candidate(ReuseMap((1, 1, 1, 1), 2), "rope")
    frame = records_frame([r, rec(1)])
    assert list(frame["map"]) == ["block:2", "4,2,1,1"] and list(frame["pe"]) == ["rope", "rope"]


def test_the_rows_the_statistics_use_are_the_last_horizons_ok_eval_rows():
    rows = [record("1,1", 0, loss=2.0, rung=0), record("1,1", 0, loss=1.9, rung=1),
            record("1,1", 1, loss=1.8, rung=1, role="tuning"),  # a tuning seed is never compared
            record("2,1", 0, status="failed", rung=1), record("2,1", 2, loss=math.nan, rung=1),
            record("2,1", 1, loss=800.0, rung=1),  # a finite loss whose perplexity overflows still counts
            record("1,1", 0, loss=1.7, rung=1)]  # appended twice: the last row stands
    ok = statistics_rows(records_frame(rows))
    assert sorted(zip(ok["candidate"], ok["seed"], ok["val_loss"])) == [("1,1|rope", 0, 1.7), ("2,1|rope", 1, 800.0)]
    assert math.isinf(ok.loc[ok["seed"] == 1, "val_ppl"].item())


def test_appends_skip_rows_already_there_and_write_one_header(tmp_path):
    f = RunsFile(tmp_path / "runs.csv")
    assert f.append([rec(0), rec(1)]) == 2
    assert f.append([rec(1), rec(2), rec(2)]) == 1
    text = (tmp_path / "runs.csv").read_text()
    assert text.count("run_id,") == 1 and [r.seed for r in f.read()] == [0, 1, 2]


def test_a_line_torn_by_a_killed_writer_is_ignored_then_cut(tmp_path):
    f = RunsFile(tmp_path / "runs.csv")
    f.append([rec(0)])
    with open(tmp_path / "runs.csv", "a") as out:
        out.write("id-torn,s,4,2,1,1|rope,4,2")  # no newline: the writer died here
    assert [r.seed for r in read_runs(tmp_path / "runs.csv")] == [0]
    f.append([rec(1)])
    assert [r.seed for r in f.read()] == [0, 1] and "id-torn" not in (tmp_path / "runs.csv").read_text()


@pytest.mark.parametrize("damage, words", [
    (lambda p: p.write_bytes(b"run_id,map,pe,seed,status\n\x00\x01binary\n"), "binary"),
    (lambda p: p.write_bytes(b'run_id,map,pe,seed,status\nx,"1,1",rope,zero,ok\n'), "'seed'"),
    (lambda p: p.write_bytes("run_id,map,pe,seed,status,val_loss\nx,\"1,1\",rope,0,ok,abc\n".encode()), "val_loss"),
    (lambda p: p.write_bytes(b"run_id,map,pe,seed,status\nx,\"1,1\",rope,0,exploded\n"), "status"),
    (lambda p: p.write_bytes(b"a,b\n1,2\n"), "not a runs.csv"),
    (lambda p: p.write_bytes(b"run_id,map,pe,seed,status\n\xff\xfe\n"), "UTF-8"),
])
def test_a_damaged_file_is_one_line_naming_file_and_line(tmp_path, damage, words):
    path = tmp_path / "runs.csv"
    damage(path)
    with pytest.raises(ResultsError) as err:
        read_runs(path)
    msg = str(err.value)
    assert str(path) in msg and words in msg and "\n" not in msg


def _writer(path, worker, queue):
    f = RunsFile(path)
    for i in range(25):
        f.append([rec(seed=worker * 100 + i, run_id=f"w{worker}-{i}")])
    queue.put(worker)


def test_writers_in_several_processes_share_one_file(tmp_path):
    """Four processes appending at once (two drivers in one results folder): one header,
    every row whole and once."""
    path = tmp_path / "runs.csv"
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, w, queue)) for w in range(4)]
    for p in procs:
        p.start()
    assert sorted(queue.get(timeout=120) for _ in procs) == [0, 1, 2, 3]
    for p in procs:
        p.join(timeout=30)
    rows = read_runs(path)
    assert len(rows) == 100 and len({r.run_id for r in rows}) == 100
    with open(path, newline="") as fh:
        assert sum(1 for line in csv.reader(fh) if line and line[0] == "run_id") == 1


def test_a_runs_csv_from_before_run_ids_is_read_and_brought_up_to_date_once(tmp_path):
    legacy = tmp_path / "runs.csv"
    shutil.copy(COMMITTED, legacy)
    old = read_runs(legacy)
    assert len(old) == 55 and all(r.run_id.startswith("legacy-") for r in old)
    assert {r.map for r in old} >= {"1,1,1,1", "block:2", "4,2,1,1"} and old[0].device == "cpu"
    assert [r.run_id for r in read_runs(legacy)] == [r.run_id for r in old]  # ids derived from the rows: stable
    f = RunsFile(legacy)
    assert f.append([rec(7)]) == 1
    header = legacy.read_text().splitlines()[0].split(",")
    assert header[: len(COLUMNS)] == COLUMNS
    new = f.read()
    assert [r.to_json() for r in new[:55]] == [r.to_json() for r in old] and new[55].seed == 7  # old rows kept


def test_perplexity_saturates_instead_of_overflowing():
    assert perplexity(2.0) == pytest.approx(math.exp(2.0))
    assert perplexity(710.0) == math.inf and math.isnan(perplexity(float("nan")))


@pytest.mark.parametrize("study", ["ilr-table1-rope-tokens", "ilr-table1-rope-flops"])
def test_committed_studies_hold_a_relative_storage_and_their_planned_comparisons(study):
    import json

    info = json.loads((COMMITTED.parent.parent / study / "study.json").read_text())
    assert info["storage"] == "sqlite:///optuna.db"  # relative to the study folder, no machine's path
    assert info["planned"] == ["4,2,1,1/2,2,2,2", "4,2,1,1/3,2,2,1", "all/1,1,1,1"]
