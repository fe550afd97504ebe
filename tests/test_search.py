"""The search end to end with real Ray and real Optuna storage, on tiny models.

In-process searches join one Ray instance started with ``ray start --head`` (the cluster
path), and so do commands run in a subprocess where the test is about the storage; tests
of the command's own Ray (a kill -9 that orphans it, group kills that take it down,
signals, a full disk under its folder, its dying workers) run it as users do.
The study side without Ray (proposals, trial bookkeeping) is tested on a real SQLite
storage at the bottom.
"""

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
from conftest import TINY_SPACE
from helpers import record, run_cli, run_cli_warm
from optuna.trial import TrialState

from searchmaps import flops
from searchmaps.config import Candidate, ConfigError, ModelConfig, ReuseMap
from searchmaps.ledger import Ledger
from searchmaps.plan import SearchPlan
from searchmaps.plan_parts import Analysis
from searchmaps.results import read_runs
from searchmaps.run import main
from searchmaps.scheduler import WAIT, RacingRule, Scheduler
from searchmaps.spaces import load_space
from searchmaps.study import SearchStudy


def tiny_flops(reuse: str) -> int:
    return flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map(reuse))


BUDGET = str(tiny_flops("2,1"))  # applied depth <= 3: maps 1,1  2,1  1,2; block:2 (depth 4) is out
MAPS = {"1,1", "2,1", "1,2"}


def common(space_file, results, *extra):
    return ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", *extra]


def trials(results, study, storage=None):
    s = optuna.load_study(study_name=study, storage=storage or f"sqlite:///{results}/{study}/optuna.db")
    return s.get_trials(deepcopy=False)


def assert_each_pair_once(rows, maps=MAPS, seeds=2):
    ok = [r for r in rows if r.status.value != "crashed"]
    keys = [(r.map, r.seed) for r in ok]
    assert sorted(keys) == sorted((m, s) for m in maps for s in range(seeds)), keys  # every pair, none twice


def assert_study_closed(ts, maps=MAPS):
    assert not [t.number for t in ts if t.state == TrialState.RUNNING]
    done = [t.user_attrs["map"] for t in ts if t.state == TrialState.COMPLETE]
    assert sorted(done) == sorted(maps)  # each candidate told COMPLETE exactly once


# ---------------------------------------------------------------------------- in-process, shared Ray


def test_search_end_to_end_on_a_ray_cluster(ray_cluster, space_file, tmp_path, capsys):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "2", "--study", "s1", "--ray-address", ray_cluster)
    assert main(argv) == 0
    err = capsys.readouterr()
    assert "space tiny: 10 maps, 3 within" in err.err
    assert "top group" in err.out and "nats of validation loss" in err.out  # the answer, not just a table

    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{results}/s1/optuna.db")
    assert study.metric_names == ["val_ppl", "flops_per_token"]
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["map"] for t in done) == sorted(MAPS)
    for t in done:
        u = t.user_attrs
        assert len(u["val_ppl_per_seed"]) == 2 and u["seeds"] == [0, 1]
        assert t.values[0] == pytest.approx(sum(u["val_ppl_per_seed"]) / 2)
        assert t.values[1] == tiny_flops(u["map"]) == u["flops_per_token"]
        assert u["kv_bytes_per_token"] > 0 and u["tokens"] == 2048 and u["train_flops"] > 0
        assert t.params["pe"] == "rope" and t.params["kind"] == "ilr"

    rows = read_runs(results / "s1" / "runs.csv")
    assert_each_pair_once(rows)
    assert all(r.status.value == "ok" and r.config["model.d_model"] == 32 and r.study == "s1" for r in rows)
    # paired seeds: for each seed, every map's training differs from the others' only in the map,
    # so it starts from the same draw and sees the same batches (data.train_batches depends on the
    # corpus, batch size, sequence length and seed alone)
    for seed in (0, 1):
        configs = [{k: v for k, v in r.config.items() if k != "model.reuse"} for r in rows if r.seed == seed]
        assert len(configs) == 3 and all(c == configs[0] for c in configs) and configs[0]["seed"] == seed
    assert len({r.config_hash for r in rows}) == 3
    info = json.loads((results / "s1" / "study.json").read_text())
    assert info["storage"] == "sqlite:///optuna.db"  # relative: the folder can move

    # running the same command again trains nothing and changes nothing
    before = (results / "s1" / "runs.csv").read_bytes()
    assert main(argv) == 0
    assert (results / "s1" / "runs.csv").read_bytes() == before
    err = capsys.readouterr().err
    assert "nothing to train" in err and "Traceback" not in err and "outside training" not in err


def test_failed_trainings_are_recorded_and_the_study_goes_on(ray_cluster, space_file, tmp_path):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "1", "--study", "nan", "--lr", "1e12", "--ray-address", ray_cluster)
    assert main(argv) == 0
    rows = read_runs(results / "nan" / "runs.csv")
    assert len(rows) == 3 and all(r.status.value == "failed" and "non-finite" in r.error for r in rows)
    failed = [t for t in trials(results, "nan") if t.state == TrialState.FAIL]
    assert len(failed) == 3 and all("non-finite" in t.user_attrs["error"] for t in failed)


