"""The contract of :class:`SupernetMethod`, over every sampling method: its defaults, the
combinations it refuses (one line naming the flag), and that the flags round-trip to the
record the supernet's functions use (the study name, the training keywords)."""

import dataclasses

import pytest

from searchmaps.cli.flags import supernet_method
from searchmaps.cli.run import build_parser
from searchmaps.config import ConfigError
from searchmaps.supernet.method import SAMPLINGS, SPLIT_BUDGETS, SupernetMethod

BASE = ["--budget-flops", "1e7"]


def method_of(*flags: str) -> SupernetMethod:
    return supernet_method(build_parser().parse_args([*BASE, *flags]))


def test_the_defaults_are_sandwich_with_distillation_and_uniform_undistilled_when_split():
    assert SupernetMethod() == SupernetMethod.resolve() == method_of()
    assert (method_of().sampling, method_of().distill, method_of().split) == ("sandwich", True, "none")
    split = method_of("--split", "depth")
    assert (split.sampling, split.distill, split.split, split.split_budget) == ("uniform", False, "depth", "shared")
    assert not SupernetMethod.resolve().distill_given and SupernetMethod.resolve(distill=True).distill_given


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_each_sampling_distills_by_default_only_when_sandwich(sampling):
    m = method_of("--sampling", sampling)
    assert m.sampling == sampling and m.distill is (sampling == "sandwich")
    assert method_of("--sampling", sampling, "--distill").distill is True
    assert method_of("--sampling", sampling, "--no-distill").distill is False


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("budget", SPLIT_BUDGETS)
def test_each_sampling_splits_by_depth_unless_it_is_sandwich(sampling, budget):
    flags = ("--sampling", sampling, "--split", "depth", "--split-budget", budget)
    if sampling == "sandwich":
        with pytest.raises(ConfigError, match="^--sampling sandwich .* --split depth"):
            method_of(*flags)
        return
    m = method_of(*flags)
    assert (m.split, m.split_budget) == ("depth", budget)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_the_record_refuses_what_the_flags_cannot_mean_naming_the_flag(sampling):
    ok = SupernetMethod.resolve(sampling)
    for change, flag in [({"sampling": "greedy"}, "--sampling"), ({"split": "width"}, "--split"),
                         ({"split_budget": "half"}, "--split-budget"), ({"finetune_tokens": -1}, "--finetune-tokens"),
                         ({"landmarks": -2}, "--landmarks"), ({"distill": "yes"}, "--distill")]:
        with pytest.raises(ConfigError, match=f"^{flag} "):
            dataclasses.replace(ok, **change)
    with pytest.raises(ConfigError, match="^--finetune-tokens must be positive, got 0"):
        SupernetMethod.resolve(sampling, finetune_tokens=0)  # given as 0: leave the flag out instead
    assert SupernetMethod.resolve(sampling, finetune_tokens=None).finetune_tokens == 0


@pytest.mark.parametrize("flags, said", [(["--supernet-seeds", "0"], "--supernet-seeds must be at least 1, got 0"),
                                         (["--keep", "0"], "--keep must be at least 1, got 0")])
def test_the_counts_are_checked_with_the_method(flags, said):
    with pytest.raises(ConfigError, match=f"^{said}$"):
        method_of(*flags)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_residual_that_scales_by_depth_is_refused_naming_distill_only_when_it_was_asked_for(sampling):
    SupernetMethod.resolve(sampling).check_residual("prenorm")
    with pytest.raises(ConfigError, match="^--residual: --residual deeploop"):
        SupernetMethod.resolve(sampling).check_residual("deeploop")
    with pytest.raises(ConfigError, match="^--distill: --residual deeploop"):
        SupernetMethod.resolve(sampling, distill=True).check_residual("deeploop")


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_the_flags_round_trip_to_what_the_supernet_functions_take(sampling):
    m = method_of("--sampling", sampling, "--distill")
    assert m.training == {"distill": True, "finetune_tokens": 0}  # train_supernet's keywords
    assert dataclasses.replace(m, finetune_tokens=2048).training == {"distill": True, "finetune_tokens": 2048}
    assert m.name() == f"{sampling}-distill"
    assert dataclasses.replace(m, distill=False, finetune_tokens=100000).name() == f"{sampling}-ft1e05"
    assert SupernetMethod(**{f.name: getattr(m, f.name) for f in dataclasses.fields(m)}) == m  # a plain record


def test_the_study_name_of_a_supernet_is_the_one_rule_of_plan(tmp_path):
    """default_study_name: the supernet's name from its method, as searchmaps.supernet named it."""
    from searchmaps.plan import SearchPlan, default_study_name
    from searchmaps.spaces import load_space

    plan = SearchPlan(load_space("ilr4"), 1.2e7, "-")
    assert default_study_name(plan) == "ilr4-rope-b1.2e07-tok3e05"  # a search drops the +
    assert default_study_name(plan, SupernetMethod()) == "ilr4-supernet-sandwich-distill-b1.2e+07"
    split = SupernetMethod.resolve("fair", split="depth", finetune_tokens=512)
    assert default_study_name(dataclasses.replace(plan, lr_grid=(1e-3, 3e-3)), split) == \
        "ilr4-supernet-fair-ft5e02-lrfit-split-depth-b1.2e+07"
