"""The weight-sharing supernet: its training is the ordinary trainer's, its scores are
per-map evaluations, and both are deterministic."""

import json
import math

import pytest
from helpers import tiny_spec

from searchmaps import flops
from searchmaps.config import ReuseMap
from searchmaps.spaces import load_space
from searchmaps.supernet import map_sequence, train_supernet
from searchmaps.train import evaluate, train
from searchmaps.data import val_batches
from searchmaps.results import read_runs

MAPS = [ReuseMap.parse(m, 2) for m in ("1,1", "2,1", "1,2", "2,2", "3,1")]


@pytest.fixture()
def space(space_file):
    return load_space(str(space_file))


def test_a_supernet_trained_on_one_map_is_its_stand_alone_training(corpus, space):
    spec = tiny_spec("2,1", seed=3, tokens=4096)
    one = train_supernet(space, 1e12, spec, corpus=corpus, maps=[ReuseMap.parse("2,1", 2)])
    alone = train(spec, corpus)
    assert (one.record.val_loss, one.record.train_loss, one.record.curve) == \
        (alone.val_loss, alone.train_loss, alone.curve)  # bit for bit
    assert one.scores == {ReuseMap.parse("2,1", 2): alone.val_loss}  # scoring = its final evaluation
    assert one.record.train_flops == alone.train_flops


def test_every_score_equals_a_separate_evaluation_of_that_map(corpus, space):
    spec = tiny_spec("1,1", seed=1, tokens=2048)
    maps = MAPS + [ReuseMap((1, 1), 2)]
    kept = {}
    result = train_supernet(space, 1e12, spec, corpus=corpus, maps=maps)
    from searchmaps.train import train_ladder

    train_ladder(spec, None, corpus, map_for_step=lambda step: map_sequence(maps, 16, 1)[step - 1],
                 on_model=lambda m: kept.update(model=m))
    model = kept["model"]
    val = val_batches(corpus, spec.train.batch_size, spec.model.seq_len, spec.train.eval_tokens)
    for m in maps:  # the supernet's weights, each map run on its own
        model.cfg = spec.model.with_map(m)
        assert result.scores[m] == evaluate(model, val, "cpu", "fp32"), m
    again = train_supernet(space, 1e12, spec, corpus=corpus, maps=maps)
    assert again.scores == result.scores  # deterministic


def test_the_map_sequence_is_a_function_of_the_seed_and_the_sampling():
    uniform = map_sequence(MAPS, 300, 0)
    assert uniform == map_sequence(MAPS, 300, 0) != map_sequence(MAPS, 300, 1)
    assert set(uniform) == set(MAPS) and max(uniform.count(m) for m in MAPS) < 100  # uniform: ~60 each
    sandwich = map_sequence(MAPS, 30, 0, "sandwich")
    cheapest, dearest = ReuseMap((1, 1)), max(MAPS, key=lambda m: m.applied_layers)
    assert sandwich[0::3] == [cheapest] * 10 and sandwich[1::3] == [dearest] * 10


