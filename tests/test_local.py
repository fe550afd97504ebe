"""The local executor (``--executor local``): the search's worker processes on this machine,
no Ray. The searches run as users run them, in a process where Ray cannot be imported (as on
the GPU machines, which have torch but no Ray), and must give what the Ray executor gives:
the same rows bit for bit, and the same guarantees under kill -9, dying workers and two
drivers. The bad-input lines are checked in-process."""

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from helpers import ROOT
from optuna.trial import TrialState

from searchmaps import flops
from searchmaps.config import ModelConfig
from searchmaps.results import read_runs
from searchmaps.run import main

# as in test_search (test modules do not import one another): the tiny space's maps of applied depth <= 3
BUDGET = str(flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1")))
MAPS = {"1,1", "2,1", "1,2"}
LADDER = ["--tokens", "1024,2048", "--schedule", "wsd"]  # a ladder of two rungs
NO_RAY = "import sys; sys.modules['ray'] = None; from searchmaps.run import main; sys.exit(main(sys.argv[1:]))"


def run_without_ray(*args, env=None, popen=False):
    """``searchmaps.run ARGS`` in a fresh process in which ``import ray`` fails."""
    cmd = [sys.executable, "-c", NO_RAY, *map(str, args)]
    if popen:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def common(space_file, results, *extra):
    return ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", *extra]


def trials(results, study):
    return optuna.load_study(study_name=study, storage=f"sqlite:///{results}/{study}/optuna.db").get_trials()


def assert_each_pair_once(rows, seeds=2):
    ok = sorted((r.map, r.seed) for r in rows if r.status.value != "crashed")
    assert ok == sorted((m, s) for m in MAPS for s in range(seeds)), ok


def assert_study_closed(ts):
    assert not [t.number for t in ts if t.state == TrialState.RUNNING]
    assert sorted(t.user_attrs["map"] for t in ts if t.state == TrialState.COMPLETE) == sorted(MAPS)


def numbers(rows):
    return {(r.map, r.seed, r.rung): (r.val_loss, r.train_loss, r.curve, r.steps, r.tokens) for r in rows}


def assert_every_rung_once(rows, seeds):
    ok = [(r.map, r.seed, r.rung) for r in rows if r.status.value != "crashed"]
    assert sorted(ok) == sorted((m, s, i) for m in MAPS for s in range(seeds) for i in range(2)), ok


def workers_of(pid: int) -> list[int]:
    """The worker processes (multiprocessing's spawn children) of process ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) != pid:
                        continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"spawn_main" in f.read():
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.e2e
def test_the_local_executor_gives_the_ray_executors_rows_bit_for_bit(ray_cluster, space_file, tmp_path, ray_env):
    """A tiny ladder study (3 maps x 2 seeds x 2 rungs) with --executor local, in a process
    without Ray, equals the same study on Ray row for row; with --promote the local executor
    continues each run from its saved state to the same numbers."""
    results = tmp_path / "results"
    local = run_without_ray(*common(space_file, results, "--seeds", "2", "--study", "local", "--workers", "2",
                                    "--executor", "local", *LADDER), env=ray_env)
    assert local.returncode == 0, local.stderr[-3000:]
    promoted = run_without_ray(*common(space_file, results, "--seeds", "2", "--study", "promo", "--workers", "2",
                                       "--executor", "local", "--promote", *LADDER), env=ray_env)
    assert promoted.returncode == 0, promoted.stderr[-3000:]
    assert main(common(space_file, results, "--seeds", "2", "--study", "ray", "--executor", "ray",
                       "--ray-address", ray_cluster, *LADDER)) == 0
    by_ray = numbers(read_runs(results / "ray" / "runs.csv"))
    by_local = numbers(read_runs(results / "local" / "runs.csv"))
    assert len(by_ray) == 12 and by_local == by_ray
    promo = numbers(read_runs(results / "promo" / "runs.csv"))
    assert promo and all(promo[k] == by_ray[k] for k in promo)
    assert_study_closed(trials(results, "local"))
    assert not list((results / "promo").rglob("*.pt"))  # every saved state removed at the end


@pytest.mark.e2e
def test_racing_with_the_local_executor_trains_and_drops_what_it_does_on_ray(ray_cluster, space_file, tmp_path,
                                                                             ray_env):
    """Racing (4 seeds, 2 to start) decides on the rows alone: the local executor trains the
    same (map, seed) units as Ray, to the same numbers, and tells Optuna the same seeds and drops."""
    results = tmp_path / "results"
    race = ["--seeds", "4", "--racing", "--race-start-seeds", "2", "--workers", "2"]
    local = run_without_ray(*common(space_file, results, *race, "--study", "local", "--executor", "local"),
                            env=ray_env)
    assert local.returncode == 0, local.stderr[-3000:]
    assert main(common(space_file, results, *race, "--study", "ray", "--ray-address", ray_cluster)) == 0
    assert numbers(read_runs(results / "local" / "runs.csv")) == numbers(read_runs(results / "ray" / "runs.csv"))

    def told(study):
        return {t.user_attrs["candidate"]: (t.state, t.user_attrs.get("seeds"), t.user_attrs.get("dropped_by_racing"))
                for t in trials(results, study)}

    assert told("local") == told("ray")


@pytest.mark.e2e
def test_a_local_ladder_killed_at_a_rung_boundary_and_mid_rung_resumes_without_losing_or_repeating(
        space_file, tmp_path, ray_env):
    """kill -9 the driver between storing a rung's row and runs.csv (a rung boundary), then
    while a rung trains (its orphaned worker stops itself), then run the same command again:
    every (map, seed, rung) exactly once, every candidate told once, each ladder continued
    from the state saved at its last recorded rung to the numbers of a run never killed."""
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "1", "--study", "k", "--workers", "1", "--executor", "local",
                  *LADDER)
    runs = results / "k" / "runs.csv"
    proc = run_without_ray(*args, env=dict(ray_env, SEARCHMAPS_KILL_AT="recorded:1"), popen=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    first = 1  # rung 0 of the first ladder is in the storage, not yet in runs.csv
    assert len(list((results / "k" / "checkpoints").glob("*-rung0.pt"))) == 1  # where its ladder goes on from

    proc = run_without_ray(*args, env=ray_env, popen=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(read_runs(runs)) <= first:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    workers = workers_of(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # the driver only, while its worker trains the next rung
    proc.communicate()
    assert first < len(read_runs(runs)) < 6
    deadline = time.time() + 60
    while time.time() < deadline and any(alive(p) for p in workers):
        time.sleep(0.2)
    assert workers and not any(alive(p) for p in workers)  # an orphaned worker does not train on

    final = run_without_ray(*args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    rows = read_runs(runs)
    assert_every_rung_once(rows, seeds=1)
    assert len(rows) == 6
    assert_study_closed(trials(results, "k"))
    assert not list((results / "k").rglob("*.pt"))  # saved states removed once their ladder is recorded
    whole = run_without_ray(*[a if a != "k" else "whole" for a in args], env=ray_env)  # the same, never killed
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert numbers(rows) == numbers(read_runs(results / "whole" / "runs.csv"))  # continued to the same numbers


def kill_while_a_worker_is_held(args, runs, rows: int, env) -> None:
    """Run the search with ``env`` (a fault point that stops the worker: ``...:stop``) until its
    worker is held and ``runs`` has ``rows`` rows, then kill the whole command, held worker included."""
    proc = run_without_ray(*args, env=env, popen=True)
    deadline = time.time() + 300
    workers: list[int] = []
    while time.time() < deadline and proc.poll() is None:
        workers = workers_of(proc.pid)
        if workers and any(stopped(p) for p in workers) and len(read_runs(runs)) >= rows:
            break
        time.sleep(0.05)
    assert proc.poll() is None and any(stopped(p) for p in workers), proc.communicate()[1][-2000:]
    time.sleep(0.5)  # nothing more can come: the worker is held mid-rung
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


@pytest.mark.e2e
def test_a_packed_ladder_killed_mid_rung_resumes_at_its_last_finished_rung_to_the_same_numbers(
        space_file, tmp_path, ray_env):
    """--pack-seeds 2 on a three-rung ladder (8, 16 and 32 steps, cooldowns from steps 7, 13
    and 26): the first pack's worker is held in the middle of rung 2 (its 27th packed step; rung
    1 is recorded after 17: 8 to rung 0's end, 6 more of the shared phase, 3 of rung 1's
    cooldown), the driver stores rung 1's rows, and the whole command is killed there (as a
    deadline kills it). Each seed's state at rung 1 is in checkpoints/, rung 0's removed once
    rung 1 was recorded; the same command run again continues the pack from those states
    (their history goes on: a mark put in them shows in rung 2's rows) and gives every (map,
    seed, rung) once, bit for bit the numbers of a packed study never killed, with no saved
    state left."""
    import torch

    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "2", "--study", "pk", "--workers", "1", "--executor", "local",
                  "--pack-seeds", "2", "--tokens", "1024,2048,4096", "--schedule", "wsd")
    runs, states = results / "pk" / "runs.csv", results / "pk" / "checkpoints"
    kill_while_a_worker_is_held(args, runs, 4, dict(ray_env, SEARCHMAPS_KILL_AT="packed-step:27:stop"))
    killed = read_runs(runs)
    assert sorted((r.seed, r.rung) for r in killed) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len({r.map for r in killed}) == 1
    saved = sorted(states.glob("*.pt"))
    assert [p.name.split("-", 1)[1] for p in saved] == ["seed0-rung1.pt", "seed1-rung1.pt"]
    for p in saved:  # a mark that only a pack continued from these states can carry into its rows
        state = torch.load(p, weights_only=False)
        state["path"]["wall_s"] += 1e6
        torch.save(state, p)

    final = run_without_ray(*args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    rows = read_runs(runs)
    ok = sorted((r.map, r.seed, r.rung) for r in rows if r.status.value != "crashed")
    assert ok == sorted((m, s, i) for m in MAPS for s in range(2) for i in range(3))
    assert len(rows) == 18 and all(r.packed == 2 for r in rows)
    continued = {(r.map, r.seed) for r in rows if r.wall_s > 1e6}
    assert continued == {(killed[0].map, 0), (killed[0].map, 1)}
    assert all(r.rung == 2 for r in rows if r.wall_s > 1e6)
    assert not list((results / "pk").rglob("*.pt"))  # removed once their ladders are recorded
    assert_study_closed(trials(results, "pk"))
    whole = run_without_ray(*[a if a != "pk" else "whole" for a in args], env=ray_env)  # the same, never killed
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert numbers(rows) == numbers(read_runs(results / "whole" / "runs.csv"))  # bit for bit


@pytest.mark.e2e
def test_a_training_killed_mid_rung_continues_from_its_snapshot_to_the_same_numbers(space_file, tmp_path, ray_env):
    """--save-every set to a step's time: a three-rung ladder (8, 16 and 32 steps) is held
    in rung 2's stable phase (its 20th snapshot, step 20: the branches of rungs 0 and 1 take
    none) and the whole command killed there, rungs 0 and 1 recorded. The same command run
    again continues from the snapshot at step 20, not from rung 1's state at step 13 (a mark
    put in the snapshot shows in rung 2's row), to the numbers of a study never killed; no
    state is left once the ladder is recorded."""
    import torch

    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "1", "--study", "snap", "--workers", "1", "--executor", "local",
                  "--maps", "2,1", "--tokens", "1024,2048,4096", "--schedule", "wsd", "--save-every", "1e-6")
    runs, states = results / "snap" / "runs.csv", results / "snap" / "checkpoints"
    kill_while_a_worker_is_held(args, runs, 2, dict(ray_env, SEARCHMAPS_KILL_AT="snapshot:20:stop"))
    assert sorted(r.rung for r in read_runs(runs)) == [0, 1]
    (snap,) = states.glob("*-running.pt")
    state = torch.load(snap, weights_only=False)
    assert state["key"]["step"] == 20
    state["path"]["wall_s"] += 1e6  # only a run continued from this snapshot carries it into its row
    torch.save(state, snap)

    final = run_without_ray(*args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    rows = read_runs(runs)
    assert sorted(r.rung for r in rows) == [0, 1, 2] and all(r.status.value == "ok" for r in rows)
    assert [r.rung for r in rows if r.wall_s > 1e6] == [2]
    assert not list((results / "snap").rglob("*.pt"))
    whole = run_without_ray(*[a if a != "snap" else "whole" for a in args], env=ray_env)  # never killed
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert numbers(rows) == numbers(read_runs(results / "whole" / "runs.csv"))


@pytest.mark.e2e
def test_a_local_worker_that_dies_is_one_short_line_and_its_unit_runs_again(space_file, tmp_path, ray_env):
    """Every worker process is killed as it starts its second training: the search records
    the unit crashed, trains it again in a fresh worker and exits 0."""
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "1", "--study", "w", "--workers", "1", "--executor", "local")
    out = run_without_ray(*args, env=dict(ray_env, SEARCHMAPS_KILL_AT="training:2"))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_runs(results / "w" / "runs.csv")
    crashed = [r for r in rows if r.status.value == "crashed"]
    assert crashed and all("died" in r.error and "SIGKILL" in r.error for r in crashed)
    assert_each_pair_once(rows, seeds=1)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    died = [ln for ln in out.stderr.splitlines() if "died" in ln]
    assert len(died) == len(crashed) and all("it runs again" in ln for ln in died)
    assert_study_closed(trials(results, "w"))


@pytest.mark.e2e
def test_two_local_drivers_on_one_study_train_every_pair_once(space_file, tmp_path, ray_env):
    """Two identical commands at the same instant on one study, each with its own worker
    (--executor auto on a machine without Ray: the local executor)."""
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "2", "--study", "two", "--workers", "1", *LADDER)
    procs = [run_without_ray(*args, env=ray_env, popen=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        assert "Traceback" not in err and "IntegrityError" not in err
    rows = read_runs(results / "two" / "runs.csv")
    assert_every_rung_once(rows, seeds=2)
    assert len(rows) == 12
    assert (results / "two" / "runs.csv").read_text().count("run_id,") == 1
    assert_study_closed(trials(results, "two"))


@pytest.mark.e2e
def test_sigterm_stops_the_local_workers_and_leaves_a_resumable_study(space_file, tmp_path, ray_env):
    results = tmp_path / "results"
    args = common(space_file, results, "--seeds", "2", "--study", "i", "--workers", "1", "--executor", "local",
                  "--tokens", "32768")  # ~1 s a training: the rest cannot all finish before the signal lands
    runs = results / "i" / "runs.csv"
    proc = run_without_ray(*args, env=ray_env, popen=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(read_runs(runs)) < 1:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    workers = workers_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "interrupted (SIGTERM)" in err.strip().splitlines()[-1] and "Traceback" not in err, err
    assert workers and not any(alive(p) for p in workers)  # stopped and joined before the command exits
    assert not [t for t in trials(results, "i") if t.state == TrialState.RUNNING]
    final = run_without_ray(*args, env=ray_env)
    assert final.returncode == 0, final.stderr[-2000:]
    assert_each_pair_once(read_runs(runs))


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("extra, ray_missing, flag", [
    (["--executor", "ray"], True, "--executor ray"),
    (["--executor", "local", "--ray-address", "127.0.0.1:1"], False, "--executor local"),
    (["--executor", "local", "--ray-address", "auto"], True, "--executor local"),
    (["--ray-address", "auto"], True, "--ray-address"),
])
def test_an_executor_this_machine_or_the_flags_rule_out_is_one_line_exit_2(space_file, tmp_path, capsys, monkeypatch,
                                                                          extra, ray_missing, flag):
    if ray_missing:
        monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` finds where Ray is not installed
    argv = ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(tmp_path / "r"), *extra]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"searchmaps.run: error: {flag}"), lines
    assert not (tmp_path / "r").exists()  # checked before anything is made


def test_auto_is_ray_where_it_is_installed_and_local_where_it_is_not(monkeypatch):
    from searchmaps.executor import resolve_executor

    assert resolve_executor("auto", None) == "ray" and resolve_executor("local", None) == "local"
    monkeypatch.setitem(sys.modules, "ray", None)
    assert resolve_executor("auto", None) == "local"
