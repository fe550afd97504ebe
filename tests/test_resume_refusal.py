"""A study folder resumed with another preset, width, evaluation or trainer (issue 42's bad
input): one line naming the differing setting, exit 2, nothing written. The study is made as
a first command makes it (its Optuna study with the protocol, its study.json) without Ray or
any training; the resumed command is ``searchmaps.run`` itself, refused before it starts."""

import hashlib
import json

import optuna
import pytest

from searchmaps.cli.run import build_parser, build_plan
from searchmaps.ledger import Ledger, check_storage
from searchmaps.run import main
from searchmaps.plan import protocol_differences
from searchmaps.results import read_runs
from searchmaps.study import SearchStudy

# ilr-micro's recipe on the built-in corpus in bytes (no BPE to train), one map, one seed
FIRST = ["--space", "ilr4", "--budget-flops", "1e9", "--preset", "ilr-micro", "--data", "stdlib", "--tokenizer",
         "bytes", "--maps", "1,1,1,1", "--seeds", "1", "--compile", "off", "--precision", "fp32", "--attention",
         "sdpa", "--study", "s", "--quiet", "--no-report"]

# ilr-small with flags that give every value of ilr-micro: only the preset's name differs
SMALL_AS_MICRO = ["--preset", "ilr-small", "--d-model", "64", "--heads", "2", "--ffn-hidden", "256", "--eval-protocol",
                  "stratified", "--eval-tokens", "2359296", "--tokens", "27918336"]


def contents(folder) -> dict:
    """Every file under ``folder`` and a hash of its bytes, the SQLite storage apart: it is
    compared by what it holds (:func:`stored`), since the storage check's probe row, written and
    deleted, reaches the database file's bytes whenever SQLite checkpoints its write-ahead log."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith("optuna.db")}


@pytest.fixture()
def study(tmp_path):
    """The study folder ``FIRST`` made: its Optuna study (the protocol stored) and study.json."""
    argv = [*FIRST, "--results-dir", str(tmp_path)]
    plan = build_plan(build_parser().parse_args(argv))
    plan.study_dir.mkdir(parents=True)
    SearchStudy(plan, Ledger(check_storage(plan.storage_url), plan.study))
    plan.write_study_json()
    return plan


def stored(plan):
    s = optuna.load_study(study_name=plan.study, storage=plan.storage_url)
    return s.user_attrs, len(s.trials)


@pytest.mark.parametrize("flags, named", [
    (["--preset", "ilr-small"], "preset, model.d_model, model.ffn_hidden, model.n_heads, tokens, train.eval_protocol, "
                                "train.eval_tokens"),
    (SMALL_AS_MICRO, "preset"),
    (["--d-model", "128", "--heads", "4"], "model.d_model, model.n_heads"),
    (["--eval-protocol", "ilr"], "train.eval_protocol"),
    (["--attention", "math"], "train.attention"),
], ids=["preset", "preset-alone", "width", "evaluation", "attention"])
def test_a_study_resumed_with_other_settings_is_one_line_naming_them_exit_2_nothing_written(
        study, tmp_path, capsys, flags, named):
    before, attrs = contents(study.study_dir), stored(study)
    assert main([*FIRST, "--results-dir", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"--study s already exists with other settings ({named}); use another --study name" in lines[0]
    assert contents(study.study_dir) == before and stored(study) == attrs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_the_differences_name_trainer_settings_and_a_preset_one_side_lacks():
    old = {"seeds": 3, "model": {"d_model": 64}, "train": {"precision": "bf16", "compile": True, "lr": 3e-3}}
    new = {"seeds": 3, "preset": "ilr-micro", "model": {"d_model": 64},
           "train": {"precision": "fp32", "compile": False, "attention": "chunked", "lr": 3e-3}}
    assert protocol_differences(old, new) == ["preset", "train.attention", "train.compile", "train.precision"]
    assert protocol_differences(new, old) == ["preset", "train.attention", "train.compile", "train.precision"]
    assert protocol_differences(old, {**old, "seeds": 4}) == ["seeds"]  # alone: seeds are added (test_add_seeds.py)
    assert protocol_differences(old, {**old, "objectives": ["val_ppl"]}) == []  # a key the study predates


# --------------------------------------------------------------------------- the default evaluation (issue 44)


def tiny(space_file, results, *extra):
    """A one-map, one-seed study of the tiny space, trained by the local executor in seconds."""
    return ["--space", str(space_file), "--budget-flops", "1e9", "--maps", "1,1", "--seeds", "1", "--results-dir",
            str(results), "--study", "t", "--compile", "off", "--precision", "fp32", "--attention", "sdpa",
            "--executor", "local", "--workers", "1", "--quiet", "--no-report", *extra]


def protocols(folder) -> tuple[str, list[str]]:
    """study.json's evaluation and each row's (both leave out windows, the value before the option)."""
    info = json.loads((folder / "study.json").read_text())
    return (info["train"].get("eval_protocol", "windows"),
            [r.config.get("train.eval_protocol", "windows") for r in read_runs(folder / "runs.csv")])


def test_a_new_study_without_the_flag_is_scored_on_every_held_out_document(space_file, tmp_path):
    assert main(tiny(space_file, tmp_path)) == 0
    assert protocols(tmp_path / "t") == ("stratified", ["stratified"])


def test_a_study_resumed_without_the_flag_keeps_the_evaluation_it_recorded(space_file, tmp_path, capsys):
    """A study made with windows (what every study before the new default recorded, by leaving
    the key out) grows a seed under the same command without the flag: the new row is scored as
    the old ones were; the other protocol, asked for, is refused in one line naming it."""
    assert main(tiny(space_file, tmp_path, "--eval-protocol", "windows")) == 0
    assert "eval_protocol" not in json.loads((tmp_path / "t" / "study.json").read_text())["train"]
    assert main(tiny(space_file, tmp_path, "--seeds", "2")) == 0  # argparse: the last --seeds counts
    assert protocols(tmp_path / "t") == ("windows", ["windows", "windows"])
    capsys.readouterr()
    before = contents(tmp_path / "t")
    assert main(tiny(space_file, tmp_path, "--seeds", "2", "--eval-protocol", "stratified")) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "(train.eval_protocol)" in lines[0] and "it was evaluated with --eval-protocol windows" in lines[0]
    assert contents(tmp_path / "t") == before
