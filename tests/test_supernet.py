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
    fair_cost = sum(flops.train_flops_per_token(spec.model.with_map(m)) for m in map_sequence(MAPS, 2000, 0, "fair"))
    fair = train_supernet(space, 1e12, flop_spec, "fair", corpus=corpus, maps=MAPS, score=False)
    assert fair.record.steps == int(budget // (fair_cost / 2000 * 128))


def test_only_prenorm_weights_can_serve_every_map(corpus, space):
    import dataclasses

    from searchmaps.config import ConfigError

    spec = tiny_spec("1,1", tokens=1024)
    deeploop = dataclasses.replace(spec, model=dataclasses.replace(spec.model, residual="deeploop"))
    with pytest.raises(ConfigError, match="--residual deeploop"):
        train_supernet(space, 1e12, deeploop, corpus=corpus, maps=MAPS)
    served = train_supernet(space, 1e12, spec, corpus=corpus, maps=MAPS)
    assert math.isfinite(served.record.val_loss)
    # prenorm weights serve every map: each one scored, each well below the uniform guess (ln 256 = 5.55 nats;
    # 8 steps reach ~4.7), a map the sampler never ran (1,1 here) too
    assert set(served.scores) == set(MAPS) and min(served.trained.values()) == 0
    assert all(loss < math.log(spec.model.vocab_size) - 0.5 for loss in served.scores.values()), served.scores


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
                         "--ray-address", ray_cluster, "--no-report", "--sampling", "uniform")  # one map a step
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
    # the same study from Python (the command's library call): it reads the seeds back and gives the
    # command's numbers without printing; a bad setting raises before anything is trained
    from searchmaps.cli.flags import supernet_method
    from searchmaps.cli.run import build_plan
    from searchmaps.cli.supernet import build_parser
    from searchmaps.config import ConfigError
    from searchmaps.supernet.search import SupernetSearch

    capsys.readouterr()
    args = build_parser().parse_args(argv)
    method = supernet_method(args)
    study = SupernetSearch(build_plan(args, supernet=method), method, 2, args.validate_against)
    before = (results / "sn-only" / "supernet.csv").read_bytes()
    out = study.run(progress=False)
    assert (results / "sn-only" / "supernet.csv").read_bytes() == before and capsys.readouterr().out == ""
    means = pd.read_csv(results / "sn-only" / "supernet.csv", dtype={"map": str}).groupby("map")["val_loss"].mean()
    assert list(out.ranked.index) == list(means.sort_values(kind="stable").index)
    assert out.agreement["kendall_tau"] == pytest.approx(
        pd.read_csv(results / "sn-only" / "supernet_validation.csv")["kendall_tau"].item())
    with pytest.raises(ConfigError, match="--validate must be"):
        SupernetSearch(study.plan, method, 2, validate=-1)


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
    # the supernet's default, as searchmaps.supernet's: sandwich sampling with in-place distillation
    assert info["prescreen"]["sampling"] == "sandwich" and info["prescreen"]["distill"] is True
    assert scores["distill"].all() and (scores["sampling"] == "sandwich").all()
    assert "Prescreen: a supernet" in (results / "pre" / "report.html").read_text()