def test_training_flops_count_the_maps_that_ran(corpus, space):
    spec = tiny_spec("1,1", seed=0, tokens=2048)
    result = train_supernet(space, 1e12, spec, corpus=corpus, maps=MAPS)
    seq = map_sequence(MAPS, 16, 0)
    want = sum(flops.train_flops_per_token(spec.model.with_map(m)) for m in seq) * 128
    assert result.record.train_flops == want and sum(result.trained.values()) == 16
    budget = 16 * 128 * flops.train_flops_per_token(spec.model.with_map(ReuseMap((2, 2))))
    flop_spec = tiny_spec("1,1", seed=0, tokens=None, train_flops=budget)
    matched = train_supernet(space, 1e12, flop_spec, corpus=corpus, maps=MAPS, score=False)
    mean_cost = sum(flops.train_flops_per_token(spec.model.with_map(m)) for m in MAPS) / len(MAPS)
    assert matched.record.steps == int(budget // (mean_cost * 128))


def test_only_prenorm_weights_can_serve_every_map(corpus, space):
    import dataclasses

    from searchmaps.config import ConfigError

    spec = tiny_spec("1,1", tokens=1024)
    deeploop = dataclasses.replace(spec, model=dataclasses.replace(spec.model, residual="deeploop"))
    with pytest.raises(ConfigError, match="--residual deeploop"):
        train_supernet(space, 1e12, deeploop, corpus=corpus, maps=MAPS)
    assert math.isfinite(train_supernet(space, 1e12, spec, corpus=corpus, maps=MAPS).record.val_loss)


# ---------------------------------------------------------------------------- the commands


def supernet_args(space_file, results, *extra):
    from searchmaps import flops as f
    from searchmaps.config import ModelConfig

    budget = f.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,2"))
    return ["--space", str(space_file), "--budget-flops", str(budget), "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--workers", "1", "--supernet-seeds", "2", *extra]


def test_the_supernet_command_scores_every_map_and_validates_against_stand_alone_training(
        ray_cluster, space_file, tmp_path, capsys):
    import pandas as pd

    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    argv = supernet_args(space_file, results, "--study", "sn", "--validate", "1", "--seeds", "2",
                         "--ray-address", ray_cluster, "--no-report")
    assert main(argv) == 0
    scores = pd.read_csv(results / "sn" / "supernet.csv", dtype={"map": str})
    assert sorted(scores["seed"].unique()) == [0, 1]
    assert set(scores["map"]) == {"1,1", "2,1", "1,2", "3,1", "2,2", "1,3", "block:2"}  # every map in the budget
    assert (scores.groupby("seed")["steps_trained"].sum() == 16).all()  # 2048 tokens / 128 per step
    runs = read_runs(results / "sn" / "runs.csv")
    best = scores.groupby("map")["val_loss"].mean().idxmin()
    assert best in {r.map for r in runs} and len({r.map for r in runs}) == 2 and len(runs) == 4
    # the same command again trains no supernet and no map: everything is on disk
    before = (results / "sn" / "supernet.csv").read_bytes()
    assert main(argv) == 0
    assert (results / "sn" / "supernet.csv").read_bytes() == before and len(read_runs(results / "sn" / "runs.csv")) == 4
    from searchmaps.report import write_report

    page = write_report(results / "sn").path.read_text()
    assert "Supernet over the whole space" in page and "Supernet vs stand-alone training" in page
    val = pd.read_csv(results / "sn" / "supernet_validation.csv")
    assert val["n_candidates"].item() == 2 and -1 <= val["kendall_tau"].item() <= 1
    # a supernet study of its own, validated against that study's stand-alone rows: its own page
    argv = supernet_args(space_file, results, "--study", "sn-only", "--validate-against", str(results / "sn"))
    assert main(argv) == 0
    assert "Kendall's τ" in capsys.readouterr().out
    page = (results / "sn-only" / "report.html").read_text()
    assert "Supernet over the whole space" in page and "Supernet vs stand-alone training" in page
    assert "supernet_validation.csv" in page and not (results / "sn-only" / "runs.csv").exists()
    assert pd.read_csv(results / "sn-only" / "supernet_validation.csv")["n_candidates"].item() == 2
    meta = json.loads((results / "sn-only" / "supernet.json").read_text())
    assert meta["seeds"] == [0, 1] and meta["config"]["model.d_model"] == 32 and "train.lr" in meta["config"]


def test_a_prescreen_keeps_the_supernets_best_maps_and_the_baseline(ray_cluster, space_file, tmp_path, capsys):
    import json

    import pandas as pd

    from searchmaps.run import main

    results = tmp_path / "results"
    # --sampler random --trials 1: the un-narrowed plan samples one map, which is not the
    # baseline; the prescreen must add the baseline all the same
    argv = supernet_args(space_file, results, "--study", "pre", "--prescreen", "supernet", "--keep", "1",
                         "--seeds", "2", "--ray-address", ray_cluster, "--sampler", "random", "--trials", "1")
    assert main(argv) == 0
    scores = pd.read_csv(results / "pre" / "supernet.csv", dtype={"map": str})
    best = scores.groupby("map")["val_loss"].mean().idxmin()
    trained = {r.map for r in read_runs(results / "pre" / "runs.csv")}
    assert trained == {best, "1,1"} if best != "1,1" else trained == {"1,1"}
    info = json.loads((results / "pre" / "study.json").read_text())
    assert info["prescreen"]["keep"] == 1 and info["prescreen"]["maps_scored"] == 7
    assert "Prescreen: a supernet" in (results / "pre" / "report.html").read_text()


def test_validating_against_a_folder_that_is_not_there_is_one_line_and_makes_nothing(space_file, tmp_path, capsys):
    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    assert main(supernet_args(space_file, results, "--study", "sn", "--validate-against", "/nonexistent")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("searchmaps.supernet: error: --validate-against: /nonexistent")
    assert not results.exists()
