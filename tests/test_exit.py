"""Per-token convergence exit (searchmaps/train/exit.py), an evaluation of a trained map:
eps 0 is the ordinary validation bit for bit, a huge eps runs every layer once (one stack
pass for a block map), depth never rises with eps, the FLOPs are what FlopCounterMode
counts on a computation that does only what the rule needs, both trainers give the same
columns, and bad flags are one line."""

import contextlib
import json
import math

import pytest
import torch
from helpers import run_cli_warm, tiny_spec
from reference_exit import gathered_forward
from torch.utils.flop_counter import FlopCounterMode

from searchmaps import flops
from searchmaps import objectives as objs
from searchmaps.config import ConfigError, TrainConfig
from searchmaps.results import read_runs
from searchmaps.run import main as run_main
from searchmaps.train.__main__ import main as train_main
from searchmaps.train import evaluate, train_ladder, train_packed, validation_batches
from searchmaps.train.exit import (ExitPoint, Tally, evaluate_exit, exit_columns, exit_flops, exit_forward,
                                   exit_grid, pick)

MAPS = ["3,2", "block:3"]
STEPS = 30 * 4 * 32  # tokens of 30 steps of the tiny spec


@pytest.fixture(scope="module")
def trained(corpus):
    """Each map trained 30 steps (fp32), its model and validation batches."""
    out = {}
    for reuse in MAPS:
        spec = tiny_spec(reuse=reuse, tokens=STEPS)
        models = []
        train_ladder(spec, None, corpus, on_model=models.append)
        out[reuse] = (spec, models[0], validation_batches(corpus, spec))
    return out


@pytest.mark.parametrize("reuse", MAPS)
def test_eps_zero_is_the_ordinary_validation_bit_for_bit(trained, reuse):
    spec, model, val = trained[reuse]
    point = evaluate_exit(model, val, "cpu", "fp32", 0.0)
    assert point.val_loss == evaluate(model, val, "cpu", "fp32")
    assert point.depth == spec.model.reuse.applied_layers
    assert point.flops_per_token == flops.flops_per_token(spec.model) and point.check_flops_per_token == 0


def test_eps_zero_under_bf16_autocast_is_the_ordinary_validation_too(corpus):
    spec = tiny_spec(reuse="2,3", tokens=10 * 4 * 32, precision="bf16")
    models = []
    rec = train_ladder(spec, None, corpus, on_model=models.append)[0]
    val = validation_batches(corpus, spec)
    assert evaluate_exit(models[0], val, "cpu", "bf16", 0.0).val_loss == evaluate(models[0], val, "cpu", "bf16") \
        == rec.val_loss


@pytest.mark.parametrize("reuse", MAPS)
def test_memory_shared_loops_are_evaluated_as_they_were_trained(corpus, reuse):
    """--kv-share first:W: eps 0 is the ordinary (shared) validation bit for bit, and the
    exited computation differs from the unshared one on the same weights."""
    import dataclasses

    spec = tiny_spec(reuse=reuse, tokens=10 * 4 * 32)
    spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, kv_share="first:4"))
    models = []
    train_ladder(spec, None, corpus, on_model=models.append)
    model, val = models[0], validation_batches(corpus, spec)
    shared = evaluate_exit(model, val, "cpu", "fp32", 0.0)
    assert shared.val_loss == evaluate(model, val, "cpu", "fp32")
    model.cfg = dataclasses.replace(model.cfg, kv_share="none")  # the same weights, every pass its own keys
    assert evaluate_exit(model, val, "cpu", "fp32", 0.0).val_loss != shared.val_loss


@pytest.mark.parametrize("reuse", MAPS)
def test_a_huge_eps_runs_every_layer_once(trained, reuse):
    spec, model, val = trained[reuse]
    point = evaluate_exit(model, val, "cpu", "fp32", 1e9)
    assert point.depth == spec.model.n_layers  # ILR: one pass of each layer; block: one pass of the stack


def test_a_map_without_repeats_is_evaluated_once_and_every_threshold_is_its_full_depth(corpus):
    spec = tiny_spec(reuse="1,1", tokens=STEPS)
    models = []
    train_ladder(spec, None, corpus, on_model=models.append)
    val = validation_batches(corpus, spec)
    grid = exit_grid(models[0], val, "cpu", "fp32", [1e-3, 1e9])
    assert [p.eps for p in grid] == [0.0, 1e-3, 1e9]
    for p in grid:  # what evaluating each threshold on its own gives (nothing to check, nothing to skip)
        e = evaluate_exit(models[0], val, "cpu", "fp32", p.eps)
        assert (p.depth, p.val_loss, p.flops_per_token) == (e.depth, e.val_loss, e.flops_per_token)
    assert grid[0].val_loss == evaluate(models[0], val, "cpu", "fp32") and grid[0].depth == 2


