"""The sampler contract, run over every registered sampler: the command line offers it, it
makes an Optuna sampler, and a tiny real search with it (the session's Ray instance, a real
SQLite storage) trains only maps of the space within the budget, each candidate once, and
tells each one's trial once."""

import json

import optuna
import pytest
from optuna.trial import TrialState

from searchmaps import flops
from searchmaps.config import ConfigError, ModelConfig
from searchmaps.plan import SearchPlan
from searchmaps.plan_parts import Analysis
from searchmaps.results import read_runs
from searchmaps.run import main
from searchmaps.samplers import AUTO, SAMPLER_CHOICES, SAMPLERS
from searchmaps.spaces import load_space
from searchmaps.study import make_sampler

BUDGET = flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1"))
MAPS = {"1,1", "2,1", "1,2"}  # the tiny space's maps within BUDGET (block:2 is over it)
NAMES = list(SAMPLERS)


def test_the_command_line_offers_every_sampler_and_auto(space_file, tmp_path, capsys):
    assert SAMPLER_CHOICES == (AUTO, *NAMES) and {"grid", "random", "tpe", "nsga2"} <= set(NAMES)
    common = ["--space", str(space_file), "--budget-flops", str(BUDGET), "--results-dir", str(tmp_path), "--dry-run"]
    for name in SAMPLER_CHOICES:
        assert main([*common, "--sampler", name]) == 0
    with pytest.raises(SystemExit) as exc:
        main([*common, "--sampler", "bayes"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and all(repr(n) in err for n in SAMPLER_CHOICES), err


@pytest.mark.parametrize("name", NAMES)
def test_the_plan_takes_it_and_the_study_makes_it(name, space_file, tmp_path):
    plan = SearchPlan(space=load_space(str(space_file)), budget_flops=float(BUDGET), study="p",
                      results_dir=tmp_path, sampler=name, trials=2, seeds=1)
    assert plan.sampler == name and plan.max_candidates == 2
    assert isinstance(make_sampler(plan), optuna.samplers.BaseSampler)
    if SAMPLERS[name].fixed:
        assert len(plan.candidates) == 2 and {str(c.reuse) for c in plan.candidates} <= MAPS
        assert SearchPlan(space=plan.space, budget_flops=plan.budget_flops, study="p", results_dir=tmp_path,
                          sampler=name, trials=2, seeds=1).candidates == plan.candidates  # reproducible
    else:
        assert plan.candidates is None  # it proposes one by one
        with pytest.raises(ConfigError, match="--racing needs a fixed candidate list"):
            SearchPlan(space=plan.space, budget_flops=plan.budget_flops, study="p", results_dir=tmp_path,
                       sampler=name, seeds=2, analysis=Analysis(racing=True, race_start_seeds=2))


@pytest.mark.parametrize("name", NAMES)
def test_a_tiny_search(name, ray_cluster, space_file, tmp_path):
    results = tmp_path / "results"
    argv = ["--space", str(space_file), "--budget-flops", str(BUDGET), "--results-dir", str(results),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", "--seeds", "1", "--study", name,
            "--sampler", name, "--trials", "2", "--ray-address", ray_cluster]
    assert main(argv) == 0
    assert json.loads((results / name / "study.json").read_text())["sampler"] == name
    ts = optuna.load_study(study_name=name, storage=f"sqlite:///{results}/{name}/optuna.db").get_trials()
    done = [t.user_attrs["map"] for t in ts if t.state == TrialState.COMPLETE]
    assert len(done) == len(set(done)) == 2 and set(done) <= MAPS  # two distinct maps of the space, each told once
    assert all(t.state == TrialState.PRUNED for t in ts if t.state != TrialState.COMPLETE)  # proposals it refused
    rows = read_runs(results / name / "runs.csv")
    assert sorted((r.map, r.seed) for r in rows) == sorted((m, 0) for m in done)  # each trained once
    assert all(r.status.value == "ok" and r.pe == "rope" for r in rows)
