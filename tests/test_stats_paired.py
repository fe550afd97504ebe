"""Tests of searchmaps.stats.paired (and the pairwise half of the analysis): hand-checkable numbers first, then calibration and
power on simulated studies (8 candidates; a run scores true mean + a per-seed
offset shared by every candidate (sd 2) + independent noise (sd 1), so effects
below are in units of the independent noise sd)."""

import inspect
import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import holm_top_group, long_rows, se
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from searchmaps import stats as S
from searchmaps.stats import racing

NAMES8 = ["1,1,1,1|rope", "2,1,1,1|rope", "2,2,1,1|rope", "3,1,1,1|rope",
          "4,1,1,1|rope", "4,2,1,1|rope", "block:2|rope", "8,1,1,1|rope"]


def study(rng, means, n_seeds, seed_sd=2.0, noise_sd=1.0):
    means = np.asarray(means, dtype=float)
    x = means + seed_sd * rng.normal(size=(n_seeds, 1)) + noise_sd * rng.normal(size=(n_seeds, means.size))
    return long_rows(x, NAMES8[: means.size])


# Obvious case: 3 maps x 8 seeds. Seeds differ a lot (offset 10..60) but within a
# seed "4,2,1,1" is 1 below the baseline and "2,2,1,1" 3 above it; the +-0.1 / 0.2
# wiggles cancel over the 8 seeds, so the mean differences are exactly 1, 4, 3.
OFFSET = np.array([10.0, 30, 20, 50, 40, 60, 15, 25])
WIGGLE = np.array([1.0, -1, 1, -1, 1, -1, 1, -1])
OBVIOUS = long_rows(np.column_stack([OFFSET, OFFSET - 1 + 0.1 * WIGGLE, OFFSET + 3 + 0.2 * WIGGLE]),
                    ["1,1,1,1|rope", "4,2,1,1|rope", "2,2,1,1|rope"])
OBVIOUS["map"] = OBVIOUS["candidate"].map({"1,1,1,1|rope": "1,1,1,1", "4,2,1,1|rope": "4,2,1,1",
                                           "2,2,1,1|rope": "2,2,1,1"})


# --------------------------------------------------------------------------- shape


def test_to_matrix_marks_missing_and_rejects_duplicates():
    df = long_rows([[1.0, 2.0], [3.0, np.nan]], ["a", "b"])
    mat = S.to_matrix(df)
    assert mat.shape == (2, 2) and np.isnan(mat.loc[1, "b"]) and mat.loc[1, "a"] == 3.0
    with pytest.raises(ValueError, match="duplicate"):
        S.to_matrix(pd.concat([df, df.iloc[:1]]))
    with pytest.raises(ValueError, match="val_loss"):
        S.to_matrix(df, "val_loss")


def test_reference_is_the_all_ones_map_read_from_the_map_column():
    rows = pd.DataFrame({"candidate": ["deep", "base", "loop"], "map": ["4,2,1,1", "1,1,1,1", "block:2"],
                         "seed": 0, "val_ppl": 1.0})
    assert S.reference_candidate(rows) == "base"  # the label says nothing; the map field does
    assert S.reference_candidate(rows[rows.candidate != "base"]) is None
    assert S.reference_candidate(rows.drop(columns="map")) is None  # rows without maps have no baseline
    # a label whose text before "|" looks all-ones does not make a baseline
    assert S.reference_candidate(pd.DataFrame({"candidate": ["1,1|rope"], "map": ["2,1"]})) is None


# --------------------------------------------------------------------------- hand-checkable


def test_summarize_hand_values():
    df = pd.DataFrame({"candidate": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0], "val_ppl": [1.0, 2, 3, 1.5]})
    s = S.summarize(df).set_index("candidate")
    a = s.loc["a"]
    assert (a.n_seeds, a["mean"], a["std"]) == (3, 2.0, 1.0)
    assert a["sem"] == pytest.approx(1 / np.sqrt(3))  # 0.5774
    half = 4.302652729911275 / np.sqrt(3)  # t(df=2).ppf(0.975) * sem = 2.484
    assert (a.ci_low, a.ci_high) == pytest.approx((2 - half, 2 + half))
    assert s.loc["b", "mean"] == 1.5 and s.loc[["b"], ["std", "sem", "ci_low", "ci_high"]].isna().all(axis=None)
    assert list(s.index) == ["b", "a"]  # best (lowest mean) first