def test_an_optimiser_trains_only_maps_of_the_space_within_the_budget(ray_cluster, space_file, tmp_path, capsys):
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "1", "--study", "tpe", "--sampler", "tpe", "--trials", "3",
                  "--ray-address", ray_cluster)
    assert main(argv) == 0
    ts = trials(results, "tpe")
    done = [t for t in ts if t.state == TrialState.COMPLETE]
    assert len(done) == 3 and {t.user_attrs["map"] for t in done} == MAPS  # only 3 maps fit
    pruned = [t for t in ts if t.state == TrialState.PRUNED]
    assert all("budget" in t.user_attrs["reason"] or "duplicate" in t.user_attrs["reason"] for t in pruned)
    # the same command again resumes to 3 candidates: it does not train 3 more
    capsys.readouterr()
    assert main(argv) == 0
    assert len(read_runs(results / "tpe" / "runs.csv")) == 3
    assert "nothing to train" in capsys.readouterr().err


def test_racing_trains_exactly_what_its_rule_asks_for(ray_cluster, space_file, tmp_path):
    """Replay the racing rule on the rows the search wrote: every unit it asks for is in
    runs.csv, nothing else is, and a candidate with fewer seeds is one racing dropped."""
    results = tmp_path / "results"
    argv = common(space_file, results, "--seeds", "4", "--racing", "--race-start-seeds", "2", "--study", "race",
                  "--ray-address", ray_cluster)
    assert main(argv) == 0
    rows = read_runs(results / "race" / "runs.csv")
    by_key = {(r.label, r.seed): r for r in rows}
    assert len(by_key) == len(rows)
    plan = SearchPlan(space=load_space(str(space_file)), budget_flops=float(BUDGET), study="race", seeds=4)
    replay = Scheduler(seeds=4, candidates=plan.candidates, racing=RacingRule(2))
    asked = []
    while (unit := replay.next()) is not None:
        assert unit is not WAIT
        asked.append(unit)
        replay.add_rows([by_key[(unit.candidate.label, unit.seed)]])  # KeyError: the search skipped a unit
    assert len(asked) == len(rows)  # and trained nothing the rule did not ask for
    events = {e.candidate.label: e for e in replay.take_events()}
    for t in trials(results, "race"):
        if t.state == TrialState.COMPLETE:
            label = t.user_attrs["candidate"]
            assert t.user_attrs["seeds"] == [r.seed for r in events[label].rows]
            assert t.user_attrs.get("dropped_by_racing", "") == events[label].dropped
            assert (len(t.user_attrs["seeds"]) < 4) == bool(events[label].dropped)


def test_dashboard_serves_the_study(ray_cluster, space_file, tmp_path, port_factory):
    results = tmp_path / "results"
    assert main(common(space_file, results, "--seeds", "1", "--study", "dash", "--trials", "2",
                       "--ray-address", ray_cluster)) == 0
    port = port_factory()
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
        done = [t for t in detail["trials"] if t["state"] == "Complete"]
        assert len(done) == 2
        assert detail["objective_names"] == ["val_ppl", "flops_per_token"]
        assert {a["key"] for a in done[0]["user_attrs"]} >= {"map", "val_ppl_per_seed", "kv_bytes_per_token"}
    finally:
        dash.terminate()
        dash.wait(timeout=10)


# ---------------------------------------------------------------------------- as users run it


