"""The GPU plan rehearsed on a CPU (issue 43): benchmarks/gpu_check.sh --rehearse makes the carry
as for a lent GPU, unpacks it into a fresh copy of the working tree with the GPU machine's
package set, and runs the plan's commands with --device cpu at tiny sizes; it fails when the
carry lacks a file or a command's flags differ from the plan's (benchmarks/gpu_plan_check.py).
The throughput benchmark writes each row as a JSON line the moment it is measured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECK = REPO / "benchmarks" / "gpu_check.sh"
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_plan_check import differences  # noqa: E402

PHASES = ["carry-check", "tests", "throughput", "study"]


def env(**kw) -> dict:
    out = {**os.environ, "PYTHON": sys.executable, "PYTHONUNBUFFERED": "1", **kw}
    out.pop("SEARCHMAPS_GPU_PATHS", None)
    return {**out, **kw}


def plan() -> str:
    return subprocess.run(["bash", str(CHECK), "OUT", "STUDY_DIR", "--plan"], capture_output=True, text=True,
                          check=True, cwd=REPO).stdout


def sealed_folder(tmp_path: Path, vocab: int = 1024) -> Path:
    """A sealed BPE folder of ``vocab`` prepared from docs/ (the rehearsal's corpus)."""
    out = tmp_path / "corpus"
    subprocess.run([sys.executable, "-m", "searchmaps.data", "prepare", "--data", str(REPO / "docs"), "--tokenizer",
                    f"bpe:{vocab}", "--out", str(out)], check=True, capture_output=True, cwd=REPO,
                   env=env(SEARCHMAPS_CACHE=str(tmp_path / "cache")))
    return out


def test_the_plan_runs_the_study_on_the_carried_corpus_with_the_gpu_paths():
    lines = dict(line.split(":", 1) for line in plan().splitlines())
    assert list(lines) == PHASES
    assert "inspect DATA --tokenizer bpe:1024" in lines["carry-check"]
    tests = lines["tests"].split()
    assert tests.index("tests/test_stacked.py") < tests.index("tests/test_packed_step.py") < \
        tests.index("tests/test_packed.py")  # the fused-attention and graph tests first
    assert "--junitxml OUT/junit.xml" in lines["tests"] and "--test-deadline" in lines["tests"]
    assert "--jsonl OUT/throughput.jsonl" in lines["throughput"] and "--compile on" in lines["throughput"]
    for flag in ("--preset ilr-small", "--data DATA", "--device cuda", "--compile on", "--pack-candidates 11"):
        assert flag in lines["study"], flag
    assert "--tokenizer" not in lines["study"]  # the preset's, which carry-check checks the folder against


def test_a_flag_that_differs_from_the_plan_is_named_and_sizes_are_not():
    gpu = plan()
    sized = gpu.replace("--device cuda", "--device cpu --d-model 32 --tokens 2048,4096 --tiny")
    assert differences(gpu, sized) == []
    off = gpu.replace("--compile on --data", "--compile off --data")
    assert differences(gpu, off) == ["study: the GPU plan has '--compile on' where the run has '--compile off'"]
    old_tiny = gpu.replace("--data DATA", "--data stdlib --tokenizer bytes")  # what --tiny rehearsed before
    assert differences(gpu, old_tiny) == ["study: the GPU plan has '--data DATA' where the run has '--data stdlib'"]
    dropped = "\n".join(line for line in gpu.splitlines() if not line.startswith("carry-check"))
    assert differences(gpu, dropped) == ["carry-check: the GPU plan runs this phase; the run did not"]


def test_the_carry_refuses_a_folder_without_a_file_its_meta_json_seals(tmp_path):
    folder = sealed_folder(tmp_path, vocab=300)
    (folder / "tokenizer.json").unlink()
    res = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_carry.sh"), str(folder)], capture_output=True,
                         text=True, cwd=REPO, env=env())
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"gpu_carry.sh: {folder} has no tokenizer.json, which its meta.json needs; carry the whole folder"]


def test_a_carry_without_tokenizer_json_stops_the_plan_at_its_first_phase(tmp_path):
    """The carry the old gpu_carry.sh made (train.bin, val.bin, meta.json of a sealed BPE folder)
    is refused by the carry check, exit 2, before the tests and the benchmark run."""
    folder = sealed_folder(tmp_path)
    carry = tmp_path / "carry"
    carry.mkdir()
    with tarfile.open(carry / "data.tar.xz", "w:xz") as tar:
        for name in ("train.bin", "val.bin", "meta.json"):
            tar.add(folder / name, arcname=name)
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(CHECK), str(out), str(tmp_path / "study"), "--cpu"], capture_output=True,
                         text=True, cwd=REPO, env=env(CARRY=str(carry), CARRIED_DATA=str(tmp_path / "data")),
                         timeout=300)
    log = (out / "gpu_check.log").read_text()
    assert res.returncode == 2, log
    assert f"cache file {tmp_path / 'data' / 'tokenizer.json'} cannot be read" in log
    assert "carry-check end (exit 2)" in log and "tests start" not in log
    assert [line.split(":")[0] for line in (out / "commands.txt").read_text().splitlines()] == ["carry-check"]


