"""The study folder: a study name is one folder under --results-dir, a failing check makes
nothing, and a report that cannot be written, or a signal while it is written, never
turns a finished search into a traceback."""

import resource
import shutil
from pathlib import Path

import pytest
from helpers import run_cli, run_cli_warm

from searchmaps import flops
from searchmaps.config import ModelConfig
from searchmaps.results import read_runs
from searchmaps.run import main

TINY = """
name = "{name}"
pe = ["rope"]
seeds = 2
[model]
n_layers = 2
d_model = 32
n_heads = 2
seq_len = 32
[train]
tokens = 2048
batch_size = 4
eval_tokens = 256
[maps]
repeats = [1, 3]
"""
BUDGET = str(flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1")))


def tree(root: Path) -> set[str]:
    """Every path under ``root``, relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def space(folder: Path, name: str = "tiny") -> Path:
    path = folder / "tiny.toml"
    path.write_text(TINY.format(name=name))
    return path


def args_for(space_file, results, *extra):
    return ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", *extra]


def one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------- a study name is a name


@pytest.mark.parametrize("name", ["../x", "a/../../../x", "..", "ABSOLUTE", "", ".hidden", "a\\b", "x/y"])
def test_a_study_name_that_is_a_path_is_refused_and_nothing_is_made(tmp_path, capsys, name):
    """Without the check, optuna.db, runs.csv and study.json went to results/<name>/, wherever
    that resolves: outside --results-dir for ../x, a/../../../x, .. and an absolute path."""
    name = str(tmp_path / "abs") if name == "ABSOLUTE" else name
    results = tmp_path / "deep" / "er" / "results"
    spaces = tmp_path / "spaces"
    spaces.mkdir()
    sf = space(spaces)
    before = tree(tmp_path)
    # an unreachable Ray address: without the check, the folder was made before that failed
    assert main(args_for(sf, results, "--study", name, "--ray-address", "127.0.0.1:1")) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"searchmaps.run: error: --study {name!r} is not a study name")
    assert tree(tmp_path) == before  # nothing made, inside --results-dir or out


@pytest.mark.parametrize("name", ["../../escape", "", "ABSOLUTE", ".."])
def test_a_space_file_whose_name_is_a_path_is_refused_and_nothing_is_made(tmp_path, ray_env, name):
    """The default study name starts with the space's name: a space file someone hands you
    must not reach outside --results-dir with no flag at all."""
    name = str(tmp_path / "escape") if name == "ABSOLUTE" else name
    results = tmp_path / "a" / "b" / "results"
    sf = space(tmp_path, name)
    before = tree(tmp_path)
    out = run_cli_warm("run", *args_for(sf, results, "--workers", "1", "--ray-address", "127.0.0.1:1"), timeout=300,
                  env=ray_env)
    assert out.returncode == 2, out.stderr
    line = one_line(out.stderr)
    assert f"{sf}: name {name!r}" in line and "--ray-address" not in line
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", ["../x", "ABSOLUTE", ".."])
def test_the_supernet_command_refuses_the_same_names(tmp_path, capsys, name):
    from searchmaps.supernet.__main__ import main as supernet_main

    name = str(tmp_path / "abs") if name == "ABSOLUTE" else name
    sf = space(tmp_path)
    before = tree(tmp_path)
    assert supernet_main(args_for(sf, tmp_path / "r" / "results", "--study", name)) == 2
    assert f"--study {name!r} is not a study name" in one_line(capsys.readouterr().err)
    assert tree(tmp_path) == before


def test_a_good_study_name_with_dots_inside_is_kept(finished):
    """The module's finished study is named tiny-b1.2e7 (the default name's form): its
    folder, study.json, every row and the Optuna study carry that name, dots and all."""
    import json

    import optuna

    folder, argv = finished
    assert argv[argv.index("--study") + 1] == "tiny-b1.2e7"
    assert folder.name == "tiny-b1.2e7" and sorted(p.name for p in folder.parent.iterdir()) == ["tiny-b1.2e7"]
    assert json.loads((folder / "study.json").read_text())["study"] == "tiny-b1.2e7"
    assert {r.study for r in read_runs(folder / "runs.csv")} == {"tiny-b1.2e7"}
    assert optuna.study.get_all_study_names(f"sqlite:///{folder / 'optuna.db'}") == ["tiny-b1.2e7"]


# ---------------------------------------------------------------------------- a failing check makes nothing


@pytest.mark.parametrize("extra, flag", [
    (["--ray-address", "127.0.0.1:1"], "--ray-address"),
    (["--storage", "postgresql://u:pw@127.0.0.1:1/db"], "--storage"),
    (["--prescreen", "supernet", "--maps", "1,1"], "--prescreen"),
    (["--prescreen", "supernet", "--keep", "0"], "--keep"),
])
def test_a_failing_check_leaves_no_study_folder(tmp_path, capsys, extra, flag):
    sf = space(tmp_path)
    results = tmp_path / "results"
    assert main(args_for(sf, results, "--study", "s", *extra)) == 2
    assert flag in one_line(capsys.readouterr().err)
    assert not (results / "s").exists()


def test_a_check_that_fails_after_the_folder_is_made_takes_it_back_but_never_an_old_one(tmp_path, capsys):
    """A shared storage holding the study with other settings is only seen once the study is
    opened, after the folder is made: the new folder goes, an existing one stays."""
    sf = space(tmp_path)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = args_for(sf, tmp_path / "a", "--study", "s", "--storage", url, "--seeds", "2", "--no-report")
    # the study as another machine registered it, with 2 seeds
    from searchmaps.ledger import Ledger, check_storage
    from searchmaps.cli.run import build_parser as build_search_parser, build_plan
    from searchmaps.study import SearchStudy

    plan = build_plan(build_search_parser().parse_args(first))
    SearchStudy(plan, Ledger(check_storage(url), "s"))
    # fewer seeds than the study has (more would add seeds to it: docs/search.md#add-seeds)
    other = args_for(sf, tmp_path / "b", "--study", "s", "--storage", url, "--seeds", "1", "--no-report")
    assert main(other) == 2
    assert "--seeds 1: --study s has 2 seeds" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "b" / "s").exists()
    (tmp_path / "b" / "s").mkdir()
    (tmp_path / "b" / "s" / "notes.txt").write_text("mine")
    assert main(other) == 2
    assert (tmp_path / "b" / "s" / "notes.txt").read_text() == "mine"
    (tmp_path / "b" / "s" / "notes.txt").unlink()
    assert main(other) == 2
    assert (tmp_path / "b" / "s").is_dir()  # there before this command: never removed, even empty


def test_a_lock_file_that_is_a_folder_is_one_line_naming_it(tmp_path, capsys):
    sf = space(tmp_path)
    lock = tmp_path / "results" / "s" / "runs.csv.lock"
    lock.mkdir(parents=True)
    assert main(args_for(sf, tmp_path / "results", "--study", "s", "--workers", "1", "--no-report")) == 2
    line = one_line(capsys.readouterr().err)
    assert str(lock) in line and "remove it" in line
    assert not list((tmp_path / "results").rglob("ray"))  # before Ray started


def test_block_1_is_not_a_map(tmp_path, capsys):
    sf = space(tmp_path)
    assert main(args_for(sf, tmp_path / "r", "--maps", "block:1", "--dry-run")) == 2
    line = one_line(capsys.readouterr().err)
    assert "--maps" in line and "block:K needs K >= 2" in line


# ---------------------------------------------------------------------------- the report and signals after the search


@pytest.fixture(scope="module")
def finished(tmp_path_factory, ray_cluster):
    """A finished study (2 maps x 2 seeds, really trained) and the arguments that made it;
    a test copies it and runs the same command again, which trains nothing and goes
    straight to the summary and the report (no Ray)."""
    root = tmp_path_factory.mktemp("finished")
    sf = space(root)
    argv = args_for(sf, root / "results", "--study", "tiny-b1.2e7", "--seeds", "2", "--maps", "1,1", "2,1", "--workers", "2")
    assert main([*argv, "--no-report", "--ray-address", ray_cluster]) == 0
    return root / "results" / "tiny-b1.2e7", argv


def copy_of(finished, tmp_path):
    folder, argv = finished
    results = tmp_path / "results"
    shutil.copytree(folder, results / folder.name)
    i = argv.index("--results-dir")
    return results / folder.name, argv[:i + 1] + [str(results)] + argv[i + 2:]


def test_a_report_that_cannot_be_written_does_not_fail_the_search(finished, tmp_path, capsys):
    folder, argv = copy_of(finished, tmp_path)
    rows = (folder / "runs.csv").read_bytes()
    (folder / "report.html").mkdir()  # os.replace onto it fails: IsADirectoryError on a real path
    assert main(argv) == 0
    err = capsys.readouterr().err
    bad = [ln for ln in err.splitlines() if "no report" in ln]
    assert len(bad) == 1 and "Is a directory" in bad[0] and str(folder / "report.html") in bad[0], err
    assert "Traceback" not in err and not [ln for ln in err.splitlines() if ln.startswith("report: ")]
    assert (folder / "runs.csv").read_bytes() == rows and len(read_runs(folder / "runs.csv")) == 4


def _file_size_limit():
    # a file may not grow past 1 MB: report.html (~5 MB, plotly inline) hits it on a real
    # write, as on a full disk (EFBIG instead of ENOSPC; Python ignores SIGXFSZ)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_a_report_on_a_full_disk_is_one_line_and_exit_0(finished, tmp_path, ray_env):
    folder, argv = copy_of(finished, tmp_path)
    assert max(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 1 << 20  # the study itself fits
    rows = (folder / "runs.csv").read_bytes()
    out = run_cli("run", *argv, timeout=300, env=ray_env, preexec_fn=_file_size_limit)
    assert out.returncode == 0, out.stderr
    bad = [ln for ln in out.stderr.splitlines() if "no report" in ln]
    assert len(bad) == 1 and "could not be written" in bad[0] and "File too large" in bad[0], out.stderr
    assert not [ln for ln in out.stderr.splitlines() if ln.startswith("report: ")]
    assert "Traceback" not in out.stderr and "top group" in out.stdout  # the search's answer is there
    assert (folder / "runs.csv").read_bytes() == rows
    assert not (folder / "report.html").exists() and not list(folder.glob("report.html.*.tmp"))


@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_while_the_report_is_written_exits_with_its_code(finished, tmp_path, ray_env, sig, code):
    """The handlers stay until the report is written: SIGTERM there once killed the process
    with no word, and Ctrl-C was swallowed."""
    folder, argv = copy_of(finished, tmp_path)
    rows = (folder / "runs.csv").read_bytes()
    out = run_cli("run", *argv, timeout=300, env=dict(ray_env, SEARCHMAPS_KILL_AT=f"report:1:{sig}"))
    assert out.returncode == code, out.stderr
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
    assert f"interrupted ({sig})" in lines[-1] and "run the same command again" in lines[-1], out.stderr
    assert "Traceback" not in out.stderr and "KeyboardInterrupt" not in out.stderr
    assert (folder / "runs.csv").read_bytes() == rows and not (folder / "report.html").exists()
    again = run_cli("run", *argv, timeout=300, env=ray_env)
    assert again.returncode == 0 and (folder / "report.html").is_file(), again.stderr


def test_the_report_command_on_an_unwritable_report_is_one_line(finished, tmp_path):
    folder, _ = copy_of(finished, tmp_path)
    (folder / "report.html").mkdir()
    proc = run_cli_warm("report", folder, "--no-attach", timeout=300)
    assert proc.returncode == 1 and "report.html" in one_line(proc.stderr)