@pytest.mark.parametrize("reuse", MAPS)
def test_depth_never_rises_as_eps_grows(trained, reuse):
    spec, model, val = trained[reuse]
    grid = [0.0, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 1.0, 1e9]
    depths = [evaluate_exit(model, val[:2], "cpu", "fp32", eps).depth for eps in grid]
    assert all(a >= b for a, b in zip(depths, depths[1:])), depths
    assert depths[0] > depths[4] > depths[-1]  # and the grid does move it


@pytest.mark.parametrize("reuse", MAPS)
@pytest.mark.parametrize("eps", [0.0, 3e-3, 3e-2, 1e9])
def test_exit_flops_are_what_flopcountermode_counts_when_only_the_rule_s_work_runs(trained, reuse, eps):
    spec, model, val = trained[reuse]
    x, y = val[0]
    model.eval()
    with torch.no_grad():
        _, loss, tally = exit_forward(model, x, eps, y)
    with FlopCounterMode(display=False) as counter:
        _, gathered_loss, gathered = gathered_forward(model, x, eps, y)
    model.train()
    # the parallel evaluation and the one that computes only what exits need take the same decisions
    assert gathered == tally
    assert abs(gathered_loss.item() - loss.item()) < 1e-5
    total, check = exit_flops(spec.model, tally)
    assert counter.get_total_flops() == total * tally.tokens
    assert check == tally.checks * flops.head_flops_per_token(spec.model) / tally.tokens
    if eps == 0:
        assert total == flops.flops_per_token(spec.model)


def test_the_pick_is_the_largest_eps_within_tolerance_of_full_depth():
    full = ExitPoint(0.0, 6, 2.0, 100, 0)
    points = [full, ExitPoint(1e-3, 5, 2.009, 90, 5), ExitPoint(1e-2, 4, 2.011, 80, 5),
              ExitPoint(1e-1, 3, 2.0099, 70, 5)]
    assert pick(points, 0.005).eps == 1e-1  # the largest within, even past one outside
    assert pick(points, 0.001).eps == 0.0  # none within: full depth
    cols = exit_columns(points, 0.005, 1.5)
    assert (cols["exit_eps"], cols["exit_depth"], cols["exit_val_loss"], cols["exit_flops_per_token"]) == \
        (1e-1, 3, 2.0099, 70)
    assert [p["eps"] for p in json.loads(cols["exit_grid"])] == [0.0, 1e-3, 1e-2, 1e-1]


def test_exit_flops_count_the_passes_the_frozen_keys_and_values_and_the_checks():
    spec = tiny_spec(reuse="3,2")
    cfg = spec.model
    t = Tally(tokens=10, passes=30, kv=4, checks=20)
    total, check = exit_flops(cfg, t)
    d, head = cfg.d_model, flops.head_flops_per_token(cfg)
    assert check == 2 * head
    assert total == 3 * flops.layer_flops_per_token(cfg) + 0.4 * 4 * d * d + check + head


# --------------------------------------------------------------------------- the trainers