def test_signflip_all_positive_n5_is_2_over_32():
    r = S.paired_test([1, 2, 3, 4, 5], [0, 0, 0, 0, 0], method="signflip")
    assert r["n"] == 5 and r["mean_diff"] == 3.0
    assert r["p_value"] == 2 / 32  # only +++++ and ----- are as extreme: 0.0625
    half = stats.t.ppf(0.975, 4) * np.sqrt(2.5) / np.sqrt(5)  # 2.776 * 0.7071 = 1.963
    assert (r["diff_ci_low"], r["diff_ci_high"]) == pytest.approx((3 - half, 3 + half))
    assert S.paired_test([1, 2, 3, 4, 5], [0] * 5, method="wilcoxon")["p_value"] == 0.0625
    assert S.paired_test([1, 2, 3, 4, 5], [0] * 5, method="ttest")["p_value"] == pytest.approx(0.013236, abs=1e-6)


def test_the_default_test_is_the_paired_t_test_everywhere():
    for f in (S.paired_test, S.compare, holm_top_group, S.pairwise_analysis, S.pairwise_pvalues, S.planned_comparisons,
              racing.race_step):
        assert inspect.signature(f).parameters["method"].default == "ttest", f.__name__
    t = stats.ttest_rel([1, 2, 3, 4, 5], [0] * 5).pvalue  # 0.0132; the sign-flip floor is 0.0625
    assert S.paired_test([1, 2, 3, 4, 5], [0] * 5)["p_value"] == pytest.approx(t)
    assert S.pairwise_analysis(OBVIOUS)["method"] == "ttest"
    c = S.compare(OBVIOUS)
    row = c[(c.candidate == "1,1,1,1|rope") & (c.against == "4,2,1,1|rope")].iloc[0]
    mat = S.to_matrix(OBVIOUS)
    assert row.p_value == pytest.approx(stats.ttest_rel(mat["1,1,1,1|rope"], mat["4,2,1,1|rope"]).pvalue)


def test_signflip_mixed_signs_by_hand():
    # d = (1, -2, 3): the 8 sums +-1 +-2 +-3 are 6, 0, 2, -4, 4, -2, 0, -6 and 6 of
    # them have |sum| >= |1 - 2 + 3| = 2, so p = 6/8.
    assert S.paired_test([1, -2, 3], [0, 0, 0], method="signflip")["p_value"] == 0.75


def test_degenerate_cases():
    one = S.paired_test([1.0], [0.0])
    assert one["n"] == 1 and one["p_value"] == 1.0 and np.isnan(one["diff_ci_low"])
    for method in S.METHODS:
        assert S.paired_test([1.0, 2, 3], [1.0, 2, 3], method=method)["p_value"] == 1.0
    r = S.paired_test([1.0, 2, np.nan, 4], [0.0, 1, 5, 3])  # the NaN seed is dropped
    assert r["n"] == 3 and r["mean_diff"] == 1.0
    with pytest.raises(ValueError):
        S.paired_test([1.0, 2], [1.0, 2], method="bogus")


def test_signflip_fast_path_equals_scipy():
    rng = np.random.default_rng(0)
    for n in range(2, 13):
        d = rng.normal(0.3, 1.0, size=(40, n))
        d = d[np.abs(d.mean(axis=1)) > 0.05]  # scipy's 100-eps tie tolerance misses near-zero means
        ref = stats.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                                     vectorized=True, axis=-1, n_resamples=np.inf).pvalue
        np.testing.assert_array_equal(S.signflip_pvalues(d), ref)


def test_signflip_counts_ties_of_rounded_metrics_exactly():
    # Differences rounded to 0.1 tie often; compare with exact integer arithmetic.
    rng = np.random.default_rng(1)
    ints = np.round(rng.normal(size=(200, 10)) * 10).astype(int)
    signs = np.array(list(itertools.product([1, -1], repeat=10)))
    exact = (np.abs(ints @ signs.T) >= np.abs(ints.sum(axis=1))[:, None]).mean(axis=1)
    np.testing.assert_array_equal(S.signflip_pvalues(ints / 10), exact)