def test_kill_9_then_resume_loses_and_repeats_nothing(space_file, tmp_path, ray_env):
    """A real run with its own local Ray, killed mid-way, then the same command again."""
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "2", "--study", "k", "--workers", "2")
    runs = results / "k" / "runs.csv"
    proc = run_cli("run", *args, env=ray_env, popen=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if len(read_runs(runs)) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: Ray's own processes must cope
    proc.wait()
    before = runs.read_bytes()
    assert 2 <= len(read_runs(runs)) < 6

    out = run_cli("run", *args, env=ray_env)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = read_runs(runs)
    assert_each_pair_once(rows)
    assert runs.read_bytes().startswith(before)  # appended, never rewritten
    assert_study_closed(trials(results, "k"))


@pytest.mark.parametrize("storage", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_fault_injection_kills_at_every_point_lose_and_repeat_nothing(space_file, tmp_path, ray_env, storage,
                                                                      request):
    """Kill -9 the driver (or its whole process group, local Ray included; on PostgreSQL
    the driver joins the shared Ray head, so a group is the driver alone) at Ray start-up,
    after a claim, between storing a result and runs.csv (twice), after telling a trial and
    during the report; after each, run the same command again. Every kill must land: the
    order leaves each point work to reach (a run that finished instead fails the test). At
    the end every (candidate, seed) is in runs.csv exactly once and every candidate is told
    exactly once."""
    url = request.getfixturevalue("postgres_url") if storage == "postgresql" else None
    results = tmp_path / "results"
    args = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--seeds", "2", "--study", "f", "--workers", "2"]
    if url:
        args += ["--storage", url, "--ray-address", request.getfixturevalue("ray_cluster")]
    runs = results / "f" / "runs.csv"
    # recorded:2 before told:1: after it at least three units are left, so some candidate is still to be told
    kills = ["ray-start", "claimed:2:group", "recorded:1", "recorded:2:group", "told:1:group", "report"]
    for kill in kills:
        proc = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT=kill), popen=True)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, f"{kill} did not fire (exit {proc.returncode}): {err[-2000:]}"
        done = len(read_runs(runs))
        if kill == "ray-start":
            assert done == 0  # killed before anything trained
        elif kill == "report":
            assert done == 6 and not (results / "f" / "report.html").exists()  # all trained, no report yet
        else:
            assert done < 6, kill
    final = run_cli("run", *args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    assert "Traceback" not in final.stderr
    assert_each_pair_once(read_runs(runs))
    assert_study_closed(trials(results, "f", url))
    assert (results / "f" / "report.html").is_file()


@pytest.mark.parametrize("storage", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_two_drivers_on_one_study_split_the_work(ray_cluster, space_file, tmp_path, ray_env, storage, request):
    """Two identical commands started at the same instant on one study (on the shared Ray
    head: what is shared here is the storage): every pair is trained exactly once, both
    exit 0, and each folder's runs.csv holds every row once."""
    url = request.getfixturevalue("postgres_url") if storage == "postgresql" else None
    folders = [tmp_path / "a", tmp_path / "b"] if url else [tmp_path / "a", tmp_path / "a"]
    procs = []
    for results in folders:
        args = common(space_file, results, "--seeds", "2", "--study", "two", "--workers", "1",
                      "--ray-address", ray_cluster)
        procs.append(run_cli("run", *(args + (["--storage", url] if url else [])), env=ray_env, popen=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "Traceback" not in err and "IntegrityError" not in err
    for results in set(folders):
        rows = read_runs(results / "two" / "runs.csv")
        assert_each_pair_once(rows)
        assert (results / "two" / "runs.csv").read_text().count("run_id,") == 1  # one header
    ts = trials(folders[0], "two", url)
    assert_study_closed(ts)
    trained_by = {r.run_id: r.host for r in read_runs(folders[0] / "two" / "runs.csv")}
    assert len(trained_by) == 6


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupting_exits_with_the_signal_and_leaves_a_resumable_study(space_file, tmp_path, ray_env, sig, code):
    results = tmp_path / "results"
    args = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--seeds", "3", "--study", "i", "--workers", "1",
            "--tokens", "32768"]  # ~1 s a training: the 8 left cannot all finish before the signal lands
    runs = results / "i" / "runs.csv"
    proc = run_cli("run", *args, env=ray_env, popen=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(read_runs(runs)) < 1:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "interrupted" in lines[-1] and "run the same command again to resume" in lines[-1]
    assert "Traceback" not in err and "***" not in err and "Tuner.restore" not in err
    assert not (results / "i" / "report.html").exists()  # no report from a partial study
    assert not [t for t in trials(results, "i") if t.state == TrialState.RUNNING]
    final = run_cli("run", *args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    assert_each_pair_once(read_runs(runs), seeds=3)
    assert_study_closed(trials(results, "i"))


# ---------------------------------------------------------------------------- bad input


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
    (["--planned", "4,4/1,1"], "--planned"),
    (["--planned", "1,1-2,1"], "--planned"),
    (["--racing", "--sampler", "tpe"], "--racing"),
    (["--storage", "postgresql://u:pw@127.0.0.1:1/db"], "--storage"),
    (["--storage", "nonsense"], "--storage"),
    (["--storage", "mysql://u:p@localhost/db"], "--storage"),
    (["--storage", "sqlite:////proc/x/optuna.db"], "--storage"),
    (["--pack-seeds", "0"], "--pack-seeds"),
    (["--save-every", "-1"], "--save-every"),
    (["--pack-seeds", "2.5"], "--pack-seeds"),
    (["--pack-seeds", "many"], "--pack-seeds"),
    (["--device", "cpu", "--gpus-per-trial", "0.5"], "--gpus-per-trial"),
    (["--gpus-per-trial", "1.5"], "--gpus-per-trial"),
])
def test_bad_flags_are_one_line_exit_2_before_ray_starts(space_file, tmp_path, ray_env, extra, flag):
    args = ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(tmp_path)]
    out = run_cli_warm("run", *args, *extra, timeout=120, env=ray_env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert not list(tmp_path.rglob("ray"))  # nothing started


def test_a_planned_block_map_on_the_left_is_read(space_file, tmp_path, ray_env):
    results = tmp_path / "results"
    out = run_cli_warm("run", "--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(results),
                  "--planned", "block:2:1,1", "2,1/block:2", "--dry-run", timeout=120, env=ray_env)
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines()[1:-1]]
    assert {"1,1", "2,1", "block:2"} <= set(listed) and len(listed) == len(set(listed))
    # the old A:B form split where it names two candidates: block:2 on the left
    assert out.stdout.splitlines()[-1] == "planned comparisons: block:2|rope vs 1,1|rope; 2,1|rope vs block:2|rope"
    assert not results.exists()  # a dry run makes no study folder


def test_a_damaged_study_folder_is_one_line_exit_2(space_file, tmp_path, ray_env):
    study = tmp_path / "s"
    study.mkdir()
    args = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(tmp_path), "--study", "s",
            "--compile", "off", "--quiet"]
    (study / "study.json").write_text("")
    out = run_cli_warm("run", *args, timeout=120, env=ray_env)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "study.json" in out.stderr
    (study / "study.json").unlink()
    (study / "runs.csv").write_bytes(b"run_id,map,pe,seed,status\n\x00\x01\x02garbage\n")
    out = run_cli_warm("run", *args, timeout=120, env=ray_env)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "runs.csv" in out.stderr


def test_unwritable_results_dir(space_file, tmp_path, ray_env):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = run_cli_warm("run", "--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(blocker / "sub"),
                  env=ray_env)
    assert out.returncode == 2 and "--results-dir" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_malformed_space_file(tmp_path, ray_env):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[maps]\nrepeats = [3, 1]\n')
    out = run_cli_warm("run", "--space", str(bad), "--budget-flops", "1e9", env=ray_env)
    assert out.returncode == 2 and "repeats" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_dry_run_lists_candidates_with_costs(space_file, ray_env):
    out = run_cli_warm("run", "--space", str(space_file), "--budget-flops", BUDGET, "--dry-run", env=ray_env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 + 3
    assert lines[1].split()[:2] == ["1,1", "rope"]
    assert str(f"{tiny_flops('2,1'):,}") in out.stdout
    # with --maps, exactly those maps (it listed the whole space before)
    out = run_cli_warm("run", "--space", str(space_file), "--budget-flops", BUDGET, "--maps", "2,1", "--dry-run",
                  env=ray_env)
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.strip().splitlines()[1:]] == ["2,1"]


# ---------------------------------------------------------------------------- the plan and the study, no Ray


def plan_of(space, tmp_path, **kw):
    kw.setdefault("budget_flops", 1e12)
    return SearchPlan(space=space, study="p", results_dir=tmp_path, **kw)


def test_random_sampler_pairs_every_map_with_every_pe(space_file, tmp_path):
    p = plan_of(load_space(str(space_file)), tmp_path, pes=("rope", "alibi"), seeds=1, sampler="random", trials=6)
    cands = p.candidates
    assert len(cands) == 6 and len(set(cands)) == 6
    maps = {str(c.reuse) for c in cands}
    assert len(maps) == 3 and all({c.pe for c in cands if str(c.reuse) == m} == {"rope", "alibi"} for m in maps)
    assert plan_of(load_space(str(space_file)), tmp_path, pes=("rope", "alibi"), seeds=1, sampler="random",
                   trials=6).candidates == cands  # the search seed fixes the sample


def test_d_model_override_keeps_the_swiglu_width_at_four_times_d(tmp_path):
    space = load_space("ilr4").with_overrides(model={"d_model": 32})
    assert space.model.ffn_hidden == 128  # what searchmaps.train --d-model 32 builds
    explicit = load_space("ilr4").with_overrides(model={"d_model": 32, "ffn_hidden": 96})
    assert explicit.model.ffn_hidden == 96


def study_of(plan):
    ledger = Ledger(plan.storage_url, plan.study)
    ledger.register()
    return SearchStudy(plan, ledger)


def propose_all(study, limit=100):
    out = []
    for _ in range(limit):
        c = study.propose()
        if c is None:
            return out
        out.append(c)
    raise AssertionError("propose never said it was done")


def test_an_optimiser_without_trials_stops_at_32_and_a_rerun_resumes_to_32(tmp_path):
    plan = plan_of(load_space("deep8"), tmp_path, budget_flops=1e12, sampler="tpe", seeds=1)
    (tmp_path / "p").mkdir()
    first = propose_all(study_of(plan))
    assert len(first) == 32 == len(set(first))
    assert all(plan.feasible(c) for c in first)
    assert propose_all(study_of(plan)) == []  # the same command again: the study already has its 32


def test_an_optimiser_on_a_listed_space_proposes_only_listed_maps(tmp_path):
    space = load_space("ilr-table1")
    plan = plan_of(space, tmp_path, budget_flops=1e12, sampler="tpe", seeds=1)
    (tmp_path / "p").mkdir()
    got = propose_all(study_of(plan))
    assert {c.reuse for c in got} == set(space.maps)  # all 11, nothing else, then it stops


def test_a_trial_is_opened_in_one_write_and_abandoned_ones_are_closed(tmp_path, space_file):
    plan = plan_of(load_space(str(space_file)), tmp_path, seeds=1)
    (tmp_path / "p").mkdir()
    study = study_of(plan)
    c = plan.candidates[0]
    number = study.open(c)
    t = study.study.trials[number]
    assert t.state == TrialState.RUNNING and t.user_attrs["candidate"] == c.label and "driver" in t.user_attrs
    assert study.open(c) == number  # one trial per candidate
    orphan = study.study.ask()  # a driver killed between asking and registering
    orphan.set_user_attr("driver", "vm:1:dead")
    study.ledger.stop()
    fresh = study_of(plan)
    assert fresh.recover() == 2  # the stopped driver's open candidate, and the orphan
    states = {t.number: t.state for t in fresh.study.trials}
    assert states[number] == TrialState.FAIL and states[orphan.number] == TrialState.FAIL
    reopened = fresh.open(c)
    assert reopened != number and fresh.study.trials[reopened].state == TrialState.RUNNING


def test_planned_comparisons_are_checked_against_the_candidates(space_file, tmp_path):
    space = load_space(str(space_file))
    planned = lambda *pairs: Analysis(planned=pairs)  # noqa: E731
    assert plan_of(space, tmp_path, budget_flops=float(BUDGET), analysis=planned("2,1/1,1", "all:1,1")).analysis.planned
    with pytest.raises(ConfigError, match="--planned"):
        plan_of(space, tmp_path, budget_flops=float(BUDGET), analysis=planned("block:2/1,1"))  # over the budget
    tpe = plan_of(space, tmp_path, budget_flops=float(BUDGET), sampler="tpe", analysis=planned("2,1:1,1"))
    assert tpe.candidates is None and tpe.feasible(Candidate(ReuseMap((2, 1)), "rope"))


# ---------------------------------------------------------------------------- horizon ladders


LADDER_ARGS = ["--tokens", "1024,2048,4096", "--schedule", "wsd"]


@pytest.fixture(scope="module")
def ladder_study(tmp_path_factory, ray_cluster):
    """One ladder search (the 3 maps x 2 seeds, rungs 1024, 2048 and 4096 tokens), trained
    once for the tests that read it or change a copy of it (:func:`copy_of_ladder`):
    (results folder, the argv that made it)."""
    root = tmp_path_factory.mktemp("ladder")
    space_file = root / "tiny.toml"
    space_file.write_text(TINY_SPACE)
    argv = common(space_file, root / "results", "--seeds", "2", "--study", "lad", "--ray-address", ray_cluster,
                  *LADDER_ARGS)
    assert main(argv) == 0
    return root / "results", argv


def copy_of_ladder(ladder_study, tmp_path):
    """The ladder study's folder copied under ``tmp_path / "results"`` and its argv pointed there."""
    import shutil

    results, argv = ladder_study
    shutil.copytree(results / "lad", tmp_path / "results" / "lad")
    i = argv.index("--results-dir")
    return tmp_path / "results", argv[:i + 1] + [str(tmp_path / "results")] + argv[i + 2:]


def test_a_ladder_search_records_every_rung_once_with_intermediate_values(ladder_study):
    results, _ = ladder_study
    rows = read_runs(results / "lad" / "runs.csv")
    assert sorted((r.map, r.seed, r.rung) for r in rows) == sorted(
        (m, s, i) for m in MAPS for s in range(2) for i in range(3))
    assert {r.rung: r.horizon_target for r in rows} == {0: 1024.0, 1: 2048.0, 2: 4096.0}
    assert {r.rung: r.tokens for r in rows} == {0: 1024, 1: 2048, 2: 4096}
    for t in trials(results, "lad"):
        assert t.state == TrialState.COMPLETE
        assert sorted(t.intermediate_values) == [1024, 2048, 4096]
        last = [r.val_ppl for r in rows if r.label == t.user_attrs["candidate"] and r.rung == 2]
        assert t.values[0] == pytest.approx(sum(last) / 2) == t.intermediate_values[4096]
    info = json.loads((results / "lad" / "study.json").read_text())
    assert info["ladder"] == [1024.0, 2048.0, 4096.0] and info["train"]["schedule"] == "wsd"


def test_promotion_continues_runs_and_matches_the_full_ladder_bit_for_bit(ladder_study, ray_cluster, space_file,
                                                                          tmp_path, capsys):
    results = tmp_path / "results"
    promoted = common(space_file, results, "--seeds", "2", "--study", "promo", "--ray-address", ray_cluster,
                      "--promote", *LADDER_ARGS)
    assert main(promoted) == 0
    assert "promotion:" in capsys.readouterr().err
    whole = {(r.map, r.seed, r.rung): r for r in read_runs(ladder_study[0] / "lad" / "runs.csv")}
    part = read_runs(results / "promo" / "runs.csv")
    for r in part:  # a promoted run continued from its saved state gives the whole ladder's numbers
        w = whole[(r.map, r.seed, r.rung)]
        assert (r.val_loss, r.train_loss, r.curve, r.steps) == (w.val_loss, w.train_loss, w.curve, w.steps)
    reached = {(r.map, r.seed): r.rung for r in part}
    for t in trials(results, "promo"):
        top = max(reached[(t.user_attrs["map"], s)] for s in range(2))
        if top < 2:
            assert t.state == TrialState.PRUNED and "stopped at rung" in t.user_attrs["stopped_by_promotion"]
        else:
            assert t.state == TrialState.COMPLETE
    assert not list((results / "promo").rglob("*.pt"))  # no saved state left once the study is done


def test_a_ladder_killed_mid_way_resumes_without_repeating_a_row(ray_cluster, space_file, tmp_path, ray_env):
    results = tmp_path / "results"
    args = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--seeds", "1", "--study", "lk", "--workers", "1",
            "--ray-address", ray_cluster, *LADDER_ARGS]
    # killed after the first ladder's second rung
    proc = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="recorded:2"), popen=True)
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    assert len(read_runs(results / "lk" / "runs.csv")) < 9
    final = run_cli("run", *args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    rows = read_runs(results / "lk" / "runs.csv")
    assert sorted((r.map, r.rung) for r in rows) == sorted((m, i) for m in MAPS for i in range(3))


# ---------------------------------------------------------------------------- learning rate fitted per map


def test_a_learning_rate_grid_is_fitted_on_tuning_seeds_and_kept_out_of_the_statistics(ray_cluster, space_file,
                                                                                      tmp_path):
    import pandas as pd

    results = tmp_path / "results"
    argv = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--seeds", "2", "--study", "lr", "--ray-address", ray_cluster,
            "--lr-grid", "1e-3,3e-2", "--tuning-seeds", "1"]
    assert main(argv) == 0
    rows = read_runs(results / "lr" / "runs.csv")
    tuning = [r for r in rows if r.role == "tuning"]
    evals = [r for r in rows if r.role == "eval"]
    assert sorted((r.map, r.seed, r.config["train.lr"]) for r in tuning) == sorted(
        (m, 10_000, lr) for m in MAPS for lr in (1e-3, 3e-2))
    assert sorted((r.map, r.seed) for r in evals) == sorted((m, s) for m in MAPS for s in range(2))
    for m in MAPS:  # each map evaluated at the rate with the lower tuning loss
        best = min((r for r in tuning if r.map == m), key=lambda r: r.val_loss).config["train.lr"]
        assert {r.config["train.lr"] for r in evals if r.map == m} == {best}
    summary = pd.read_csv(results / "lr" / "summary.csv")
    assert (summary["n_seeds"] == 2).all()  # tuning seeds never reach the statistics
    assert set(summary["lr"]) <= {1e-3, 3e-2}
    page = (results / "lr" / "report.html").read_text()
    assert "Learning rates fitted per map" in page and "tuning seed" in page
    for t in trials(results, "lr"):
        assert t.state == TrialState.COMPLETE and t.user_attrs["lr"] in (1e-3, 3e-2)
        assert set(t.user_attrs["lr_tuning_val_loss"]) == {"0.001", "0.03"}


