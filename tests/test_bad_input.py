"""Bad input is checked before any work: one line on stderr naming the flag or key, exit
code 2, nothing written (issue 35, item 6). In-process, through each command's ``main``."""

import json

import pytest
from conftest import TINY_SPACE

from searchmaps.cli.data import main as data_main
from searchmaps.cli.report import main as report_main
from searchmaps.cli.run import main as run_main
from searchmaps.cli.supernet import main as supernet_main
from searchmaps.cli.train import main as train_main

TRAIN = ["--layers", "2", "--map", "1,1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--tokens", "2048",
         "--compile", "off", "--quiet"]


def refused(capsys, main, argv, *named) -> str:
    """``main(argv)`` exits 2 with one line on stderr that names each of ``named``."""
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own checks
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    for name in named:
        assert name in err, err
    return err


def search(space, results, *extra):
    return ["--space", str(space), "--budget-flops", "1e9", "--results-dir", str(results), "--study", "s",
            "--compile", "off", "--quiet", *extra]


# --------------------------------------------------------------------------- per-token exit flags


@pytest.mark.parametrize("args, named", [
    (["--exit-eps", "--exit-tolerance", "5"], ["--exit-tolerance", "fraction", "0.005 for 0.5 %"]),
    (["--exit-eps", "--exit-tolerance", "1"], ["--exit-tolerance", "fraction"]),
    (["--exit-eps", ""], ["--exit-eps"]),
    (["--exit-eps", " , "], ["--exit-eps"]),
    (["--exit-tolerance", "0.01"], ["--exit-tolerance", "--exit-eps"]),
])
def test_bad_exit_flags_of_train_are_refused_before_training(tmp_path, capsys, args, named):
    runs = tmp_path / "runs.csv"
    refused(capsys, train_main, [*TRAIN, "--runs", str(runs), *args], *named)
    assert not runs.exists()


@pytest.mark.parametrize("args, named", [
    (["--exit-eps", "--exit-tolerance", "5"], ["--exit-tolerance", "fraction"]),
    (["--exit-eps", ""], ["--exit-eps"]),
    (["--exit-tolerance", "0.01"], ["--exit-tolerance", "--exit-eps"]),
])
def test_bad_exit_flags_of_a_search_are_refused_before_anything_is_written(space_file, tmp_path, capsys, args,
                                                                           named):
    refused(capsys, run_main, search(space_file, tmp_path / "r", *args), *named)
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- --sampling