def test_validating_against_a_folder_that_is_not_there_is_one_line_and_makes_nothing(space_file, tmp_path, capsys):
    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    assert main(supernet_args(space_file, results, "--study", "sn", "--validate-against", "/nonexistent")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("searchmaps.supernet: error: --validate-against: /nonexistent")
    assert not results.exists()


# ---------------------------------------------------------------------------- fair sampling, split by depth


def _ilr_blocks(seq, b):
    ilr = [m.repeats for m in seq if not m.is_block]
    return [ilr[i:i + b] for i in range(0, len(ilr) - b + 1, b)]


def test_fair_sampling_trains_each_layers_values_equally_often_over_every_block():
    from collections import Counter

    from searchmaps.supernet.samplings.fair import block_length, layer_choices

    # layer 1 takes 1, 2, 3 and layer 2 takes 1, 2: blocks of lcm(3, 2) = 6 steps. 3,2 and
    # 3,3 are not in the space, so the two 3s of a block must pair with 1s: swaps find it
    assert layer_choices(MAPS) == [[1, 2, 3], [1, 2]] and block_length(layer_choices(MAPS)) == 6
    seq = map_sequence(MAPS, 60, 0, "fair")
    assert seq == map_sequence(MAPS, 60, 0, "fair") != map_sequence(MAPS, 60, 1, "fair") and set(seq) <= set(MAPS)
    for block in _ilr_blocks(seq, 6):
        assert Counter(r[0] for r in block) == {1: 2, 2: 2, 3: 2} and Counter(r[1] for r in block) == {1: 3, 2: 3}
    # a product space with a block map: the block map runs at its share (1 of 10), the rest is balanced
    product = [ReuseMap((a, b)) for a in (1, 2, 3) for b in (1, 2, 3)] + [ReuseMap((1, 1), 2)]
    seq = map_sequence(product, 1000, 2, "fair")
    assert 60 < sum(m.is_block for m in seq) < 140
    for block in _ilr_blocks(seq, 3):
        assert sorted(r[0] for r in block) == [1, 2, 3] == sorted(r[1] for r in block)
    # no balanced block exists (layer 2's 2 goes only with layer 1's 1): every step still feasible
    odd = [ReuseMap.parse(m, 2) for m in ("1,1", "2,1", "1,2", "3,1")]
    seq = map_sequence(odd, 120, 0, "fair")
    assert set(seq) == set(odd)  # every map trained, none outside the space


def test_a_depth_split_trains_one_supernet_per_group_and_scores_every_map_once(corpus, space):
    from searchmaps.supernet.split import depth_groups, split_rows, train_split

    spec = tiny_spec("1,1", seed=1, tokens=2048)  # 16 steps of 128 tokens
    groups = depth_groups(MAPS)
    assert {k: [str(m) for m in v] for k, v in groups.items()} == {2: ["1,1"], 3: ["2,1", "1,2"], 4: ["2,2", "3,1"]}
    shared = train_split(space, 1e12, spec, maps=MAPS)
    assert [set(r.scores) for r in shared] == [set(g) for g in groups.values()]  # each group's maps only
    assert [r.record.steps for r in shared] == [5, 5, 5]  # 16 steps shared by 3 groups, whole steps each
    # the group of one map is that map's stand-alone training at the group's horizon, bit for bit
    alone = train(tiny_spec("1,1", seed=1, tokens=640), corpus)
    assert shared[0].scores == {ReuseMap((1, 1)): alone.val_loss}
    rows = split_rows(shared, space, spec, "shared")
    assert sorted(r["map"] for r in rows) == sorted(str(m) for m in MAPS)  # every map once
    assert {r["supernet_steps"] for r in rows} == {15} and {r["supernet_groups"] for r in rows} == {3}
    assert {r["supernet_train_flops"] for r in rows} == {sum(r.record.train_flops for r in shared)}  # cost summed
    assert {r["group"]: r["group_steps"] for r in rows} == {2: 5, 3: 5, 4: 5}
    full = train_split(space, 1e12, spec, split_budget="full", maps=MAPS)
    assert [r.record.steps for r in full] == [16, 16, 16]


def test_split_and_sampling_names_are_checked_in_one_line(space_file, tmp_path, capsys):
    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    for flag, value in (("--split", "width"), ("--sampling", "fairest"), ("--split-budget", "half")):
        try:  # argparse's choices exit; --sampling (which also takes the training's windows|epoch) returns 2
            code = main(supernet_args(space_file, results, "--study", "sn", flag, value))
        except SystemExit as exit_:
            code = exit_.code
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and flag in lines[0] and value in lines[0]
    assert main(supernet_args(space_file, results, "--study", "sn", "--split", "depth", "--sampling", "sandwich")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--sampling sandwich" in lines[0] and "--split" in lines[0]
    assert not results.exists()


def test_the_default_supernet_is_sandwich_with_distillation_from_the_deepest_map(space_file, tmp_path, capsys):
    import pandas as pd

    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    assert main(supernet_args(space_file, results, "--supernet-seeds", "1")) == 0  # no --study: named by its method
    (folder,) = list(results.iterdir())
    assert folder.name.startswith("tiny-supernet-sandwich-distill-b")
    scores = pd.read_csv(folder / "supernet.csv", dtype={"map": str, "teacher": str})
    assert (scores["sampling"] == "sandwich").all() and scores["distill"].all()
    assert scores["teacher"].nunique() == 1
    teacher = scores["teacher"].iloc[0]
    assert ReuseMap.parse(teacher, 2).applied_layers == scores["applied_layers"].max() == 4
    assert scores.loc[scores["map"] == teacher, "steps_distilled"].item() == 0  # it learns from the labels only
    assert scores["steps_distilled"].sum() > 0
    # --split depth has no extremes to sandwich: uniform, undistilled; --sampling uniform alone is undistilled
    for extra, name in ((["--split", "depth"], "d"), (["--sampling", "uniform"], "u"),
                        (["--no-distill"], "s")):
        assert main(supernet_args(space_file, results, "--study", name, "--supernet-seeds", "1", *extra)) == 0
        rows = pd.read_csv(results / name / "supernet.csv")
        assert not rows["distill"].any() and (rows["steps_distilled"] == 0).all()
        assert (rows["sampling"] == ("sandwich" if name == "s" else "uniform")).all()
    # the residual check names the flag the user gave
    capsys.readouterr()
    assert main(supernet_args(space_file, results, "--study", "r", "--residual", "deeploop")) == 2
    assert capsys.readouterr().err.strip().startswith("searchmaps.supernet: error: --residual")


def test_the_supernet_command_splits_by_depth_and_samples_fairly(space_file, tmp_path):
    import pandas as pd

    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    assert main(supernet_args(space_file, results, "--study", "split", "--split", "depth", "--sampling", "fair",
                              "--supernet-seeds", "1")) == 0
    scores = pd.read_csv(results / "split" / "supernet.csv", dtype={"map": str})
    # 1,1 | 2,1 1,2 | 3,1 2,2 1,3 block:2 (block:2 applies 4 layers): 3 groups, every map once
    assert sorted(scores["map"]) == sorted(["1,1", "2,1", "1,2", "3,1", "2,2", "1,3", "block:2"])
    assert set(scores["group"]) == {2, 3, 4} and (scores["supernet_groups"] == 3).all()
    assert (scores["split"] == "depth").all() and (scores["sampling"] == "fair").all()
    assert scores.groupby("group")["group_steps"].first().sum() == scores["supernet_steps"].iloc[0] == 15
    assert "Split by depth: each seed is 3 sub-supernets" in (results / "split" / "report.html").read_text()
    key = json.loads((results / "split" / "supernet.json").read_text())["key"]
    assert key["split"] == "depth" and key["split_budget"] == "shared"
    # without --split the key, and so every existing supernet.csv, is as before
    assert main(supernet_args(space_file, results, "--study", "plain", "--supernet-seeds", "1")) == 0
    assert "split" not in json.loads((results / "plain" / "supernet.json").read_text())["key"]
    assert "split" not in pd.read_csv(results / "plain" / "supernet.csv").columns


# ---------------------------------------------------------------------------- landmarks


def test_landmarks_spread_over_depth_and_an_affine_depth_bias_is_undone_by_hand():
    import pandas as pd

    from searchmaps.supernet.landmarks import calibrate, choose, fit

    applied = {"a": 2, "b": 3, "c": 3, "d": 4, "e": 5}
    assert choose(list(applied), applied, 2) == ["a", "e"]  # the cheapest and the deepest
    assert choose(list(applied), applied, 3) == ["a", "c", "e"]  # positions 0, 2, 4 of a b c d e
    # stand-alone loss = supernet score + 0.5 - 0.25 x applied layers: the supernet favours the deep maps
    truth_mean = {"a": 3.0, "b": 3.2, "c": 3.1, "d": 2.9, "e": 2.8}
    scores = pd.DataFrame([{"candidate": c, "seed": s, "applied_layers": applied[c],
                            "val_loss": truth_mean[c] - 0.5 + 0.25 * applied[c] + 0.01 * s}
                           for c in applied for s in range(2)])
    truth = pd.DataFrame([{"candidate": c, "seed": s, "val_loss": m} for c, m in truth_mean.items() for s in range(3)])
    a, b = fit(scores, truth, ["a", "e"])  # gaps: a: 0.5 - 0.5 - 0.005 = -0.005, e: 0.5 - 1.25 - 0.005
    assert (a, b) == (pytest.approx(0.5 - 0.005), pytest.approx(-0.25))
    fixed, rest, info = calibrate(scores, truth, 2)
    assert set(rest["candidate"]) == {"b", "c", "d"} and info["landmark_maps"] == "a;e"
    means = fixed.groupby("candidate")["val_loss"].mean()
    assert means.to_dict() == pytest.approx(truth_mean)  # every map's stand-alone loss, landmarks or not


def test_landmarks_bad_input_is_one_line_and_makes_nothing(space_file, tmp_path, capsys):
    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    for extra, said in ((["--landmarks", "8"], "--landmarks 8 is larger than the space (7 feasible maps)"),
                        (["--landmarks", "1"], "--landmarks needs --validate-against"),
                        (["--landmarks", "-1"], "--landmarks must be at least 0")):
        assert main(supernet_args(space_file, results, "--study", "sn", *extra)) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], lines
    assert not results.exists()


def test_the_supernet_command_calibrates_on_landmarks_and_validates_on_the_rest(space_file, tmp_path, corpus, capsys):
    import pandas as pd

    from searchmaps.results import RunsFile
    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    truth = results / "alone"
    truth.mkdir(parents=True)
    RunsFile(truth / "runs.csv").append(
        [train(tiny_spec(m, tokens=256), corpus) for m in ("1,1", "2,1", "1,2", "2,2")])  # one seed: quick
    argv = supernet_args(space_file, results, "--study", "marked", "--supernet-seeds", "1", "--validate-against",
                         str(truth), "--landmarks", "2")
    assert main(argv) == 0
    val = pd.read_csv(results / "marked" / "supernet_validation.csv")
    assert val["landmark_maps"].item() == "1,1|rope;2,2|rope" and val["n_candidates"].item() == 2
    assert "landmark" in (results / "marked" / "report.html").read_text()
    raw = pd.read_csv(results / "marked" / "supernet.csv", dtype={"map": str})  # supernet.csv keeps the raw scores
    assert "landmark" not in " ".join(raw.columns)
    assert main(argv[:-1] + ["3"]) == 2  # 4 shared maps: 3 landmarks would leave one to validate on
    assert "--landmarks 3 leaves 1 of the 4 maps" in capsys.readouterr().err