def test_signflip_monte_carlo_above_16_seeds():
    p = S.signflip_pvalues(np.arange(1.0, 21.0)[None, :], random_state=3)
    assert p[0] == pytest.approx(2 / 10000)  # no random pattern as extreme: 2 * (0 + 1) / (9999 + 1)


def test_wilcoxon_is_the_exact_signed_rank_test():
    rng = np.random.default_rng(4)
    d = rng.normal(0.4, 1.0, size=(60, 7))  # continuous: no ties, no zeros
    ref = [stats.wilcoxon(row, method="exact").pvalue for row in d]
    np.testing.assert_allclose(S.wilcoxon_pvalues(d), ref, rtol=1e-12)
    # zeros are dropped: (0, 1, 2, 3, 4, 5) is five positive ranks, p = 2/2^5
    assert S.wilcoxon_pvalues([[0.0, 1, 2, 3, 4, 5]])[0] == 2 / 32
    # ties by hand: |d| = 1, 1, 2 -> mid-ranks 1.5, 1.5, 3, signed (+1.5, -1.5, +3), sum 3; of the 8
    # sums +-1.5 +-1.5 +-3 (6, 3, 3, 0, 0, -3, -3, -6) six have |sum| >= 3: p = 6/8
    assert S.wilcoxon_pvalues([[1.0, -1.0, 2.0]])[0] == 0.75


def test_the_exact_tests_floor_and_whether_they_can_reject():
    for n in (3, 5, 8):
        all_positive = np.arange(1.0, n + 1)
        assert S.min_pvalue("signflip", n) == S.min_pvalue("wilcoxon", n) == 2 / 2**n
        assert S.paired_test(all_positive, np.zeros(n), method="signflip")["p_value"] == 2 / 2**n
        assert S.paired_test(all_positive, np.zeros(n), method="wilcoxon")["p_value"] == 2 / 2**n
    assert S.min_pvalue("ttest", 3) == 0.0 and S.min_pvalue("wilcoxon", 1) == 1.0
    # 5 seeds, 55 pairs: 2/32 = 0.0625 > 0.05/55; 12 seeds are the fewest with 2/2^n <= 0.05/55
    r = S.resolution("wilcoxon", 5, 0.05, 55)
    assert not r["can_reject"] and r["min_p"] == 0.0625 and r["threshold"] == pytest.approx(0.05 / 55)
    assert r["min_seeds"] == 12 and S.resolution("wilcoxon", 12, 0.05, 55)["can_reject"]
    assert not S.resolution("signflip", 11, 0.05, 55)["can_reject"]
    assert not S.resolution("signflip", 5, 0.05, 1)["can_reject"]  # not even a single test at 0.05
    assert S.resolution("signflip", 6, 0.05, 1)["can_reject"]  # 2/64 = 0.031
    assert S.resolution("ttest", 3, 0.05, 55)["can_reject"]
    # analyze reports it for its own family: 3 pairs over 8 seeds, 2/256 <= 0.05/3
    assert S.pairwise_analysis(OBVIOUS, method="signflip")["resolution"]["can_reject"]
    assert not S.pairwise_analysis(OBVIOUS[OBVIOUS.seed < 6], method="wilcoxon")["resolution"]["can_reject"]


