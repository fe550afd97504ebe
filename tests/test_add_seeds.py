"""Adding seeds to a study: the same command with a larger ``--seeds`` trains only the new
seeds, tells every candidate again with all of them and records the extension; fewer seeds,
or more in a racing study, is one line and exit 2. And the terminal's last lines: the seeds
that would separate the top group, with the command that adds them.

The study side runs on a real SQLite storage without Ray; the search itself (marked e2e)
on the shared Ray head, as tests/test_search.py does."""

import dataclasses
import json
import math

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers import record
from optuna.trial import TrialState

from searchmaps import stats
from searchmaps.config import ConfigError
from searchmaps.ledger import CandidateState, Ledger
from searchmaps.plan import SearchPlan
from searchmaps.plan_parts import Analysis
from searchmaps.report import write_report
from searchmaps.report.terminal import seeds_lines, with_seeds
from searchmaps.results import read_runs
from searchmaps.run import main
from searchmaps.scheduler import Finished
from searchmaps.spaces import load_space
from searchmaps.stats import DEFAULT_RULE
from searchmaps.study import SearchStudy


def plan_of(space_file, tmp_path, **kw):
    return SearchPlan(space=load_space(str(space_file)), study="p", results_dir=tmp_path, budget_flops=1e12, **kw)


def study_of(plan):
    ledger = Ledger(plan.storage_url, plan.study)
    ledger.register()
    return SearchStudy(plan, ledger)


def finished(cand, seeds):
    return Finished(cand, tuple(record(cand, s, ppl=10.0 + s) for s in range(seeds)))


# ---------------------------------------------------------------------------- the study side, no Ray


def test_more_seeds_reopen_told_candidates_and_tell_them_again_with_every_seed(space_file, tmp_path):
    (tmp_path / "p").mkdir()
    plan = plan_of(space_file, tmp_path, seeds=2)
    first = study_of(plan)
    cand = plan.candidates[0]
    old = first.open(cand)
    assert first.tell(finished(cand, 2))
    assert first.ledger.entry(cand.label).state == CandidateState.TOLD
    assert first.seeds_history is None and "seeds_history" not in first.study.user_attrs["protocol"]

    more = study_of(plan_of(space_file, tmp_path, seeds=3))
    assert more.ledger.entry(cand.label).state == CandidateState.OPEN  # told again once its third seed is in
    protocol = more.study.user_attrs["protocol"]
    assert protocol["seeds"] == 3 and [h["seeds"] for h in protocol["seeds_history"]] == [2, 3]
    assert more.seeds_history == protocol["seeds_history"] and all(h["at"] for h in protocol["seeds_history"])
    assert more.tell(finished(cand, 3))
    entry = more.ledger.entry(cand.label)
    assert entry.state == CandidateState.TOLD and entry.trial_number != old
    new = more.study.trials[entry.trial_number]
    assert new.state == TrialState.COMPLETE and new.user_attrs["seeds"] == [0, 1, 2]
    assert new.user_attrs["extends_trial"] == old and new.values[0] == pytest.approx(11.0)
    assert more.study.trials[old].user_attrs["seeds"] == [0, 1]  # the old trial as it was (Optuna keeps it)

    again = study_of(plan_of(space_file, tmp_path, seeds=3))  # the same count again: nothing reopened
    assert again.ledger.entry(cand.label).state == CandidateState.TOLD
    assert [h["seeds"] for h in again.study.user_attrs["protocol"]["seeds_history"]] == [2, 3]


def test_fewer_seeds_or_more_seeds_in_a_racing_or_promotion_study_are_refused_and_change_nothing(space_file, tmp_path):
    (tmp_path / "p").mkdir()
    study = study_of(plan_of(space_file, tmp_path, seeds=3))
    cand = study.plan.candidates[0]
    study.open(cand)
    study.tell(finished(cand, 3))
    with pytest.raises(ConfigError, match=r"^--seeds 2: --study p has 3 seeds; .*--seeds 3 or more"):
        study_of(plan_of(space_file, tmp_path, seeds=2))
    assert study.study.user_attrs["protocol"]["seeds"] == 3
    assert study.ledger.entry(cand.label).state == CandidateState.TOLD

    (tmp_path / "r").mkdir()
    race = SearchPlan(space=load_space(str(space_file)), study="r", results_dir=tmp_path, budget_flops=1e12,
                      seeds=3, analysis=Analysis(racing=True, race_start_seeds=2))
    study_of(race)
    with pytest.raises(ConfigError, match=r"^--seeds 4: --study r is a racing study"):
        study_of(dataclasses.replace(race, seeds=4))
    assert optuna.load_study(study_name="r", storage=race.storage_url).user_attrs["protocol"]["seeds"] == 3
    (tmp_path / "l").mkdir()
    ladder = SearchPlan(space=load_space(str(space_file)), study="l", results_dir=tmp_path, budget_flops=1e12,
                        seeds=2, ladder=(1024, 2048), analysis=Analysis(promote=True))
    study_of(ladder)
    with pytest.raises(ConfigError, match=r"^--seeds 3: --study l is a --promote study of 2 seeds"):
        study_of(dataclasses.replace(ladder, seeds=3))
    space = study.plan.space
    longer = dataclasses.replace(space, train=dataclasses.replace(space.train, tokens=4096))
    with pytest.raises(ConfigError, match=r"other settings \(seeds, tokens"):  # not seeds alone: refused as before
        study_of(dataclasses.replace(study.plan, seeds=4, space=longer))
    assert study.study.user_attrs["protocol"]["seeds"] == 3