def test_the_progress_bar_total_holds_steady_while_ladders_report_rung_by_rung():
    """A ladder's rungs arrive one by one while its training still counts whole in the
    scheduler's ``remaining``: the bar's total must not grow with every rung."""
    from types import SimpleNamespace

    from searchmaps.report.terminal import ProgressBar

    plan = SimpleNamespace(study="s", ladder=True, analysis=Analysis(), rungs=3)
    bar = ProgressBar(plan, quiet=False)
    bar.start(2 * 3)  # two (candidate, seed) trainings, three rungs each
    totals = []
    for seed, remaining_during in ((0, 2), (1, 1)):
        for rung in range(3):
            row = record("1,1", seed, loss=1.0, rung=rung)
            bar.on_row(row, remaining_during - (rung == 2))  # the last rung completes the training
            totals.append(bar.bar.total)
    bar.close()
    assert totals == [6] * 6


# ---------------------------------------------------------------------------- told once, rebuilt, waited for


@pytest.mark.parametrize("storage", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_kill_after_tell_or_before_it_tells_each_candidate_once_with_its_rung_values(ray_cluster, space_file,
                                                                                        tmp_path, ray_env, storage,
                                                                                        request):
    """Killed once after the last rung of a ladder is stored but before its candidate is
    told (the rung values are on a trial the resume closes), then twice right after
    Optuna's tell returned but before the storage says the candidate is told: after the
    last resume each candidate has exactly one COMPLETE trial, carrying every rung's value."""
    url = request.getfixturevalue("postgres_url") if storage == "postgresql" else None
    results = tmp_path / "results"
    args = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--no-report", "--seeds", "1", "--study", "t", "--workers", "1",
            "--ray-address", ray_cluster, *LADDER_ARGS] + (["--storage", url] if url else [])
    killed = 0
    for kill in ["recorded:3:group", "optuna-told:1:group", "optuna-told:2:group"]:
        proc = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT=kill), popen=True)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, f"{kill}: {err[-2000:]}"
        killed += 1
    final = run_cli("run", *args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    rows = read_runs(results / "t" / "runs.csv")
    assert sorted((r.map, r.rung) for r in rows) == sorted((m, i) for m in MAPS for i in range(3))
    ts = trials(results, "t", url)
    assert_study_closed(ts)  # one COMPLETE trial per candidate: the killed tells were not told again
    for t in ts:
        if t.state == TrialState.COMPLETE:
            assert sorted(t.intermediate_values) == [1024, 2048, 4096], (t.number, t.intermediate_values)
            last = [r.val_ppl for r in rows if r.label == t.user_attrs["candidate"] and r.rung == 2]
            assert t.values[0] == pytest.approx(last[0]) == t.intermediate_values[4096]
    assert killed == 3


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_lost_optuna_db_is_rebuilt_from_runs_csv_without_training_again(ladder_study, tmp_path, capsys, how):
    results, argv = copy_of_ladder(ladder_study, tmp_path)  # a finished ladder study, its own copy
    before_trials = {t.user_attrs["candidate"]: t for t in trials(results, "lad") if t.state == TrialState.COMPLETE}
    runs = results / "lad" / "runs.csv"
    before = runs.read_bytes()
    for f in (results / "lad").glob("optuna.db*"):
        f.unlink()
    if how == "emptied":
        (results / "lad" / "optuna.db").write_bytes(b"")
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    ts = trials(results, "lad")
    assert_study_closed(ts)
    assert runs.read_bytes() == before  # nothing trained again, nothing rewritten
    assert "nothing to train" in err and "opened again and told from the rows" in err
    for t in ts:
        old = before_trials[t.user_attrs["candidate"]]
        assert t.values == old.values and t.intermediate_values == old.intermediate_values
        assert sorted(t.intermediate_values) == [1024, 2048, 4096]
        assert {k: v for k, v in t.user_attrs.items() if k != "driver"} == \
            {k: v for k, v in old.user_attrs.items() if k != "driver"}


def wait_stopped(proc, timeout=240):
    """Until ``proc`` stopped itself (a fault point's SIGSTOP)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        if Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
            return
        time.sleep(0.1)
    raise AssertionError("the driver did not reach its fault point")


def test_two_optimiser_drivers_each_end_with_the_whole_study(space_file, tmp_path, ray_env, postgres_url):
    """docs/search.md's several-machines way with tpe: one storage, a results folder per
    driver. A starts and stops holding its first candidate; B starts, proposes the second
    and stops holding it; A goes on, trains its candidate and a third, and the study has
    its --trials 3: A must now wait for B's candidate, which A never proposed and which
    did not exist when A started. B goes on later. Both folders end with every row."""
    import pandas as pd

    def args(results):
        return ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results),
                "--compile", "off", "--precision", "fp32", "--quiet", "--seeds", "1", "--study", "tpe2",
                "--sampler", "tpe", "--trials", "3", "--workers", "1", "--storage", postgres_url]

    a = run_cli("run", *args(tmp_path / "a"), env=dict(ray_env, SEARCHMAPS_KILL_AT="claimed:1:stop"), popen=True)
    b = None
    try:
        wait_stopped(a)
        b = run_cli("run", *args(tmp_path / "b"), env=dict(ray_env, SEARCHMAPS_KILL_AT="claimed:1:stop"), popen=True)
        wait_stopped(b)
        os.kill(a.pid, signal.SIGCONT)
        runs_a = tmp_path / "a" / "tpe2" / "runs.csv"
        deadline = time.time() + 300
        while a.poll() is None and len(read_runs(runs_a)) < 2 and time.time() < deadline:
            time.sleep(0.2)
        try:  # A has trained what it could; a driver that does not wait for B's candidate ends now
            a.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        os.kill(b.pid, signal.SIGCONT)
        outs = [p.communicate(timeout=600) for p in (a, b)]
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGKILL)
    for p, (_, err) in zip((a, b), outs):
        assert p.returncode == 0, err[-2000:]
        assert "Traceback" not in err
    ts = trials(tmp_path / "a", "tpe2", postgres_url)
    done = {t.user_attrs["map"] for t in ts if t.state == TrialState.COMPLETE}
    assert done == MAPS and not [t for t in ts if t.state == TrialState.RUNNING]
    for results in (tmp_path / "a", tmp_path / "b"):
        assert_each_pair_once(read_runs(results / "tpe2" / "runs.csv"), seeds=1)
        summary = pd.read_csv(results / "tpe2" / "summary.csv")
        assert {c.split("|")[0] for c in summary["candidate"]} == MAPS
        assert (results / "tpe2" / "report.html").is_file()


# ---------------------------------------------------------------------------- faults of the machine


@pytest.fixture()
def small_disk(tmp_path):
    """A 16 MiB tmpfs, mounted for the test (as root) and unmounted after it: a disk that
    a test can fill while a search runs."""
    where = tmp_path / "disk"
    where.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"mounting a tmpfs needs root: {out.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root): {out.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_up(folder: Path) -> Path:
    """Write zeros into ``folder`` until its disk is full; returns the file."""
    filler = folder / "filler"
    # Unbuffered: a buffered file keeps the bytes the full disk refused and raises ENOSPC
    # again when the with-block closes it (seen in CI as an error on the `with` line).
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_a_full_disk_mid_study_is_one_line_exit_1_and_the_resume_finishes(space_file, small_disk, ray_env):
    args = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(small_disk), "--compile", "off",
            "--precision", "fp32", "--quiet", "--no-report", "--seeds", "2", "--study", "d", "--workers", "1"]
    runs = small_disk / "d" / "runs.csv"
    proc = run_cli("run", *args, env=ray_env, popen=True)
    try:
        deadline = time.time() + 300
        while proc.poll() is None and len(read_runs(runs)) < 1 and time.time() < deadline:
            time.sleep(0.1)
        filler = fill_up(small_disk)  # the study's storage, runs.csv and Ray's folder are all on this disk
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 3 and "Traceback" not in err, err[-3000:]  # the headline, the study, the fault
    assert "optuna.db" in lines[-1] or "runs.csv" in lines[-1]
    assert "full" in lines[-1] or "No space left" in lines[-1]
    assert "free space on the disk of" in lines[-1] and "writable" not in lines[-1]  # the hint names the cause
    assert "run the same command again" in lines[-1]
    before = runs.read_bytes()
    kept = read_runs(runs)
    assert 1 <= len(kept) < 6
    filler.unlink()
    final = run_cli("run", *args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    assert runs.read_bytes().startswith(before)  # nothing lost, nothing rewritten
    assert_each_pair_once(read_runs(runs))
    assert_study_closed(trials(small_disk, "d"))


def test_a_training_process_that_dies_is_one_short_line_and_runs_again(space_file, tmp_path, ray_env):
    """Every worker process is killed as it starts its second training (a fault point in
    the trainable): the search records it, trains it again and exits 0, and Ray's own
    report of the dead actor is in the study's log, not on the terminal."""
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "1", "--study", "w", "--workers", "1")
    out = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="training:2"))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_runs(results / "w" / "runs.csv")
    crashed = [r for r in rows if r.status.value == "crashed"]
    assert crashed and all("died" in r.error for r in crashed)
    assert_each_pair_once(rows, seeds=1)
    assert "Traceback" not in out.stderr and "ActorDiedError" not in out.stderr, out.stderr[-3000:]
    assert "(raylet)" not in out.stdout + out.stderr
    died = [ln for ln in out.stderr.splitlines() if "died" in ln]
    assert len(died) == len(crashed) and all("it runs again" in ln for ln in died)
    assert "ActorDiedError" in (results / "w" / "ray" / "driver.log").read_text()


