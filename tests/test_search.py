"""The search end to end with real Ray and real Optuna storage, on tiny models.

All in-process searches join one Ray instance started with ``ray start --head`` (the
cluster path); the crash test runs the command as users do, with its own local Ray.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from searchmaps import flops
from searchmaps.config import ModelConfig
from searchmaps.run import main
from tests.conftest import ENV, free_port

def tiny_flops(reuse: str) -> int:
    return flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map(reuse))


def common(space_file, results, *extra):
    # budget: applied depth <= 3 -> 1,1  2,1  1,2  (3 maps); block:2 (depth 4) is out
    return ["--space", str(space_file), "--budget-flops", str(tiny_flops("2,1")), "--results-dir", str(results),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", *extra]


def read_runs(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_search_end_to_end_on_a_ray_cluster(ray_cluster, space_file, tmp_path, capsys):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "2", "--study", "s1", "--ray-address", ray_cluster)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "space tiny: 10 maps, 3 within" in err

    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{results}/s1/optuna.db")
    assert study.metric_names == ["val_ppl", "flops_per_token"]
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["map"] for t in done) == ["1,1", "1,2", "2,1"]
    for t in done:
        u = t.user_attrs
        assert len(u["val_ppl_per_seed"]) == 2 and u["seeds"] == [0, 1]
        assert t.values[0] == pytest.approx(sum(u["val_ppl_per_seed"]) / 2)
        assert t.values[1] == tiny_flops(u["map"]) == u["flops_per_token"]
        assert u["kv_bytes_per_token"] > 0 and u["tokens"] == 2048 and u["train_flops"] > 0
        assert t.params["pe"] == "rope"

    rows = read_runs(results / "s1" / "runs.csv")
    assert len(rows) == 6
    assert len({(r["config_hash"], r["seed"]) for r in rows}) == 6
    assert all(r["status"] == "ok" and r["config.model.d_model"] == "32" for r in rows)
    # seeds are paired: seed s of every map saw the same data order (same hash of config apart from map)
    assert {r["seed"] for r in rows} == {"0", "1"}

    # running the same command again trains nothing and changes nothing
    before = (results / "s1" / "runs.csv").read_bytes()
    assert main(argv) == 0
    assert (results / "s1" / "runs.csv").read_bytes() == before
    assert "0 trainings" in capsys.readouterr().err


def test_failed_trainings_are_recorded_and_the_study_goes_on(ray_cluster, space_file, tmp_path):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "1", "--study", "nan", "--lr", "1e12",
                  "--ray-address", ray_cluster)
    assert main(argv) == 0
    rows = read_runs(results / "nan" / "runs.csv")
    assert len(rows) == 3 and all(r["status"] == "failed" and "non-finite" in r["error"] for r in rows)
    study = optuna.load_study(study_name="nan", storage=f"sqlite:///{results}/nan/optuna.db")
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert len(failed) == 3 and all("non-finite" in t.user_attrs["error"] for t in failed)


def test_optimiser_respects_the_budget(ray_cluster, space_file, tmp_path):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "1", "--study", "tpe", "--sampler", "tpe", "--trials", "3",
                  "--ray-address", ray_cluster)
    assert main(argv) == 0
    study = optuna.load_study(study_name="tpe", storage=f"sqlite:///{results}/tpe/optuna.db")
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 3 and len({t.user_attrs["map"] for t in done}) == 3
    assert all(t.values[1] <= tiny_flops("2,1") for t in done)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert all("budget" in t.user_attrs["reason"] or "duplicate" in t.user_attrs["reason"] for t in pruned)


def test_dashboard_serves_the_study(ray_cluster, space_file, tmp_path):
    results = tmp_path / "results"
    assert main(common(space_file, results, "--seeds", "1", "--study", "dash", "--trials", "2",
                       "--ray-address", ray_cluster)) == 0
    port = free_port()
    dash = subprocess.Popen([str(Path(sys.executable).parent / "optuna-dashboard"),
                             f"sqlite:///{results}/dash/optuna.db", "--port", str(port), "--host", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        studies = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as r:
                    studies = json.load(r)["study_summaries"]
                break
            except OSError:
                time.sleep(0.2)
        assert studies is not None, "optuna-dashboard did not answer"
        (info,) = [s for s in studies if s["study_name"] == "dash"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{info['study_id']}?after=0", timeout=10) as r:
            detail = json.load(r)
        trials = [t for t in detail["trials"] if t["state"] == "Complete"]
        assert len(trials) == 2
        assert detail["objective_names"] == ["val_ppl", "flops_per_token"]
        assert {a["key"] for a in trials[0]["user_attrs"]} >= {"map", "val_ppl_per_seed", "kv_bytes_per_token"}
    finally:
        dash.terminate()
        dash.wait(timeout=10)


def test_kill_9_then_resume_loses_and_repeats_nothing(space_file, tmp_path):
    """A real run with its own local Ray, killed mid-way, then the same command again."""
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "searchmaps.run", *common(space_file, results, "--seeds", "2", "--study", "k",
                                                           "--workers", "2")]
    runs = results / "k" / "runs.csv"
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if runs.exists() and len(read_runs(runs)) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: Ray's own processes must cope
    proc.wait()
    before = read_runs(runs)
    assert 2 <= len(before) < 6

    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = read_runs(runs)
    keys = [(r["config_hash"], r["seed"]) for r in rows]
    assert len(rows) == 6 and len(set(keys)) == 6  # every expected row, none twice
    assert rows[: len(before)] == before  # appended, never rewritten
    study = optuna.load_study(study_name="k", storage=f"sqlite:///{results}/k/optuna.db")
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    done = {t.user_attrs["map"] for t in study.trials if t.state == TrialState.COMPLETE}
    assert done == {"1,1", "2,1", "1,2"}


# ---------------------------------------------------------------------------- bad input


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "searchmaps.run", *args], capture_output=True, text=True,
                          timeout=120, env=ENV)


@pytest.mark.parametrize("extra, flag", [
    (["--tokens", "1e5", "--train-flops", "1e12"], "--train-flops"),
    (["--seeds", "0"], "--seeds"),
    (["--sampler", "bayes"], "--sampler"),
    (["--budget-flops", "10"], "--budget-flops"),
    (["--budget-flops", "-1"], "--budget-flops"),
    (["--ray-address", "127.0.0.1:1"], "--ray-address"),
    (["--pe", "rope,sinus"], "--pe"),
    (["--space", "nosuchspace"], "--space"),
    (["--data", "/no/such/file.txt"], "--data"),
    (["--workers", "0"], "--workers"),
    (["--train-flops", "1e3"], "--train-flops"),
])
def test_bad_flags_are_one_line_exit_2(space_file, tmp_path, extra, flag):
    args = ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(tmp_path)]
    out = run_cli(*args, *extra)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_unwritable_results_dir(space_file, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = run_cli("--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(blocker / "sub"))
    assert out.returncode == 2 and "--results-dir" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_malformed_space_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[maps]\nrepeats = [3, 1]\n')
    out = run_cli("--space", str(bad), "--budget-flops", "1e9")
    assert out.returncode == 2 and "repeats" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_dry_run_lists_candidates_with_costs(space_file):
    out = run_cli("--space", str(space_file), "--budget-flops", str(tiny_flops("2,1")), "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 + 3
    assert lines[1].split()[:2] == ["1,1", "rope"]
    assert str(f"{tiny_flops('2,1'):,}") in out.stdout


def test_racing_gives_extra_seeds_only_to_survivors(ray_cluster, space_file, tmp_path):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "4", "--racing", "--race-start-seeds", "2", "--study", "race",
                  "--ray-address", ray_cluster)
    assert main(argv) == 0
    rows = read_runs(results / "race" / "runs.csv")
    study = optuna.load_study(study_name="race", storage=f"sqlite:///{results}/race/optuna.db")
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 3
    for t in done:
        seeds = sorted(int(r["seed"]) for r in rows if r["candidate"] == t.user_attrs["candidate"])
        assert seeds == list(range(len(seeds))) and 2 <= len(seeds) <= 4  # paired: seeds 0..n-1
        assert t.user_attrs["seeds"] == seeds
        if len(seeds) < 4:  # stopped early only when racing dropped it
            assert "worse than" in t.user_attrs["dropped_by_racing"]
    assert len(rows) <= 3 * 4


def test_racing_needs_a_fixed_candidate_list(space_file, tmp_path):
    out = run_cli("--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(tmp_path),
                  "--racing", "--sampler", "tpe")
    assert out.returncode == 2 and "--racing" in out.stderr


def test_random_sampler_pairs_every_map_with_every_pe(space_file, tmp_path):
    from searchmaps.search import SearchSettings, target_candidates
    from searchmaps.spaces import load_space

    space = load_space(str(space_file))
    s = SearchSettings(space=space, budget_flops=1e12, pes=("rope", "alibi"), seeds=1, sampler="random",
                       trials=6, study="x", results_dir=tmp_path)
    cands = target_candidates(s)
    assert len(cands) == 6 and len({c.key for c in cands}) == 6
    maps = {str(c.reuse) for c in cands}
    assert len(maps) == 3 and all({c.pe for c in cands if str(c.reuse) == m} == {"rope", "alibi"} for m in maps)
    assert target_candidates(s) == cands  # the search seed fixes the sample
