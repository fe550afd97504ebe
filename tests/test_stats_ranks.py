"""Rank agreement across the rungs of a horizon ladder and against a published ranking, on tables checked by hand."""

import numpy as np
import pandas as pd
import pytest
from helpers import ladder_rows
from scipy import stats

from searchmaps.stats import agreement_with, rank_by_rung, rank_stability


def test_a_stable_ranking_has_tau_one_and_a_reversed_one_minus_one():
    same = ladder_rows({"a": [3.0, 2.5, 2.0], "b": [3.1, 2.6, 2.1], "c": [3.2, 2.7, 2.2]})
    st = rank_stability(same, n_boot=200)
    assert list(zip(st["rung_a"], st["rung_b"])) == [(0, 1), (0, 2), (1, 2)]
    assert (st["kendall_tau"] == 1).all() and (st["spearman_rho"] == 1).all()
    assert (st["kendall_tau_low"] == 1).all()  # seed offsets are shared: every resample agrees
    flipped = ladder_rows({"a": [3.0, 2.5, 2.2], "b": [3.1, 2.6, 2.1], "c": [3.2, 2.7, 2.0]})
    st = rank_stability(flipped, n_boot=200)
    assert st.loc[(st.rung_a == 0) & (st.rung_b == 2), "kendall_tau"].item() == -1
    assert st.loc[(st.rung_a == 0) & (st.rung_b == 1), "kendall_tau"].item() == 1


def test_tau_matches_scipy_and_its_interval_covers_it_under_noise():
    rng = np.random.default_rng(0)
    noise = {(c, s, r): rng.normal(0, 0.05) for c in "abcde" for s in range(6) for r in range(3)}
    means = {c: [3 + 0.05 * i, 2.5 + 0.05 * i, 2.0 + 0.05 * (4 - i)] for i, c in enumerate("abcde")}
    df = ladder_rows(means, seeds=6, noise=noise)
    st = rank_stability(df, n_boot=500).set_index(["rung_a", "rung_b"])
    m = df.groupby(["rung", "candidate"])["val_loss"].mean().unstack()
    tau = stats.kendalltau(m.loc[0], m.loc[2]).statistic
    assert st.loc[(0, 2), "kendall_tau"] == pytest.approx(tau)
    assert st.loc[(0, 2), "kendall_tau_low"] <= tau <= st.loc[(0, 2), "kendall_tau_high"]
    assert st.loc[(0, 2), "spearman_rho"] == pytest.approx(stats.spearmanr(m.loc[0], m.loc[2]).statistic)


def test_top_group_overlap_counts_the_maps_both_horizons_call_best():
    rng = np.random.default_rng(1)
    noise = {(c, s, r): rng.normal(0, 0.01) for c in "abcd" for s in range(8) for r in range(3)}
    # rung 0: a and b equal, c and d far worse; rung 2: a, b, c equal, d worse
    df = ladder_rows({"a": [3.0, 2.5, 2.0], "b": [3.0, 2.5, 2.0], "c": [3.5, 2.9, 2.0], "d": [3.6, 3.0, 2.6]},
                     seeds=8, noise=noise)
    row = rank_stability(df, n_boot=100).set_index(["rung_a", "rung_b"]).loc[(0, 2)]
    assert row["top_group_a"] == "a;b" and row["top_group_b"] == "a;b;c"
    assert (row["top_overlap"], row["top_union"]) == (2, 3) and row["top_jaccard"] == pytest.approx(2 / 3)


def test_only_candidates_that_reached_both_rungs_are_compared():
    df = ladder_rows({"a": [3.0, 2.5, 2.0], "b": [3.1, 2.6, 2.1], "c": [3.2, 2.7, 2.2]},
                     drop=[("c", 1), ("c", 2)])  # promotion stopped c at rung 0
    st = rank_stability(df, n_boot=50).set_index(["rung_a", "rung_b"])
    assert st.loc[(0, 1), "n_candidates"] == 2 and st.loc[(1, 2), "n_candidates"] == 2
    ranks = rank_by_rung(df, n_boot=50)
    assert ranks[ranks.rung == 0].set_index("candidate")["rank"].to_dict() == {"a": 1, "b": 2, "c": 3}
    assert set(ranks[ranks.rung == 2]["candidate"]) == {"a", "b"}


def test_agreement_with_a_published_ranking():
    df = ladder_rows({"a": [3.0, 2.5, 2.2], "b": [3.1, 2.6, 2.1], "c": [3.2, 2.7, 2.0]})
    published = {"a": 15.0, "b": 14.0, "c": 13.0, "z": 1.0}  # z: not in this study
    ag = agreement_with(df, published).set_index("rung")
    assert ag.loc[0, "kendall_tau"] == -1 and ag.loc[2, "kendall_tau"] == 1 and ag.loc[2, "n_candidates"] == 3
    assert (ag["kendall_tau_low"] <= ag["kendall_tau"]).all() and (ag["kendall_tau"] <= ag["kendall_tau_high"]).all()


def test_the_interval_against_a_published_ranking_widens_with_seed_noise():
    """Means 0.1 apart in the published order: with quiet seeds every resample keeps tau = 1;
    with seed noise of 0.3 the resamples disagree and the interval opens below 1."""
    rng = np.random.default_rng(0)
    published = {c: 10.0 + i for i, c in enumerate("abcdef")}
    rows = lambda sd: pd.DataFrame([{"candidate": c, "seed": s, "rung": 0, "horizon_target": 1e5,
                                     "val_loss": 2.0 + 0.1 * i + sd * rng.standard_normal()}
                                    for i, c in enumerate("abcdef") for s in range(5)])
    quiet = agreement_with(rows(0.001), published, n_boot=300).iloc[0]
    noisy = agreement_with(rows(0.3), published, n_boot=300).iloc[0]
    assert quiet["kendall_tau"] == pytest.approx(1) and quiet["kendall_tau_low"] == pytest.approx(1)
    assert quiet["n_seeds"] == 5
    assert noisy["kendall_tau_low"] < 0.8 and noisy["kendall_tau_low"] <= noisy["kendall_tau"] <= noisy["kendall_tau_high"]