# ---------------------------------------------------------------------------- the terminal's last lines


def two_close_maps(seeds=3, gap=0.02, sd=0.05):
    rng = np.random.default_rng(1)
    shared = rng.normal(size=seeds)
    rows = [{"candidate": c, "seed": s, "val_loss": 3.0 + d + sd * shared[s] + sd * rng.normal()}
            for s in range(seeds) for c, d in {"1,1|rope": 0.0, "2,1|rope": gap}.items()]
    return pd.DataFrame([{**r, "val_ppl": math.exp(r["val_loss"])} for r in rows])


def test_the_last_lines_say_how_many_seeds_would_separate_the_top_group_and_the_command():
    ok = two_close_maps()
    mat = stats.to_matrix(ok, "val_loss")
    assert len(stats.top_group(mat, DEFAULT_RULE, 0.05)) == 2
    gap = float(mat.mean()["2,1|rope"] - mat.mean()["1,1|rope"])
    n = stats.seeds_needed(mat, gap, DEFAULT_RULE, 0.05, max_seeds=stats.get_rule(DEFAULT_RULE).max_seeds)
    assert n is not None and n > 3
    command = ["python", "-m", "searchmaps.run", "--space", "ilr4", "--seeds", "3", "--study", "x y"]
    lines = seeds_lines(ok, DEFAULT_RULE, 0.05, command)
    assert lines[0].startswith(f"seeds to separate the top group: {n} would rule out 2,1|rope")
    assert lines[1] == (f"add them (the seeds trained are kept): python -m searchmaps.run --space ilr4 --seeds {n} "
                        f"--study 'x y'")
    racing = seeds_lines(ok, DEFAULT_RULE, 0.05, command, fixed="racing")
    assert racing[1] == f"a racing study takes no more seeds: add --seeds {n} with another --study"
    far = two_close_maps(gap=0.5)  # one map in the top group: nothing to add
    assert len(stats.top_group(stats.to_matrix(far, "val_loss"), DEFAULT_RULE, 0.05)) == 1
    assert seeds_lines(far, DEFAULT_RULE, 0.05, command) == []


def test_with_seeds_leaves_one_seeds_flag_or_appends_one():
    assert with_seeds(["bash", "dev.sh", "demo"], 5) == ["bash", "dev.sh", "demo", "--seeds", "5"]
    # --seeds given twice, in either spelling, or abbreviated as argparse takes it: one --seeds, where the first was
    assert with_seeds(["x", "--seeds=2", "--seeds", "3", "--study", "s"], 7) == ["x", "--seeds", "7", "--study", "s"]
    assert with_seeds(["x", "--seeds", "2", "--study", "s", "--seeds", "3"], 7) == ["x", "--seeds", "7", "--study", "s"]
    assert with_seeds(["x", "--seeds=3", "--study", "s"], 7) == ["x", "--seeds", "7", "--study", "s"]
    assert with_seeds(["x", "--seed", "3", "--see=4", "--search-seed", "1"], 7) == ["x", "--seeds", "7",
                                                                                    "--search-seed", "1"]