def test_holm_known_values_and_agreement_with_statsmodels():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max
    np.testing.assert_allclose(S.adjust_pvalues([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(2)
    for p in (rng.uniform(size=28), rng.uniform(0, 0.02, size=13), np.round(rng.uniform(size=20), 1)):
        for method in ("holm", "fdr_bh"):
            np.testing.assert_allclose(S.adjust_pvalues(p, method), multipletests(p, method=method)[1])


# --------------------------------------------------------------------------- compare / top group


def test_compare_obvious_case_by_hand():
    c = S.compare(OBVIOUS, method="signflip")
    assert list(c.columns) == ["candidate", "against", "kind", "n_pairs", "mean_diff", "diff_ci_low",
                               "diff_ci_high", "p_value", "p_adjusted", "significant"]
    got = {(r.candidate, r.against, r.kind): r for r in c.itertuples()}
    # best vs reference is already the vs_best row, so 3 rows cover the 3 pairs
    assert set(got) == {("1,1,1,1|rope", "4,2,1,1|rope", "vs_best"),
                        ("2,2,1,1|rope", "4,2,1,1|rope", "vs_best"),
                        ("2,2,1,1|rope", "1,1,1,1|rope", "vs_reference")}
    assert c.attrs["family_size"] == 3
    diffs = {k[0] + " - " + k[1]: r.mean_diff for k, r in got.items()}
    assert diffs == pytest.approx({"1,1,1,1|rope - 4,2,1,1|rope": 1.0, "2,2,1,1|rope - 4,2,1,1|rope": 4.0,
                                   "2,2,1,1|rope - 1,1,1,1|rope": 3.0})
    # every pair has 8 same-sign differences: p = 2/2**8 each, Holm over 3 -> 3 * 2/256
    assert c.p_value.tolist() == [2 / 256] * 3
    assert c.p_adjusted.tolist() == pytest.approx([3 * 2 / 256] * 3)  # 0.0234
    assert c.significant.all()
    assert (c.diff_ci_low > 0).all()
    # pairing is what finds it: unpaired, the seed offsets (sd 17) swamp a difference of 1
    mat = S.to_matrix(OBVIOUS)
    assert stats.ttest_ind(mat["1,1,1,1|rope"], mat["4,2,1,1|rope"]).pvalue > 0.5


def test_top_group_obvious_case_and_the_signflip_floor():
    assert holm_top_group(OBVIOUS, method="signflip") == ["4,2,1,1|rope"]
    six = OBVIOUS[OBVIOUS.seed < 6]
    # 6 seeds: best sign-flip p is 2/64, Holm over 3 pairs gives 3 * 2/64 = 0.094 > 0.05,
    # so the exact test cannot separate anything; the t-test (the default) can.
    assert holm_top_group(six, method="signflip") == ["4,2,1,1|rope", "1,1,1,1|rope", "2,2,1,1|rope"]
    assert holm_top_group(six) == ["4,2,1,1|rope"]


def five_good_six_worse(rng, n_seeds=5, delta=5.0):
    """5 equally good maps and 6 maps ``delta`` noise-sd worse."""
    x = np.r_[np.zeros(5), np.full(6, delta)] + 2 * rng.normal(size=(n_seeds, 1)) + rng.normal(size=(n_seeds, 11))
    return long_rows(x, [f"good{i}" for i in range(5)] + [f"worse{i}" for i in range(6)])


def test_the_top_group_needs_family_wise_control():
    # 5 equally good maps, 6 maps 5 noise-sd worse, 5 seeds, 300 studies: Holm dropped a good
    # map from the top group in 0.3 % of them (1.0 % over 2000 studies); Benjamini-Hochberg,
    # taking the same top-group rule, in 13 % (16 % over 2000), so top_group refuses it.
    rng = np.random.default_rng(40)
    lost_holm, lost_bh = [], []
    for _ in range(300):
        df = five_good_six_worse(rng)
        good = {f"good{i}" for i in range(5)}
        lost_holm.append(not good <= set(holm_top_group(df)))
        mat = S.to_matrix(df)
        pairs = S.all_pairs(mat, correction="fdr_bh")
        best = S.best_candidate(mat)
        dropped = {c for c in mat.columns if c != best and S.oriented(pairs, c, best)["p_adjusted"] <= 0.05}
        lost_bh.append(bool(good & dropped))
    assert np.mean(lost_holm) <= 0.05  # a good map stays in the top group in >= 95 % of studies
    assert np.mean(lost_bh) >= 0.10
    for call in (lambda: holm_top_group(df, correction="fdr_bh"), lambda: S.pairwise_analysis(df, correction="fdr_bh"),
                 lambda: holm_top_group(df, correction=None)):
        with pytest.raises(ValueError, match="family-wise"):
            call()
    assert holm_top_group(df, correction="bonferroni")[0] == S.best_candidate(mat)
    # the pairwise matrix alone may be corrected for the false discovery rate
    assert S.pairwise_pvalues(df, correction="fdr_bh").shape == (11, 11)


def test_pairwise_matrix_is_symmetric_and_matches_compare():
    pw = S.pairwise_pvalues(OBVIOUS)
    assert pw.shape == (3, 3) and np.isnan(np.diag(pw)).all()
    np.testing.assert_array_equal(pw.to_numpy(), pw.to_numpy().T)
    for r in S.compare(OBVIOUS).itertuples():
        assert pw.loc[r.candidate, r.against] == r.p_adjusted


def test_friedman_clear_case_by_hand():
    # ranks 1, 2, 3 on each of 5 seeds: chi2 = 12 / (5*3*4) * (5^2 + 10^2 + 15^2) - 3*5*4 = 10
    x = np.array([[1.0, 2, 3]] * 5) + np.arange(5)[:, None] * 10
    r = S.friedman(long_rows(x, ["a", "b", "c"]))
    assert r["statistic"] == pytest.approx(10.0) and r["p_value"] == pytest.approx(np.exp(-5))  # chi2(2).sf(10)
    assert (r["n_seeds"], r["n_candidates"]) == (5, 3)
    assert S.friedman(long_rows(x[:, :2], ["a", "b"])) is None
    x[1:, 2] = np.nan  # "c" has one seed: one complete seed only
    assert S.friedman(long_rows(x, ["a", "b", "c"])) is None


# --------------------------------------------------------------------------- power helpers


def test_min_detectable_effect_textbook_and_monotone():
    # Paired t, n = 10, alpha .05 two-sided, power .8: dz = 0.996 (noncentral t, df 9,
    # noncentrality 0.996 * sqrt(10) = 3.15; the normal approximation
    # (1.96 + 0.84) / sqrt(10) = 0.886 is too optimistic at 10 seeds).
    mde = S.min_detectable_effect(1.0, 10)
    assert mde == pytest.approx(0.996, abs=0.001)
    assert mde == pytest.approx(TTestPower().solve_power(nobs=10, alpha=0.05, power=0.8), rel=1e-4)
    assert S.min_detectable_effect(2.0, 10) == pytest.approx(2 * mde)
    seq = [S.min_detectable_effect(1.0, n, n_comparisons=28) for n in range(3, 16)]
    assert all(a > b for a, b in zip(seq, seq[1:]))
    assert S.min_detectable_effect(1.0, 10, n_comparisons=28) > mde
    assert np.isnan(S.min_detectable_effect(1.0, 1))


def test_detectable_difference_on_obvious_case():
    d = S.detectable_difference(OBVIOUS)
    # vs the best the differences are 1 - 0.1 * wiggle and 4 + 0.1 * wiggle: both have
    # sd 0.1 * sqrt(8/7) = 0.1069, and so has their pool
    assert d["sd_diff"] == pytest.approx(0.1 * np.sqrt(8 / 7))
    assert (d["n_seeds"], d["n_comparisons"]) == (8, 3)
    assert d["mde"] == pytest.approx(S.min_detectable_effect(d["sd_diff"], 8, 0.05, 0.8, 3))
    assert S.resolution("signflip", 8, 0.05, 3)["min_seeds"] == 7  # 2 / 2**n <= 0.05 / 3  <=>  2**n >= 120
    assert d["by_seeds"]["mde"].is_monotonic_decreasing


def test_analyze_bundles_everything():
    a = S.pairwise_analysis(OBVIOUS)
    assert {"summary", "comparisons", "friedman", "top_group", "pairwise", "mde", "best", "reference",
            "family_size", "resolution"} <= set(a)
    assert a["best"] == "4,2,1,1|rope" and a["reference"] == "1,1,1,1|rope"
    assert a["top_group"] == ["4,2,1,1|rope"] and a["family_size"] == 3
    assert a["friedman"]["statistic"] == pytest.approx(16.0)  # same ranks on all 8 seeds
    with pytest.raises(ValueError, match="reference"):
        S.pairwise_analysis(OBVIOUS, reference="9,9,9,9|rope")


# --------------------------------------------------------------------------- calibration


def null_fwer(rng, n_studies, n_seeds, method, drop=0.0):
    """Share of null studies (8 equal maps) where compare() flags anything, and the
    same with Holm over only the reported vs-best rows (the naive family)."""
    any_sig, naive = [], []
    for _ in range(n_studies):
        df = study(rng, np.zeros(8), n_seeds)
        if drop:
            df = df[rng.uniform(size=len(df)) >= drop]
        c = S.compare(df, method=method)
        any_sig.append(c.significant.any())
        vb = c[c.kind == "vs_best"].p_value
        naive.append((S.adjust_pvalues(vb, "holm") <= 0.05).any())  # == multipletests, see above
    return np.mean(any_sig), np.mean(naive)


def test_family_wise_error_under_the_null_ttest():
    # 400 null studies x 8 maps x 6 seeds: 0.040 here; 0.023 over 2000 studies
    # (naive vs-best family: 0.085).
    fwer, naive = null_fwer(np.random.default_rng(10), 400, 6, "ttest")
    assert fwer <= 0.05 + 2 * se(0.05, 400)
    # Why every pair is in the family: the best is picked from the same data, and
    # correcting only over the 7 reported vs-best comparisons lets about 0.1 through.
    assert naive > 0.05 + se(0.05, 400) and naive > fwer


def test_family_wise_error_under_the_null_signflip():
    # 12 seeds, so the exact test can reject (2/4096 <= 0.05/28): 0.043 here, 0.027 over
    # 2000 studies (naive vs-best family: 0.11).
    fwer, _ = null_fwer(np.random.default_rng(11), 300, 12, "signflip")
    assert fwer <= 0.05 + 2 * se(0.05, 300)


def test_family_wise_error_with_missing_runs():
    # 10% of runs missing at random: pairs have different seed counts. 0.015 here,
    # 0.033 over 2000 studies.
    fwer, _ = null_fwer(np.random.default_rng(12), 200, 7, "ttest", drop=0.1)
    assert fwer <= 0.05 + 2 * se(0.05, 200)


# --------------------------------------------------------------------------- power


def flagged(rng, n_studies, n_seeds, delta, method, against="vs_best"):
    """Share of studies where map 5 (true mean +delta, the others 0) is significantly
    worse than the best, or than the reference (fixed, not selected)."""
    hits = []
    for _ in range(n_studies):
        means = np.zeros(8)
        means[5] = delta
        df = study(rng, means, n_seeds)
        if against == "vs_best":
            c = S.compare(df, method=method)
            r = c[(c.candidate == NAMES8[5]) & (c.kind == "vs_best")]
            hits.append(bool(len(r)) and bool(r.significant.iloc[0]))
        else:
            hits.append(S.pairwise_pvalues(df, method=method).loc[NAMES8[5], NAMES8[0]] <= 0.05)
    return np.mean(hits)


def test_power_at_2_noise_sd_with_12_seeds_signflip():
    # Default test, 12 seeds, a map 2 noise-sd worse: flagged in 0.84 of these 300
    # studies, 0.88 of 2000 (the bound is 4 SE below that).
    assert flagged(np.random.default_rng(20), 300, 12, 2.0, "signflip") >= 0.80


def test_power_at_1_5_noise_sd_with_8_seeds():
    # The t-test flags a 1.5-sd gap with 8 seeds in only 0.33 of studies (the paired sd
    # is sqrt(2), Holm over 28 pairs: the 80%-power effect is 3.04 sd, see below) ...
    assert flagged(np.random.default_rng(21), 300, 8, 1.5, "ttest") >= 0.25
    # ... and the exact sign-flip test never can: 2/2**8 = 0.0078 > 0.05/28 = 0.0018.
    assert flagged(np.random.default_rng(22), 50, 8, 1.5, "signflip") == 0.0


def test_min_detectable_effect_predicts_simulated_power():
    # vs the reference (a fixed pair, no selection): at the MDE for sd_diff = sqrt(2),
    # 8 seeds and 28 comparisons (3.04 noise-sd) the t-test should have ~80% power:
    # 0.80 here, 0.82 over 2000 studies (vs the selected best it is 0.95).
    mde = S.min_detectable_effect(np.sqrt(2), 8, 0.05, 0.8, 28)
    assert mde == pytest.approx(3.04, abs=0.01)
    power = flagged(np.random.default_rng(23), 300, 8, mde, "ttest", against="reference")
    assert 0.8 - 3 * se(0.8, 300) <= power <= 0.95


def test_planned_comparisons_are_corrected_over_their_own_family():
    import scipy.stats

    from searchmaps.stats import planned_comparisons

    base = np.array([10.0, 12.0, 11.0, 13.0, 9.0])
    rows = [{"candidate": c, "seed": s, "val_ppl": v}
            for c, vals in {"A": base + [1, 2, 3, 4, 5], "B": base, "C": base + [0.5, -0.5, 0.2, -0.2, 0.1]}.items()
            for s, v in enumerate(vals)]
    out = planned_comparisons(pd.DataFrame(rows), [("A", "B"), ("C", "B")])
    p_ab = scipy.stats.ttest_rel([1, 2, 3, 4, 5], [0] * 5).pvalue  # 0.0132
    assert out.loc[0, "mean_diff"] == pytest.approx(3.0)
    assert out.loc[0, "p_value"] == pytest.approx(p_ab)
    flip = planned_comparisons(pd.DataFrame(rows), [("A", "B"), ("C", "B")], method="signflip")
    assert flip.loc[0, "p_value"] == pytest.approx(2 / 32)
    assert out.loc[0, "p_adjusted"] == pytest.approx(2 * p_ab)  # Holm over the 2 planned pairs
    assert bool(out.loc[0, "significant"]) and not bool(out.loc[1, "significant"])
    with pytest.raises(ValueError, match="D"):
        planned_comparisons(pd.DataFrame(rows), [("A", "D")])


# --------------------------------------------------------------------------- the registries (contract)

# 5 comparisons x 5 paired seeds: mixed signs, a constant row, an all-zero row, a tie-free row
DIFFS = np.array([[0.3, 0.1, -0.05, 0.2, 0.25],
                  [0.1, 0.1, 0.1, 0.1, 0.1],
                  [-0.2, 0.15, -0.1, 0.05, -0.3],
                  [0.0, 0.0, 0.0, 0.0, 0.0],
                  [0.4, -0.1, 0.2, 0.3, 0.05]])
# what the name-switched code (before the registries, 9f3f898) gave on DIFFS: the records must not move them
PVALUES_BEFORE = {"ttest": [0.061415973525170475, 0.0, 0.3821257899957514, 1.0, 0.12835348651691136],
                  "signflip": [0.125, 0.0625, 0.4375, 1.0, 0.1875],
                  "wilcoxon": [0.125, 0.0625, 0.4375, 1.0, 0.1875]}
RAW_P = np.array([0.01, 0.04, 0.03, 0.2, 0.005])
ADJUSTED_BEFORE = {"holm": [0.04, 0.09, 0.09, 0.2, 0.025], "bonferroni": [0.05, 0.2, 0.15, 1.0, 0.025],
                   "fdr_bh": [0.024999999999999998, 0.049999999999999996, 0.049999999999999996, 0.2,
                              0.024999999999999998]}


def _enumerated_signflip(row) -> float:
    """Two-sided exact sign-flip p by listing every sign pattern (the definition)."""
    obs = abs(row.sum())
    sums = [abs(np.dot(signs, row)) for signs in itertools.product((1.0, -1.0), repeat=row.size)]
    return float(np.mean([s >= obs - 1e-10 * np.abs(row).sum() for s in sums]))


def _reference(name: str, row: np.ndarray) -> float | None:
    """The p-value of one row straight from scipy or the definition (None: no reference here)."""
    if np.all(row == 0):
        return 1.0
    if name == "ttest":
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the constant row: sd 0
            p = stats.ttest_rel(row, np.zeros_like(row)).pvalue
        return 1.0 if np.isnan(p) else float(p)
    if name == "signflip":
        return _enumerated_signflip(row)
    if name == "wilcoxon" and len(set(np.abs(row))) == row.size and np.all(row != 0):
        return float(stats.wilcoxon(row, method="exact").pvalue)
    return None


@pytest.mark.parametrize("name", sorted(S.PAIRED_TESTS))
def test_every_paired_test_keeps_its_pvalues_floor_and_words(name):
    from searchmaps.report.sentences import cannot_reject_sentence, family_label

    test = S.PAIRED_TESTS[name]
    assert test.name == name and name in S.METHODS and test.companion in S.PAIRED_TESTS
    got = [S.paired_test(row, np.zeros(row.size), method=name)["p_value"] for row in DIFFS]
    assert got == PVALUES_BEFORE[name]  # bit for bit
    for row, p in zip(DIFFS, got):
        ref = _reference(name, row)
        if ref is not None:
            assert p == pytest.approx(ref, rel=1e-12, abs=1e-15)
    for n in (2, 3, 5, 8):  # the floor is what the test says, and all-positive differences reach it
        floor = S.min_pvalue(name, n)
        same_sign = 1.0 + 1e-6 * np.arange(n)  # all positive, tie-free, nearly constant: a huge effect
        p_best = S.paired_test(same_sign, np.zeros(n), method=name)["p_value"]
        assert floor == test.min_pvalue(n) == (2 / 2**n if test.exact else 0.0)
        assert p_best == floor if test.exact else p_best < 1e-5
        assert S.resolution(name, n, 0.05, 3)["min_seeds"] == test.min_seeds(0.05 / 3)
    assert S.min_pvalue(name, 1) == 1.0
    for corr in S.FAMILY_WISE:  # the report names it by its words
        res = S.analyze(OBVIOUS, method=name, correction=corr, rule="holm")
        assert family_label(res) == f"{test.words}s, {S.CORRECTIONS[corr].words}-corrected over all 3 pairs"
        stuck = [("over all 55 pairs", S.resolution(name, 5, 0.05, 55))]
        warning = cannot_reject_sentence(name, corr, stuck)
        assert (warning is not None) == test.exact
        if test.exact:
            assert warning.startswith(f"The {test.words} cannot find") and S.CORRECTIONS[corr].bar in warning


@pytest.mark.parametrize("name", sorted(S.CORRECTIONS))
def test_every_correction_keeps_its_adjustment_and_family_wise_flag(name):
    corr = S.CORRECTIONS[name]
    assert corr.name == name
    got = S.adjust_pvalues(RAW_P, name)
    assert got.tolist() == ADJUSTED_BEFORE[name]  # bit for bit
    np.testing.assert_allclose(got, multipletests(RAW_P, method=name)[1], rtol=1e-12)
    assert (name in S.FAMILY_WISE) == corr.family_wise
    if corr.family_wise:
        S.require_family_wise(name)
        assert corr.bar and corr.under and corr.refusal is None
    else:
        with pytest.raises(ValueError, match="needs family-wise control"):
            S.require_family_wise(name)


def test_unknown_names_raise_as_before():
    with pytest.raises(ValueError, match=r"method must be one of \('ttest', 'signflip', 'wilcoxon'\), got 'nope'"):
        S.min_pvalue("nope", 5)
    with pytest.raises(ValueError, match=r"method must be one of .* got 'nope'"):
        S.paired_test([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], method="nope")
    with pytest.raises(ValueError, match="correction must be one of holm, bonferroni, got 'fdr_bh'"):
        S.require_family_wise("fdr_bh")
    with pytest.raises(ValueError):
        S.adjust_pvalues(RAW_P, "nope")  # statsmodels' own refusal, as before
    np.testing.assert_allclose(S.adjust_pvalues(RAW_P, "sidak"), multipletests(RAW_P, method="sidak")[1])
    assert S.adjust_pvalues(RAW_P, None).tolist() == RAW_P.tolist()


def test_a_test_and_a_correction_added_to_the_registries_alone_are_usable(monkeypatch):
    def sign_test(d, rng):  # the exact two-sided sign test: ranks nothing, counts signs
        return np.array([stats.binomtest(int((row > 0).sum()), int((row != 0).sum())).pvalue for row in d])

    monkeypatch.setitem(S.PAIRED_TESTS, "signtest",
                        S.PairedTest("signtest", "exact sign test", sign_test, exact=True, companion="ttest"))
    monkeypatch.setitem(S.CORRECTIONS, "double",
                        S.Correction("double", "Doubled", lambda p: np.minimum(2 * p, 1.0), family_wise=True,
                                     bar="the doubling", under="under doubling"))
    pairs = S.all_pairs(S.to_matrix(OBVIOUS), "signtest", "double")
    assert pairs["family_size"] == 3
    for key, r in pairs.items():
        if key != "family_size":
            assert r["p_value"] == 2 / 2**8 and r["p_adjusted"] == 4 / 2**8  # every seed agrees on the sign
    out = S.compare(OBVIOUS, method="signtest", correction="double")
    assert (out["p_value"] == 2 / 2**8).all() and out["significant"].all()
    assert S.min_pvalue("signtest", 8) == 2 / 2**8
    S.require_family_wise("double")
    res = S.analyze(OBVIOUS, method="signtest", correction="double", rule="holm")
    from searchmaps.report.sentences import family_label
    assert family_label(res) == "exact sign tests, Doubled-corrected over all 3 pairs"