# ---------------------------------------------------------------------------- packed units (--pack-seeds)


def test_packed_units_give_the_rows_of_separate_trainings_and_promotion_continues_them(ladder_study, ray_cluster,
                                                                                        space_file, tmp_path):
    """--pack-seeds 2 on a ladder gives the same rows, with the same numbers up to float
    rounding, as one seed per training (the ladder study's rows of these maps: --pack-seeds
    is off by default); with promotion a packed rung continues each seed from its own saved state."""
    results = tmp_path / "results"
    run = lambda study, *extra: main(common(space_file, results, "--seeds", "2", "--study", study,  # noqa: E731
                                            "--ray-address", ray_cluster, "--maps", "1,1", "2,1", *LADDER_ARGS,
                                            *extra))
    assert run("packed", "--pack-seeds", "2") == 0
    assert run("promo", "--pack-seeds", "2", "--promote") == 0
    whole = {(r.map, r.seed, r.rung): r for r in read_runs(ladder_study[0] / "lad" / "runs.csv")
             if r.map in ("1,1", "2,1")}
    packed = read_runs(results / "packed" / "runs.csv")
    assert sorted((r.map, r.seed, r.rung) for r in packed) == sorted(whole)  # every row once, no more
    for r in packed + read_runs(results / "promo" / "runs.csv"):
        w = whole[(r.map, r.seed, r.rung)]
        # the packed trainer matches separate trainings within float rounding (tests/test_packed.py), not bit for bit
        assert (r.val_loss, r.train_loss) == pytest.approx((w.val_loss, w.train_loss), rel=1e-5)
        assert (r.steps, len(r.curve)) == (w.steps, len(w.curve))
        assert r.packed == 2 and w.packed == 1
    assert not list((results / "promo").rglob("*.pt"))  # every seed's saved state removed at the end