def test_the_shift_between_two_protocols_by_hand():
    """Before: the reverse of the published order (tau -1); after: the published order (tau +1),
    at the one horizon both reached; seeds so quiet that every resample agrees: shift 2 exactly.
    The baseline a leads before by 0.1 nats (b is the best other) and trails after by 0.2."""
    from searchmaps.stats import agreement_shift

    published = {"a": 15.0, "b": 14.0, "c": 13.0}
    rows = lambda means, horizon: pd.DataFrame([{"candidate": c, "seed": s, "rung": 0, "horizon_target": horizon,
                                                 "val_loss": m + 1e-6 * s} for c, m in means.items()
                                                for s in range(4)])
    before = pd.concat([rows({"a": 2.0, "b": 2.1, "c": 2.2}, 1e5), rows({"a": 1.0, "b": 1.1, "c": 1.2}, 9e9)])
    after = rows({"a": 2.4, "b": 2.3, "c": 2.2}, 1e5)
    after["rung"] = 0
    out = agreement_shift(before, after, published, baseline="a", n_boot=200, reference_sd=0.0)
    assert len(out) == 1 and out.loc[0, "horizon"] == 1e5 and out.loc[0, "n_candidates"] == 3
    assert out.loc[0, "tau_before"] == pytest.approx(-1) and out.loc[0, "tau_after"] == pytest.approx(1)
    assert out.loc[0, "shift"] == pytest.approx(2)
    assert out.loc[0, "shift_low"] == pytest.approx(2) and out.loc[0, "shift_high"] == pytest.approx(2)
    assert out.loc[0, "shift_low_seeds"] == pytest.approx(2) and out.loc[0, "shift_high_seeds"] == pytest.approx(2)
    assert out.loc[0, "lead_before"] == pytest.approx(0.1) and out.loc[0, "lead_after"] == pytest.approx(-0.2)
    # the published table's own noise opens the interval around the same shift
    noisy = agreement_shift(before, after, published, baseline="a", n_boot=300, reference_sd=1.0).iloc[0]
    assert noisy["shift"] == pytest.approx(2) and noisy["shift_low"] < 2
    assert noisy["shift_low_seeds"] == pytest.approx(2)  # the seeds alone never reorder these maps


def test_top_group_overlap_uses_the_rule_it_is_given():
    """The overlaps must use the study's top-group rule (the report's), not a fixed one:
    on these 5 seeds hsd rules out a map that Holm over all pairs keeps."""
    from searchmaps.stats import to_matrix
    from searchmaps.stats.topgroup import top_group

    rng = np.random.default_rng(3)
    means = {"a": 2.0, "b": 2.02, "c": 2.03, "d": 2.04, "e": 2.05, "f": 2.3}
    noise = {(c, s, r): rng.normal(0, 0.08) for c in means for s in range(5) for r in range(2)}
    df = ladder_rows({c: [m + 0.5, m] for c, m in means.items()}, seeds=5, noise=noise)
    last = df[df["rung"] == 1].assign(val=lambda d: np.exp(d["val_loss"]))
    groups = {}
    for rule in ("hsd", "holm"):
        row = rank_stability(df, n_boot=50, rule=rule).iloc[0]
        groups[rule] = row["top_group_b"]
        assert set(row["top_group_b"].split(";")) == set(top_group(to_matrix(last, "val"), rule))
    assert groups["hsd"] != groups["holm"]


def test_tau_against_a_published_ranking_carries_its_noise_and_holm_across_horizons():
    """Quiet seeds and published values 0.1 apart: with no published noise every resample
    keeps tau = 1; with the noise a single seed has (sd 0.3 here) the interval opens,
    while the seeds-only interval stays at 1. The p-values are Holm-adjusted across rungs."""
    from searchmaps.stats import adjust_pvalues

    published = {c: 10.0 + 0.1 * i for i, c in enumerate("abcdef")}
    rows = pd.DataFrame([{"candidate": c, "seed": s, "rung": r, "horizon_target": h,
                          "val_loss": 2.0 + 0.1 * i + (0.3 * (i % 2) if r == 0 else 0.0) + 0.001 * s}
                         for i, c in enumerate("abcdef") for s in range(5) for r, h in enumerate([1e5, 2e5, 4e5])])
    exact = agreement_with(rows, published, n_boot=200, reference_sd=0.0)
    noisy = agreement_with(rows, published, n_boot=200, reference_sd=0.3)
    assert exact.loc[2, "kendall_tau"] == pytest.approx(1) and exact.loc[2, "kendall_tau_low"] == pytest.approx(1)
    assert noisy.loc[2, "kendall_tau"] == pytest.approx(1) and noisy.loc[2, "kendall_tau_low"] < 0.8
    assert noisy.loc[2, "kendall_tau_low_seeds"] == pytest.approx(1) and (noisy["reference_sd"] == 0.3).all()
    assert list(noisy["confirmatory"]) == [False, False, True]
    assert noisy["p_holm"].to_numpy() == pytest.approx(adjust_pvalues(noisy["p_value"].to_numpy(), "holm"))
    assert (noisy["p_holm"] >= noisy["p_value"]).all() and (noisy["p_holm"] > noisy["p_value"]).any()
    assert noisy["few_seeds"].all()