@pytest.mark.e2e
def test_the_benchmark_keeps_every_row_it_measured_when_killed(tmp_path):
    rows = tmp_path / "rows.jsonl"
    proc = subprocess.Popen([sys.executable, "benchmarks/gpu_throughput.py", "--tiny", "--only", "bytes", "--steps",
                             "1", "--warmup", "1", "--compile", "off", "--jsonl", str(rows)], cwd=REPO, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not (rows.exists() and rows.read_text().count("\n") >= 2) and proc.poll() is None:
            assert time.monotonic() < deadline, "no row in 10 minutes"
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    lines = rows.read_text().splitlines()
    got = [json.loads(line) for line in lines]  # every line whole
    assert len(got) >= 2, proc.stderr.read()
    assert got[0]["row"] == "study: 11 maps x 5 seeds, one unit" and got[0]["tokens_per_s"] > 0
    assert got[1]["row"] == "one model"


@pytest.mark.e2e
def test_the_rehearsal_takes_the_plans_commands_through_every_phase(tmp_path):
    """The whole rehearsal (pip download of the wheels included): exit 0, every phase stamped at
    its start and end, the tests' results in junit.xml in the plan's order, the benchmark's study
    row (eager: --rows 1), the study run to its end (compiled) with every row, the commands the
    plan's but for the device and sizes."""
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(CHECK), str(out), str(tmp_path / "study"), "--rehearse"], capture_output=True,
                         text=True, cwd=REPO, env=env(TMPDIR=str(tmp_path)), timeout=3600)
    log = (out / "gpu_check.log").read_text()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "its commands against the GPU plan: same" in res.stdout
    for phase in PHASES:
        assert f"{phase} start" in log and f"{phase} end" in log, phase
    assert differences(plan(), (out / "commands.txt").read_text()) == []
    cases = [c.get("name") for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert cases[0] == "test_stacked_forward_and_backward_on_the_fused_attention_kernels"
    rows = [json.loads(line) for line in (out / "throughput.jsonl").read_text().splitlines()]
    assert [(r["row"], r["compile"]) for r in rows] == [("study: 11 maps x 5 seeds, one unit, compile off", False)]
    with tarfile.open(out / "study.tar.gz") as tar:
        runs = next(m for m in tar.getmembers() if m.name.endswith("runs.csv"))
        lines = tar.extractfile(runs).read().decode().splitlines()
    assert len(lines) == 1 + 2 * 2 * 2  # 2 maps x 2 seeds x 2 rungs, each row recorded
    assert not list(tmp_path.glob("gpu-rehearsal.*"))  # its working folder removed
    shutil.rmtree(out / "study", ignore_errors=True)


def test_a_snapshot_of_a_study_being_written_holds_its_rows_and_a_whole_storage(tmp_path):
    """benchmarks/study_snapshot.py, which gpu_check.sh runs every minute of the study: the rows,
    study.json and a readable copy of the SQLite storage, open in WAL mode with a commit not yet
    checkpointed into the main file; no saved states, no WAL files, written whole or not at all."""
    import sqlite3

    from study_snapshot import snapshot

    study = tmp_path / "studies" / "s"
    (study / "checkpoints").mkdir(parents=True)
    (study / "checkpoints" / "a.pt").write_bytes(b"\0" * 1000)
    (study / "runs.csv").write_text("run_id,val_loss\nr1,2.5\n")
    (study / "study.json").write_text("{}")
    db = sqlite3.connect(study / "optuna.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE trials (n INTEGER)")
    with db:
        db.executemany("INSERT INTO trials VALUES (?)", [(i,) for i in range(50)])
    assert (study / "optuna.db-wal").stat().st_size > 0  # the rows are in the WAL, not yet in optuna.db
    archive = tmp_path / "out" / "study.tar.gz"
    assert snapshot(tmp_path / "studies", archive) == 3
    db.close()
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
        tar.extractall(tmp_path / "back")
    assert names == ["./s/optuna.db", "./s/runs.csv", "./s/study.json"]
    back = sqlite3.connect(tmp_path / "back" / "s" / "optuna.db")
    assert back.execute("SELECT COUNT(*) FROM trials").fetchone() == (50,)
    assert not [p for p in archive.parent.iterdir() if p != archive]  # no partial file left beside it
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "study_snapshot.py"), str(tmp_path / "none"),
                          str(archive)], capture_output=True, text=True)
    assert out.returncode == 2 and "not a folder" in out.stderr