@pytest.mark.parametrize("wrapper, argv", [
    (None, ["--space", "s.toml", "--seeds", "2", "--seeds", "3"]),
    (None, ["--space", "s.toml", "--seeds=3"]),
    ("bash dev.sh demo --seeds 5", ["--space", "ilr4", "--seeds", "3", "--seeds", "5"]),  # what dev.sh demo passes
    ("bash dev.sh demo --seeds=5 --seeds 6", ["--seeds", "3", "--seeds=5", "--seeds", "6"]),
])
def test_the_add_seeds_command_has_exactly_one_seeds_flag(monkeypatch, wrapper, argv):
    from searchmaps.cli.common import command_words

    if wrapper is None:
        monkeypatch.delenv("SEARCHMAPS_COMMAND", raising=False)
    else:
        monkeypatch.setenv("SEARCHMAPS_COMMAND", wrapper)
    words = with_seeds(command_words("searchmaps.run", argv), 9)
    assert sum(w.startswith("--see") for w in words) == 1 and words[words.index("--seeds") + 1] == "9"
    assert words[:3] == (["bash", "dev.sh", "demo"] if wrapper else ["python", "-m", "searchmaps.run"])
    # the seeds flag is in place; everything else the user gave is kept in its order
    given = [w for w in command_words("searchmaps.run", argv) if not w.startswith("--seeds") and w not in "2356"]
    assert [w for w in words if w not in ("--seeds", "9")] == given


# ---------------------------------------------------------------------------- the search, on Ray


BUDGET_MAPS = {"1,1", "2,1", "1,2"}


@pytest.mark.e2e
def test_the_same_command_with_more_seeds_trains_only_the_new_seed(ray_cluster, space_file, tmp_path, capsys):
    from test_search import common, trials

    results = tmp_path / "results"
    argv = common(space_file, results, "--study", "s", "--ray-address", ray_cluster)
    assert main([*argv, "--seeds", "2"]) == 0
    before = (results / "s" / "runs.csv").read_bytes()
    assert len(read_runs(results / "s" / "runs.csv")) == 6
    capsys.readouterr()

    assert main([*argv, "--seeds", "3"]) == 0
    err = capsys.readouterr().err
    assert "3 trainings in" in err  # the new seed of each of the 3 candidates, nothing else
    rows = read_runs(results / "s" / "runs.csv")
    assert len(rows) == 9 and (results / "s" / "runs.csv").read_bytes().startswith(before)  # kept as they were
    assert sorted((r.map, r.seed) for r in rows) == sorted((m, s) for m in BUDGET_MAPS for s in range(3))
    for m in BUDGET_MAPS:  # the seed count is not in the config hash: a candidate's seeds share it
        assert len({r.config_hash for r in rows if r.map == m}) == 1

    ts = trials(results, "s")
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    done = [t for t in ts if t.state == TrialState.COMPLETE and t.user_attrs["seeds"] == [0, 1, 2]]
    assert sorted(t.user_attrs["map"] for t in done) == sorted(BUDGET_MAPS)  # one current trial per candidate
    old = [t for t in ts if t.state == TrialState.COMPLETE and t.user_attrs["seeds"] == [0, 1]]
    assert sorted(t.number for t in old) == sorted(t.user_attrs["extends_trial"] for t in done)
    for t in done:
        mine = [r.val_ppl for r in rows if r.map == t.user_attrs["map"]]
        assert t.values[0] == pytest.approx(sum(mine) / 3)

    info = json.loads((results / "s" / "study.json").read_text())
    assert info["seeds"] == 3 and [h["seeds"] for h in info["seeds_history"]] == [2, 3]
    report = write_report(results / "s")
    assert set(report.summary["n_seeds"]) == {3}  # the analysis uses every seed
    md = (results / "s" / "report.md").read_text()
    assert "Seeds: 3 per candidate" in md and "larger `--seeds`: 2 from " in md and ", then 3 from " in md

    files = {n: (results / "s" / n).read_bytes() for n in ("runs.csv", "study.json")}
    assert main([*argv, "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seeds 1: --study s has 3 seeds" in err[0]
    assert {n: (results / "s" / n).read_bytes() for n in files} == files  # nothing written
    assert len(trials(results, "s")) == len(ts)
    assert optuna.load_study(study_name="s", storage=f"sqlite:///{results}/s/optuna.db").user_attrs[
        "protocol"]["seeds"] == 3


def test_the_command_printed_back_is_the_wrappers_or_the_module_with_its_arguments(monkeypatch):
    from searchmaps.cli.common import command_words

    monkeypatch.delenv("SEARCHMAPS_COMMAND", raising=False)
    assert command_words("searchmaps.run", ["--seeds", "2"]) == ["python", "-m", "searchmaps.run", "--seeds", "2"]
    monkeypatch.setenv("SEARCHMAPS_COMMAND", "bash dev.sh demo --study 'a b' ")  # dev.sh demo sets it
    assert command_words("searchmaps.run", ["--seeds", "3"]) == ["bash", "dev.sh", "demo", "--study", "a b"]
