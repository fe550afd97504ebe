"""A search from Python (:mod:`searchmaps.search`): the plan the command's flags make,
``Search(plan).run()`` training the study with the local executor in this process's
workers, an :class:`Outcome` holding the rows the command writes bit for bit, a second
run that trains nothing, and bad settings raised (never printed, never an exit)."""

from __future__ import annotations

import pytest

from searchmaps import flops
from searchmaps.cli.run import main, plan_from_flags
from searchmaps.config import ConfigError, ModelConfig
from searchmaps.results import read_runs
from searchmaps.search import Search

# as in test_search (test modules do not import one another): the tiny space's maps of applied depth <= 3
BUDGET = str(flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1")))
MAPS = {"1,1", "2,1", "1,2"}


def flags(space_file, results, *extra):
    return ["--space", str(space_file), "--budget-flops", BUDGET, "--results-dir", str(results),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", "--seeds", "2", "--workers", "2",
            *extra]


def numbers(rows):
    return {(r.map, r.seed, r.rung): (r.val_loss, r.train_loss, r.curve, r.steps, r.tokens) for r in rows}


@pytest.mark.e2e
def test_a_search_run_from_python_writes_the_commands_rows_and_resumes_to_nothing_left(space_file, tmp_path):
    results = tmp_path / "results"
    plan = plan_from_flags(flags(space_file, results, "--study", "api"))
    outcome = Search(plan).run(executor="local")
    assert outcome.study_dir == results / "api" and outcome.trainings == 6 and outcome.closed == 0
    assert sorted((r.map, r.seed) for r in outcome.rows) == sorted((m, s) for m in MAPS for s in range(2))
    assert all(r.ok for r in outcome.rows)
    frame = outcome.frame()
    assert len(frame) == 6 and {"candidate", "map", "seed", "val_loss", "val_ppl", "lr"} <= set(frame.columns)
    assert numbers(read_runs(results / "api" / "runs.csv")) == numbers(outcome.rows)  # the copy the command keeps

    # the command on the same flags, another study: the same numbers, bit for bit
    assert main(flags(space_file, results, "--study", "cli", "--executor", "local")) == 0
    assert numbers(read_runs(results / "cli" / "runs.csv")) == numbers(outcome.rows)

    again = Search(plan_from_flags(flags(space_file, results, "--study", "api"))).run(executor="local")
    assert again.trainings == 0 and again.wall_s == 0.0 and numbers(again.rows) == numbers(outcome.rows)


def test_bad_settings_raise_one_line_and_leave_no_folder(space_file, tmp_path):
    results = tmp_path / "results"
    with pytest.raises(ConfigError, match="--budget-flops"):
        plan_from_flags(["--space", str(space_file), "--budget-flops", "1", "--results-dir", str(results)])
    with pytest.raises(ConfigError, match="--no-such-flag"):  # argparse's own refusal raises, it does not exit
        plan_from_flags(["--space", str(space_file), "--budget-flops", BUDGET, "--no-such-flag"])
    with pytest.raises(ConfigError, match="--executor"):
        Search(plan_from_flags(flags(space_file, results, "--study", "s"))).run(executor="nope")
    assert not (results / "s").exists()


def test_a_results_dir_that_cannot_hold_a_study_is_a_config_error(space_file, tmp_path):
    results = tmp_path / "results"
    results.write_text("a file where the study folder would go")
    with pytest.raises(ConfigError, match="--results-dir .* is not writable"):
        Search(plan_from_flags(flags(space_file, results, "--study", "s"))).open()