def test_gpus_per_trial_above_what_ray_sees_is_one_line_naming_the_flag(ray_cluster):
    from searchmaps.executor.tune import check_gpus, start_ray

    start_ray(ray_cluster, 1, 1)
    check_gpus(0)
    with pytest.raises(ConfigError, match=r"--gpus-per-trial 0.5 is above the GPUs Ray sees \(0\)"):
        check_gpus(0.5)


def test_packed_units_killed_then_resumed_by_two_drivers_lose_and_repeat_nothing(space_file, tmp_path, ray_env):
    """A packed search killed between storing a pack's first seed and runs.csv, then
    resumed by two drivers at once on the same study, each of whose training processes
    dies as its second training starts (three units are left for two drivers: one of them
    trains two): every (map, seed) once, the dead trainings' seeds recorded crashed and
    trained again, every candidate told once."""
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "2", "--study", "pk", "--workers", "1", "--pack-seeds", "2")
    proc = run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="recorded:1"), popen=True)
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    assert len(read_runs(results / "pk" / "runs.csv")) < 6
    procs = [run_cli("run", *args, env=dict(ray_env, SEARCHMAPS_KILL_AT="training:2"), popen=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err and "IntegrityError" not in err
    rows = read_runs(results / "pk" / "runs.csv")
    assert_each_pair_once(rows)
    crashed = [r for r in rows if r.status.value == "crashed"]
    assert crashed and all("died" in r.error for r in crashed)
    assert (results / "pk" / "runs.csv").read_text().count("run_id,") == 1
    assert_study_closed(trials(results, "pk"))
