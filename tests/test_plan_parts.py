"""The plan's concerns: Resources and Analysis check themselves; what a resumed study must
share (the protocol) reads neither Resources nor the analysis' significance settings; the
command's flags land in the part they belong to."""

import dataclasses

import pytest

from searchmaps.cli.run import build_parser, build_plan
from searchmaps.config import ConfigError
from searchmaps.plan import SearchPlan
from searchmaps.plan_parts import Analysis, Resources, auto_pack_seeds
from searchmaps.spaces import load_space


@pytest.mark.parametrize("kw, flag", [
    (dict(workers=0), "--workers"), (dict(threads=0), "--threads"), (dict(workers=True), "--workers"),
    (dict(save_every_s=-60), "--save-every"), (dict(cpus_per_trial=0), "--cpus-per-trial"),
    (dict(gpus_per_trial=1), "--gpus-per-trial 1 needs a CUDA device"),
    (dict(gpus_per_trial=1.5, device="cuda"), "above 1 must be a whole number"),
    (dict(pack_seeds="many"), "--pack-seeds"), (dict(pack_candidates=0), "--pack-candidates"),
])
def test_resources_refuse_a_bad_setting_naming_its_flag(kw, flag):
    with pytest.raises(ConfigError, match=flag):
        Resources(**kw)


@pytest.mark.parametrize("kw, flag", [
    (dict(alpha=0), "--alpha"), (dict(alpha=1.5), "--alpha"), (dict(top_group_rule="best"), "--top-group"),
    (dict(target=-1.0), "--target-tokens"), (dict(target=float("nan")), "--target-tokens"),
])
def test_analysis_refuses_a_bad_setting_naming_its_flag(kw, flag):
    with pytest.raises(ConfigError, match=flag):
        Analysis(**kw)


def test_resources_resolve_packing_for_their_device():
    assert Resources(pack_seeds="auto").pack_seeds == auto_pack_seeds("cpu") == 1
    assert Resources(pack_seeds="auto", device="cuda").pack_seeds == auto_pack_seeds("cuda") > 1
    assert Resources(pack_seeds="off", pack_candidates="off").pack_candidates == 1
    assert Analysis(planned=["2,1/1,1"]).planned == ("2,1/1,1",)  # a list becomes a tuple


def test_the_protocol_does_not_read_resources_and_cross_checks_stay_on_the_plan(tmp_path):
    base = SearchPlan(space=load_space("ilr4"), budget_flops=3.7e6, study="p", results_dir=tmp_path, seeds=3)
    moved = dataclasses.replace(base, resources=Resources(workers=7, threads=2, save_every_s=0, storage="sqlite:///x.db"))
    assert moved.protocol() == base.protocol() and moved.storage_url == "sqlite:///x.db" and base.default_storage
    assert base.spec(base.candidates[0], 0).threads == 1 and moved.spec(moved.candidates[0], 0).threads == 2
    raced = dataclasses.replace(base, analysis=Analysis(racing=True, race_start_seeds=2))
    assert raced.protocol()["racing"] and not base.protocol()["racing"]
    with pytest.raises(ConfigError, match=r"--race-start-seeds must be between 2 and --seeds \(3\)"):
        dataclasses.replace(base, analysis=Analysis(racing=True, race_start_seeds=4))  # crosses analysis and seeds
    with pytest.raises(ConfigError, match="--promote needs a horizon ladder"):
        dataclasses.replace(base, analysis=Analysis(promote=True))  # crosses analysis and the ladder


def test_the_commands_flags_land_in_their_part(tmp_path):
    args = build_parser().parse_args(["--space", "ilr4", "--budget-flops", "3.7e6", "--seeds", "3", "--dry-run",
                                      "--results-dir", str(tmp_path), "--workers", "3", "--threads", "2",
                                      "--save-every", "0", "--alpha", "0.01", "--top-group", "holm",
                                      "--racing", "--race-start-seeds", "2", "--planned", "2,1,1,1/1,1,1,1",
                                      "--attention", "sdpa"])
    plan = build_plan(args)
    assert (plan.resources.workers, plan.resources.threads, plan.resources.save_every_s) == (3, 2, 0)
    a = plan.analysis
    assert (a.alpha, a.top_group_rule, a.racing, a.race_start_seeds, a.planned) == \
        (0.01, "holm", True, 2, ("2,1,1,1/1,1,1,1",))