def test_an_unknown_sampling_is_refused_by_train_before_training(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    refused(capsys, train_main, [*TRAIN, "--runs", str(runs), "--sampling", "shuffle"], "--sampling", "windows, epoch")
    assert not runs.exists()


@pytest.mark.parametrize("main, value", [(run_main, "shuffle"), (run_main, "epoch,windows"), (run_main, "fair,sandwich"),
                                         (supernet_main, "shuffle")])
def test_an_unknown_sampling_is_refused_by_a_search_before_anything_is_written(space_file, tmp_path, capsys, main,
                                                                               value):
    refused(capsys, main, search(space_file, tmp_path / "r", "--sampling", value), "--sampling", "epoch", "sandwich")
    assert not (tmp_path / "r").exists()


def test_a_search_takes_the_training_sampling_and_the_supernets_in_one_flag(space_file, tmp_path):
    from searchmaps.cli.flags import supernet_method
    from searchmaps.cli.run import build_parser, build_plan

    args = build_parser().parse_args(search(space_file, tmp_path / "r", "--sampling", "epoch,fair", "--dry-run"))
    assert build_plan(args).space.train.sampling == "epoch" and supernet_method(args).sampling == "fair"
    args = build_parser().parse_args(search(space_file, tmp_path / "r", "--sampling", "fair", "--dry-run"))
    assert build_plan(args).space.train.sampling == "windows" and supernet_method(args).sampling == "fair"


def test_exit_tolerance_is_taken_with_exit_eps_or_a_space_file_that_sets_it(space_file, tmp_path, capsys):
    assert run_main(search(space_file, tmp_path / "r", "--exit-eps", "1e-3", "--exit-tolerance", "0.01",
                           "--dry-run")) == 0
    space = tmp_path / "exit.toml"
    space.write_text(TINY_SPACE.replace("[train]\n", "[train]\nexit_eps = [0.001, 0.01]\n"))
    assert run_main(search(space, tmp_path / "r", "--exit-tolerance", "0.01", "--dry-run")) == 0


@pytest.mark.parametrize("value, grid", [("0.01", (0.01,)), ("1e-3", (1e-3,)), ("0", (0.0,)),
                                         ("[0.1, 0.001]", (1e-3, 0.1)), ("[0]", (0.0,))])
def test_a_space_file_takes_exit_eps_as_a_number_or_a_list(tmp_path, value, grid):
    from searchmaps.spaces import load_space

    space = tmp_path / "exit.toml"
    space.write_text(TINY_SPACE.replace("[train]\n", f"[train]\nexit_eps = {value}\n"))
    assert load_space(str(space)).train.exit_eps == grid


@pytest.mark.parametrize("value", ['"x"', '"0.01"', "[]", "[-1]", '[0.01, "x"]', "true", "[nan]", "inf"])
def test_a_space_file_refuses_any_other_exit_eps_naming_the_key(tmp_path, capsys, value):
    space = tmp_path / "exit.toml"
    space.write_text(TINY_SPACE.replace("[train]\n", f"[train]\nexit_eps = {value}\n"))
    refused(capsys, run_main, search(space, tmp_path / "r", "--dry-run"), "[train].exit_eps", str(space))
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- the data


def test_a_byte_corpus_refuses_another_vocabulary_before_training(space_file, tmp_path, capsys):
    text = tmp_path / "a.txt"
    text.write_text("some text to train on. " * 400)
    runs = tmp_path / "runs.csv"
    refused(capsys, train_main, [*TRAIN, "--data", str(text), "--vocab-size", "1000", "--runs", str(runs)],
            "--vocab-size 1000", "256")
    assert not runs.exists()
    refused(capsys, run_main, search(space_file, tmp_path / "r", "--data", str(text), "--vocab-size", "1000"),
            "--vocab-size 1000")
    assert not (tmp_path / "r").exists()
    assert train_main([*TRAIN, "--data", str(text), "--vocab-size", "256", "--tokens", "64", "--batch-size", "2",
                       "--eval-tokens", "16"]) == 0  # the byte vocabulary itself is fine


def test_prepare_refuses_an_out_that_is_a_file_before_training_the_tokenizer(tmp_path, capsys):
    text = tmp_path / "a.txt"
    text.write_text("some text to train a tokenizer on. " * 400)
    out = tmp_path / "out"
    out.write_text("mine")
    for target in (out, out / "inside"):  # the folder, or a folder it would be made in, is a file
        refused(capsys, data_main, ["prepare", "--data", str(text), "--tokenizer", "bpe:300", "--out", str(target)],
                f"--out {target}", "is a file")
    assert out.read_text() == "mine"
    refused(capsys, data_main, ["prepare", "--out", str(tmp_path / "new")], "--tokenizer")  # argparse's: one line
    refused(capsys, data_main, [], "prepare|inspect")


# --------------------------------------------------------------------------- supernet and report


def test_supernet_refuses_a_negative_validate_before_training(space_file, tmp_path, capsys):
    refused(capsys, supernet_main, search(space_file, tmp_path / "r", "--validate", "-1"), "--validate")
    assert not (tmp_path / "r").exists()


def test_the_report_of_a_results_root_lists_its_study_folders(tmp_path, capsys):
    root = tmp_path / "results"
    for name in ("b-study", "a-study"):
        (root / name).mkdir(parents=True)
        (root / name / "study.json").write_text(json.dumps({"study": name}))
    (root / "not-a-study").mkdir()
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    err = refused(capsys, report_main, [str(root)], str(root / "a-study"), str(root / "b-study"))
    assert "not-a-study" not in err and err.index("a-study") < err.index("b-study")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written


# --------------------------------------------------------------------------- what a row says was evaluated


@pytest.mark.parametrize("seeds", ["1", "2"])
def test_a_row_records_the_held_out_tokens_actually_scored(tmp_path, seeds):
    """A held-out split smaller than --eval-tokens is scored whole (in whole windows): the row's
    eval_tokens_scored says how many tokens that was, its config what was asked (and hashed)."""
    from searchmaps.data import load_corpus
    from searchmaps.results import read_runs

    text = tmp_path / "a.txt"
    text.write_bytes(bytes(range(32, 127)) * 400)  # 38,000 bytes: the last 5 % (1,900) held out
    held_out = len(load_corpus(str(text)).val)
    assert 16 * 2 < held_out < 32768
    runs = tmp_path / "runs.csv"
    argv = [*TRAIN, "--data", str(text), "--tokens", "256", "--batch-size", "2", "--runs", str(runs), "--seeds", seeds]
    assert train_main([*argv, "--eval-tokens", "32768"]) == 0
    assert train_main([*argv, "--eval-tokens", "64", "--seed", "5"]) == 0  # a split large enough: what was asked
    small, large = [r for r in read_runs(runs) if r.seed == 0], [r for r in read_runs(runs) if r.seed == 5]
    assert small and large
    for r in small:
        assert r.config["train.eval_tokens"] == 32768  # as asked: the config and its hash are unchanged
        assert r.eval_tokens_scored == (held_out - 1) // 16 * 16  # every whole 16-token window of the split
    assert all(r.eval_tokens_scored == 64 for r in large)