def test_a_training_records_the_exit_columns_at_every_rung_and_none_without_the_flag(corpus):
    plain = train_ladder(tiny_spec(reuse="3,2", tokens=STEPS), None, corpus)[0]
    assert math.isnan(plain.exit_eps) and math.isnan(plain.exit_depth) and plain.exit_grid == ""
    spec = tiny_spec(reuse="3,2", tokens=STEPS, schedule="wsd", exit_eps=(1e-3, 1e-1, 1e9))
    assert spec.config_hash() != tiny_spec(reuse="3,2", tokens=STEPS, schedule="wsd").config_hash()
    recs = train_ladder(spec, [STEPS // 2, STEPS], corpus)
    assert [r.rung for r in recs] == [0, 1]
    for r in recs:
        grid = json.loads(r.exit_grid)
        assert [p["eps"] for p in grid] == [0.0, 1e-3, 1e-1, 1e9]
        assert grid[0]["val_loss"] == r.val_loss  # eps 0: the rung's own validation
        within = [p for p in grid if p["val_loss"] <= r.val_loss * 1.005]
        best = max(within, key=lambda p: p["eps"])
        assert (r.exit_eps, r.exit_depth, r.exit_val_loss, r.exit_flops_per_token) == \
            (best["eps"], best["depth"], best["val_loss"], best["flops_per_token"])
        assert r.config["train.exit_eps"] == (1e-3, 1e-1, 1e9) and r.exit_s > 0
    assert recs[0].exit_grid != recs[1].exit_grid  # each rung's own weights


def test_packed_and_separate_trainings_give_the_same_exit_columns(corpus):
    specs = [tiny_spec(seed=s, reuse="3,2", tokens=STEPS, exit_eps=(1e-3, 1e-2, 1e9)) for s in (0, 1)]
    packed = train_packed(specs, None, corpus)
    alone = [train_ladder(s, None, corpus)[0] for s in specs]
    for p, a in zip(packed, alone):
        assert p.seed == a.seed and p.packed == 2 and a.packed == 1
        pg, ag = json.loads(p.exit_grid), json.loads(a.exit_grid)
        assert [q["eps"] for q in pg] == [q["eps"] for q in ag]
        for q, r in zip(pg, ag):
            assert abs(q["val_loss"] - r["val_loss"]) < 3e-6 and abs(q["depth"] - r["depth"]) < 0.02, (q, r)
            assert abs(q["flops_per_token"] - r["flops_per_token"]) < 0.01 * r["flops_per_token"]
        assert p.exit_eps == a.exit_eps


# --------------------------------------------------------------------------- flags and objective


@pytest.mark.parametrize("args, flag", [(["--exit-eps", "-1e-3"], "--exit-eps"), (["--exit-eps", "x"], "--exit-eps"),
                                        (["--exit-eps", "0,nan"], "--exit-eps"),
                                        (["--exit-tolerance", "0"], "--exit-tolerance"),
                                        (["--exit-tolerance", "-0.1"], "--exit-tolerance"),
                                        (["--exit-tolerance", "abc"], "--exit-tolerance")])
def test_bad_exit_flags_are_one_line_naming_the_flag_and_exit_2(tmp_path, capsys, args, flag):
    runs = tmp_path / "runs.csv"
    with pytest.raises(SystemExit) if "abc" in args else contextlib.nullcontext() as stop:
        code = train_main(["--layers", "2", "--map", "1,1", "--d-model", "16", "--heads", "2", "--seq-len", "16",
                           "--tokens", "2048", "--compile", "off", "--runs", str(runs), "--quiet", *args])
    code = stop.value.code if "abc" in args else code  # argparse's own type check exits
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and flag in err, err
    assert not runs.exists()


@pytest.mark.e2e
def test_the_train_command_writes_the_exit_columns(tmp_path):
    runs = tmp_path / "runs.csv"
    proc = run_cli_warm("train", "--layers", "2", "--map", "2,2", "--d-model", "16", "--heads", "2", "--seq-len", "16",
                   "--tokens", "2048", "--batch-size", "4", "--eval-tokens", "256", "--compile", "off",
                   "--runs", runs, "--quiet", "--exit-eps")
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_runs(runs)
    assert [p["eps"] for p in json.loads(rec.exit_grid)] == [0.0, 1e-4, 1e-3, 1e-2, 1e-1]
    assert rec.exit_eps in (0.0, 1e-4, 1e-3, 1e-2, 1e-1)
    assert 2 <= rec.exit_depth <= 4 and math.isfinite(rec.exit_flops_per_token)
    assert objs.get("exit_flops_per_token").value([rec]) == rec.exit_flops_per_token


def test_defaults_keep_the_config_hash_and_the_grid_is_sorted():
    assert TrainConfig().exit_eps == () and TrainConfig().exit_tolerance == 0.005
    assert tiny_spec().config_hash() == tiny_spec(exit_eps=(), exit_tolerance=0.005).config_hash()
    assert TrainConfig(exit_eps="1e-2, 0,1e-3").exit_eps == (0.0, 1e-3, 1e-2)
    assert TrainConfig(exit_eps="(0.0, 0.001)").exit_eps == (0.0, 1e-3)  # as a runs.csv cell holds it
    with pytest.raises(ConfigError, match="--exit-eps"):
        TrainConfig(exit_eps=(True,))


def test_an_exit_objective_without_exit_eps_is_refused_naming_the_flags(space_file, tmp_path, capsys):
    argv = ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(tmp_path / "r"),
            "--study", "s", "--objectives", "val_ppl,exit_flops_per_token", "--dry-run"]
    assert run_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--objectives exit_flops_per_token" in err and "--exit-eps" in err, err
    assert not (tmp_path / "r").exists()
    assert run_main([*argv, "--exit-eps"]) == 0


# --------------------------------------------------------------------------- the report


def exit_study(folder, with_exit=True, objectives=("val_ppl", "exit_flops_per_token")):
    """A study folder without training whose rows carry a made-up exit grid: deeper maps
    keep more depth, every seed's grid shifted by its seed."""
    from helpers import realistic_results, study_info, study_records

    from searchmaps.results import RunsFile

    results = realistic_results(3)
    records = []
    for r in study_records(results, study=folder.name):
        if with_exit and r.ok:
            full = r.applied_layers
            grid = [ExitPoint(eps, full - k * (full - 4) / 4, r.val_loss + 0.002 * k + 0.001 * r.seed,
                              1e5 * (full - k * (full - 4) / 4) + 3e4 * (k > 0), 3e4 * (k > 0))
                    for k, eps in enumerate((0.0, 1e-3, 1e-2, 1e-1))]
            r = r.replace(**exit_columns(grid, 0.005, 0.5),
                          config={**r.config, "train.exit_eps": (1e-3, 1e-2, 1e-1), "train.exit_tolerance": 0.005})
        records.append(r)
    folder.mkdir(parents=True)
    RunsFile(folder / "runs.csv").append(records)
    (folder / "study.json").write_text(json.dumps({**study_info(folder.name, 3), "objectives": list(objectives)}))
    return folder, records


def test_the_report_draws_loss_against_depth_and_searches_on_exit_flops(tmp_path):
    import pandas as pd

    from searchmaps.report.write import write_report

    folder, records = exit_study(tmp_path / "e")
    report = write_report(folder)
    table = pd.read_csv(folder / "exit.csv", dtype={"candidate": str, "map": str})
    ok = [r for r in records if r.ok]
    for cand in {r.label for r in ok}:
        mine = [r for r in ok if r.label == cand]
        rows = table[table["candidate"] == cand].sort_values("eps")
        assert list(rows["eps"]) == [0.0, 1e-3, 1e-2, 1e-1] and (rows["seeds"] == len(mine)).all()
        for k, (_, row) in enumerate(rows.iterrows()):
            assert row["val_loss"] == pytest.approx(sum(json.loads(r.exit_grid)[k]["val_loss"] for r in mine) / len(mine))
            assert row["depth"] == pytest.approx(json.loads(mine[0].exit_grid)[k]["depth"])
    html = (folder / "report.html").read_text()
    assert "Per-token exit: loss against depth" in html and "0.5" in html
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str, "map": str}).set_index("candidate")
    done = summary[summary["n_seeds"] > 0]
    for cand in done.index:
        assert done.loc[cand, "exit_flops_per_token_mean"] == pytest.approx(
            sum(r.exit_flops_per_token for r in ok if r.label == cand) / done.loc[cand, "n_seeds"])
    assert "per-token exit" in report.pareto_figure.layout.xaxis.title.text


def test_a_report_without_exit_rows_has_no_exit_figure_and_refuses_the_exit_objective(tmp_path, capsys):
    from searchmaps.report.__main__ import main as report_main
    from searchmaps.report.write import write_report

    folder, _ = exit_study(tmp_path / "plain", with_exit=False, objectives=("val_ppl", "flops_per_token"))
    write_report(folder)
    assert not (folder / "exit.csv").exists() and "Per-token exit" not in (folder / "report.html").read_text()
    folder, _ = exit_study(tmp_path / "lacking", with_exit=False)
    before = sorted(p.name for p in folder.iterdir())
    assert report_main([str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "exit_flops_per_token" in err and "--exit-eps" in err, err
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written


@pytest.mark.parametrize("args, flag", [(["--exit-eps", "-0.1"], "--exit-eps"), (["--exit-eps", "1e-3,x"], "--exit-eps"),
                                        (["--exit-tolerance", "0"], "--exit-tolerance")])
def test_the_search_command_refuses_bad_exit_flags_before_anything_is_written(space_file, tmp_path, capsys, args,
                                                                              flag):
    argv = ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(tmp_path / "r"),
            "--study", "s", *args]
    assert run_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err, err
    assert not (tmp_path / "r").exists()
