"""Rank stability across horizons, scaling fits and crossings, on tables checked by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from searchmaps.stability import (agreement_with, crossings, extrapolate, fit_power_law, power_law, predict,
                                  rank_by_rung, rank_stability)

HORIZONS = [1e5, 4e5, 1.6e6]


def ladder_rows(means: dict, seeds: int = 4, noise=None, drop=()):
    """Rows for ``means[candidate] = [mean at rung 0, 1, 2]``, seed offsets shared by all."""
    out = []
    for c, ms in means.items():
        for r, m in enumerate(ms):
            for s in range(seeds):
                if (c, r) in drop:
                    continue
                v = m + 0.01 * s + (noise[(c, s, r)] if noise else 0.0)
                out.append({"candidate": c, "seed": s, "rung": r, "horizon_target": HORIZONS[r], "val_loss": v,
                            "val_ppl": math.exp(v)})
    return pd.DataFrame(out)


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


def test_a_power_law_through_exact_points_is_recovered():
    e, a, alpha = 1.5, 40.0, 0.3
    hs = np.array([1e5, 3e5, 1e6, 3e6])
    fit = fit_power_law(hs, e + a * hs ** -alpha)
    assert fit == pytest.approx((e, a, alpha), rel=1e-4)
    assert fit_power_law(hs[:2], [3.0, 2.5]) is None  # two points do not fix three parameters
    assert power_law(1.0, 1.0, 2.0, 0.5) == 3.0


def test_extrapolation_interval_and_a_predicted_crossing():
    """a learns fast early and plateaus; b is worse now but keeps improving: b should pass
    a before 1e8, and every resample (shared seed offsets only) agrees."""
    law_a, law_b = (2.0, 40.0, 0.35), (1.0, 150.0, 0.30)
    means = {c: [e + a_ * h ** -al for h in HORIZONS] for c, (e, a_, al) in (("a", law_a), ("b", law_b))}
    assert means["a"][-1] < means["b"][-1]
    table, boots = extrapolate(ladder_rows(means, seeds=5), target=1e8, n_boot=200)
    t = table.set_index("candidate")
    assert t.loc["a", "prediction"] == pytest.approx(2.0 + 40 * 1e8 ** -0.35, rel=0.02)
    assert t.loc["a", "prediction_low"] <= t.loc["a", "prediction"] <= t.loc["a", "prediction_high"]
    assert t.loc["b", "fit_share"] == 1.0
    (row,) = crossings(table, boots).itertuples()
    assert (row.better_now, row.worse_now) == ("a", "b") and row.flip_share == 1.0 and row.fits_agree
    true_cross = next(d for d in np.geomspace(1.6e6, 1e8, 20000)
                      if 2.0 + 40 * d ** -0.35 > 1.0 + 150 * d ** -0.30)
    assert row.crossing_at == pytest.approx(true_cross, rel=0.05)


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
    from searchmaps.stability import agreement_shift

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


def test_a_proxy_checked_against_stand_alone_training_by_hand():
    from searchmaps.stability import proxy_agreement

    truth = pd.DataFrame([{"candidate": c, "seed": s, "val_loss": m + 0.01 * s}
                          for c, m in {"a": 2.0, "b": 2.1, "c": 2.5, "d": 2.6}.items() for s in range(4)])
    # the proxy swaps a and b and ranks c and d right: tau = (5 concordant - 1 discordant) / 6
    proxy = pd.DataFrame([{"candidate": c, "seed": s, "val_loss": m}
                          for c, m in {"a": 3.1, "b": 3.0, "c": 3.5, "d": 3.6}.items() for s in range(3)])
    got = proxy_agreement(proxy, truth, n_boot=200)
    assert got["kendall_tau"] == pytest.approx(4 / 6) and got["n_candidates"] == 4
    assert got["pick"] == "b" and got["truth_best"] == "a"
    assert got["regret"] == pytest.approx(0.1) and got["regret_ppl"] == pytest.approx(math.exp(2.115) - math.exp(2.015))
    assert got["top_group"] == "a" and got["proxy_top"] == "b" and got["top_agreement"] == 0.0
    assert got["kendall_tau_low"] <= got["kendall_tau"] <= got["kendall_tau_high"]
    assert got["regret_low"] == pytest.approx(0.1) and got["regret_high"] == pytest.approx(0.1)  # always picks b
    # every seed ranks a < b < c < d: two halves of the seeds always agree, so the ceiling is 1
    assert got["ceiling_tau"] == pytest.approx(1) and got["ceiling_splits"] == 3 and got["ceiling_half_seeds"] == 2
    assert got["tau_share"] == pytest.approx(4 / 6) and got["ceiling_top_agreement"] == 1.0
    assert got["ceiling_regret"] == 0.0


def test_the_quick_tau_and_rho_of_the_bootstrap_equal_scipys():
    from searchmaps.stability import _tau_rho, _tau_rho_small

    rng = np.random.default_rng(3)
    for n in (2, 3, 11, 40):
        for _ in range(20):
            a, b = rng.normal(size=n), rng.normal(size=n)
            a[: n // 3] = a[0]  # ties, as scipy's tau-b and average ranks treat them
            assert _tau_rho_small(a, b) == pytest.approx(_tau_rho(a, b), abs=1e-12)
    assert all(math.isnan(x) for x in _tau_rho_small(np.ones(4), np.arange(4.0)))


def test_the_ceiling_is_the_tau_between_two_halves_of_the_seeds_by_hand():
    from searchmaps.stability import full_study_ceiling, seed_splits, split_half_agreement

    assert seed_splits(4) == [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))]
    assert len(seed_splits(5)) == 15 and seed_splits(1) == [] and len(seed_splits(10)) == 126
    for a, b in seed_splits(9, n_splits=20):  # more splits than asked: random ones, disjoint halves of 4
        assert len(a) == len(b) == 4 and not set(a) & set(b)
    # seeds 0-1 rank x < y < z, seeds 2-3 put y first (y = -2)
    truth = pd.DataFrame({"x": [0, 0, 0, 0], "y": [1, 1, -2, -2], "z": [2, 2, 2, 2]}, dtype=float)
    got = split_half_agreement(truth, k=1)
    # 01|23: halves x<y<z and y<x<z, one pair of three swapped: tau = (2 - 1) / 3;
    # 02|13 and 03|12: both halves have y = -0.5, so y<x<z twice: tau = 1
    assert got["ceiling_tau"] == pytest.approx((1 / 3 + 1 + 1) / 3)
    assert got["ceiling_tau_low"] == pytest.approx(1 / 3 + 0.05 * (2 / 3)) and got["ceiling_tau_high"] == 1
    assert got["ceiling_top_agreement"] == pytest.approx(2 / 3)  # 01|23 pick x and y; the others y and y
    # 01|23: B's loss of A's pick x is 0, its best -2 (regret 2); A's of B's pick y is 1, its best 0 (1)
    assert got["ceiling_regret"] == pytest.approx((2 + 1) / 6)
    # tau 0.5 between halves of 2: r = sin(pi/4); all 4 seeds (k = 2): R = 2r / (1 + r); tau = 2/pi asin(sqrt R)
    r = math.sin(math.pi / 4)
    assert full_study_ceiling(0.5, 2, 4) == pytest.approx(2 / math.pi * math.asin(math.sqrt(2 * r / (1 + r))))
    assert full_study_ceiling(0.5, 2, 4) == pytest.approx(0.7281, abs=1e-4) and full_study_ceiling(1, 2, 5) == 1
    assert got["ceiling_tau_full"] == pytest.approx(full_study_ceiling(7 / 9, 2, 4))
    assert math.isnan(full_study_ceiling(-0.1, 2, 4))
    one = split_half_agreement(truth.iloc[:1], k=1)
    assert math.isnan(one["ceiling_tau"]) and one["ceiling_splits"] == 0


def test_a_crossing_the_fits_already_make_inside_the_data_is_not_dated():
    """a is measured better at the last horizon, but the fitted curves there already put b
    ahead (a misfit): the pair is listed as predicted to flip, with no crossing horizon and
    fits_agree False, rather than a crossing found by a root search that cannot bracket it."""
    table = pd.DataFrame([
        {"candidate": "a", "E": 0.0, "A": 10.0, "alpha": 0.2, "horizon_last": 1e6, "loss_last": 0.99,
         "target": 1e8, "prediction": predict((0.0, 10.0, 0.2), 1e8)},
        {"candidate": "b", "E": 0.0, "A": 9.9, "alpha": 0.2, "horizon_last": 1e6, "loss_last": 1.00,
         "target": 1e8, "prediction": predict((0.0, 9.9, 0.2), 1e8)}])
    boots = {"a": np.full(10, table.loc[0, "prediction"]), "b": np.full(10, table.loc[1, "prediction"])}
    (row,) = crossings(table, boots).itertuples()
    assert (row.better_now, row.worse_now) == ("a", "b") and not row.fits_agree
    assert math.isnan(row.crossing_at) and row.flip_share == 1.0


def test_the_report_warns_when_fitted_floors_sit_at_zero():
    from searchmaps.report.horizons import floor_sentence

    scaling = pd.DataFrame({"candidate": ["a", "b", "c"], "E": [1e-13, 1.5, float("nan")],
                            "loss_last": [1.8, 1.9, 2.0]})
    said = floor_sentence(scaling, [5e4, 8e5])
    assert said.startswith("For 1 of 2 candidates the fitted floor E is at its bound 0: over 50k to 800k")
    assert floor_sentence(scaling.iloc[1:], [5e4, 8e5]) == ""


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


# ---------------------------------------------------------------------------- extrapolation you can defend


def _laws_rows(laws: dict, horizons, seeds: int = 5, bump=None, sd: float = 0.0, rng=None):
    """Rows for ``laws[candidate] = (E, A, alpha)`` at ``horizons``, seed offsets shared;
    ``bump[(candidate, rung)]`` is added to that point, ``sd`` is independent seed noise."""
    out = []
    for c, (e, a, al) in laws.items():
        for r, h in enumerate(horizons):
            for s in range(seeds):
                v = e + a * h ** -al + 0.01 * s + (bump or {}).get((c, r), 0.0)
                v += sd * rng.standard_normal() if sd else 0.0
                out.append({"candidate": c, "seed": s, "rung": r, "horizon_target": h, "val_loss": v,
                            "val_ppl": math.exp(v)})
    return pd.DataFrame(out)


def test_a_fit_pinned_at_its_bound_yields_no_crossover_sentence():
    """b is worse now and, by its fitted curve, better at the target. With b's own curve
    (floor 1.0) the crossing is claimed; when b's last point steepens so that its floor
    goes to the bound 0 (left free it would go negative), the same crossing is not claimed."""
    from searchmaps.report.horizons import crossing_sentences

    free = _laws_rows({"a": (2.0, 40.0, 0.35), "b": (1.0, 150.0, 0.30)}, HORIZONS)
    table, boots = extrapolate(free, target=1e8, n_boot=100)
    cross = crossings(table, boots)
    assert table.set_index("candidate").loc["b", "at_bound"] == "" and cross["defensible"].all()
    said = " ".join(crossing_sentences(table, cross, 1e8, "tokens"))
    assert "predicts `b` passing `a`" in said

    pinned = _laws_rows({"a": (2.0, 40.0, 0.35), "b": (0.0, 300.0, 0.30)}, HORIZONS, bump={("b", 2): -0.05})
    table, boots = extrapolate(pinned, target=1e8, n_boot=100)
    t = table.set_index("candidate")
    assert t.loc["b", "at_bound"] == "E=0" and not t.loc["b", "defensible"] and t.loc["b", "residual_tail"] > 0.005
    (row,) = crossings(table, boots).itertuples()
    assert (row.better_now, row.worse_now) == ("a", "b") and not row.defensible  # the fits do cross ...
    said = " ".join(crossing_sentences(table, crossings(table, boots), 1e8, "tokens"))
    assert "passing" not in said and "predicts" not in said  # ... but nothing is claimed from them
    assert "no crossover is claimed" in said


def test_a_fit_that_misses_the_data_by_more_than_its_gap_is_flagged():
    """c sits 0.01 nats behind the baseline but wiggles by 0.05 at the last two horizons:
    its fit misses the data by more than the gap. d sits 0.5 behind, smoothly: its fit holds."""
    hs = [5e4, 1e5, 2e5, 4e5, 8e5]
    base = (2.0, 30.0, 0.3)
    laws = {"ref": base, "c": (2.01, 30.0, 0.3), "d": (2.5, 30.0, 0.3)}
    table, _ = extrapolate(_laws_rows(laws, hs, bump={("c", 3): 0.05, ("c", 4): -0.05}), target=5e8, n_boot=50,
                           reference="ref")
    t = table.set_index("candidate")
    assert t.loc["c", "residual_tail"] > 0.01 and t.loc["c", "residual_exceeds_gap"]
    assert not t.loc["c", "defensible"]
    assert t.loc["d", "gap_to_reference"] == pytest.approx(0.5, abs=1e-6)
    assert t.loc["d", "residual_tail"] < 1e-4 and not t.loc["d", "residual_exceeds_gap"] and t.loc["d", "defensible"]
    assert pd.isna(t.loc["ref", "residual_exceeds_gap"]) and t.loc["ref", "defensible"]


def test_the_gap_trend_by_hand():
    """Gaps on a doubling ladder: c narrows by 0.04 per doubling from 0.08 (closes two
    doublings after 800k, at 3.2M); d widens (never closes); e rose then fell, so its trend
    over the last three horizons (-0.1) differs from the one over all four (+0.02)."""
    from searchmaps.stability import gap_trend

    hs = [1e5, 2e5, 4e5, 8e5]
    gaps = {"c": [0.20, 0.16, 0.12, 0.08], "d": [0.01, 0.02, 0.03, 0.04], "e": [0.0, 0.3, 0.2, 0.1]}
    rows = [{"candidate": "ref", "seed": s, "rung": r, "horizon_target": h, "val_loss": 3.0 - 0.1 * r + 0.01 * s}
            for r, h in enumerate(hs) for s in range(4)]
    rows += [{"candidate": c, "seed": s, "rung": r, "horizon_target": h, "val_loss": 3.0 - 0.1 * r + 0.01 * s + g[r]}
             for c, g in gaps.items() for r, h in enumerate(hs) for s in range(4)]
    t = gap_trend(pd.DataFrame(rows), "ref", target=5e8, n_boot=100).set_index("candidate")
    assert set(t.index) == {"c", "d", "e"} and (t["reference"] == "ref").all()
    assert t.loc["c", "slope"] == pytest.approx(-0.04) and t.loc["c", "slope_all"] == pytest.approx(-0.04)
    assert t.loc["c", "change_last"] == pytest.approx(-0.04) and t.loc["c", "gap_last"] == pytest.approx(0.08)
    assert t.loc["c", "closes_at"] == pytest.approx(3.2e6) and t.loc["c", "closes_before_target"]
    assert t.loc["c", "closes_at_low"] == pytest.approx(3.2e6) and t.loc["c", "closes_at_high"] == pytest.approx(3.2e6)
    assert t.loc["d", "slope"] == pytest.approx(0.01) and math.isinf(t.loc["d", "closes_at"])
    assert math.isinf(t.loc["d", "closes_at_high"]) and not t.loc["d", "closes_before_target"]
    assert t.loc["e", "slope"] == pytest.approx(-0.1) and t.loc["e", "slope_all"] == pytest.approx(0.02)
    assert t.loc["e", "trend_from"] == 2e5 and t.loc["e", "closes_at"] == pytest.approx(1.6e6)
    assert t["few_seeds"].all()  # 4 seeds


def test_the_gap_trend_interval_is_over_paired_seeds():
    """Seed noise in the gap opens the slope's interval around the true -0.04; noise the
    map and the baseline share (the seed offsets) does not."""
    from searchmaps.stability import gap_trend

    rng = np.random.default_rng(5)
    hs = [1e5, 2e5, 4e5, 8e5]
    rows = []
    for s in range(10):
        shared = rng.normal(0, 0.5, len(hs))  # a seed's draw moves both maps alike
        for r, h in enumerate(hs):
            rows.append({"candidate": "ref", "seed": s, "rung": r, "horizon_target": h, "val_loss": 3 + shared[r]})
            rows.append({"candidate": "c", "seed": s, "rung": r, "horizon_target": h,
                         "val_loss": 3 + shared[r] + 0.2 - 0.04 * r + rng.normal(0, 0.01)})
    row = gap_trend(pd.DataFrame(rows), "ref", target=5e8, n_boot=400).iloc[0]
    assert row["slope_low"] < row["slope"] < row["slope_high"]
    assert row["slope"] == pytest.approx(-0.04, abs=0.005)  # unpaired, the 0.5 seed draws would swamp it
    assert 0 < row["slope_high"] - row["slope_low"] < 0.02
    assert row["closes_at_low"] < row["closes_at"] < row["closes_at_high"] and not row["few_seeds"]


def test_a_shared_floor_fit_recovers_the_floor_and_says_when_it_is_at_its_bound():
    from searchmaps.stability import fit_shared_floor, shared_floor

    hs = np.array([5e4, 1e5, 2e5, 4e5, 8e5])
    laws = [(1.5, 40.0, 0.35), (1.5, 80.0, 0.40), (1.5, 20.0, 0.30)]
    means = np.array([[e + a * h ** -al for h in hs] for e, a, al in laws])
    e, a, al = fit_shared_floor(hs, means)
    assert e == pytest.approx(1.5, abs=1e-4)
    assert a == pytest.approx([40, 80, 20], rel=1e-3) and al == pytest.approx([0.35, 0.40, 0.30], rel=1e-3)
    df = _laws_rows({"a": laws[0], "b": laws[1], "c": laws[2]}, list(hs))
    table, boots = shared_floor(df, target=5e8, n_boot=30)
    assert (table["shared_at_bound"] == "").all() and table["shared_E"].iloc[0] == pytest.approx(1.5 + 0.02, abs=0.01)
    assert (table["shared_prediction_low"] <= table["shared_prediction"] + 1e-9).all()
    steep = _laws_rows({"a": (0.0, 40.0, 0.35), "b": (0.0, 80.0, 0.40)}, list(hs),
                       bump={("a", 4): -0.1, ("b", 4): -0.1})
    table, _ = shared_floor(steep, target=5e8, n_boot=10)
    assert (table["shared_at_bound"] == "E=0").all()


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


def test_bootstrap_coverage_with_few_seeds_matches_simulation():
    """The percentile bootstrap of a mean over n normal seeds covers what
    :func:`bootstrap_coverage` says (about 0.85 with 5 seeds), and intervals from fewer
    than 10 seeds are flagged."""
    from searchmaps.stability import bootstrap_coverage, few_seeds

    rng = np.random.default_rng(0)
    n, studies, boots = 5, 3000, 1000
    x = rng.standard_normal((studies, n))
    idx = rng.integers(0, n, size=(boots, n))
    means = x[:, idx].mean(axis=2)  # (studies, boots)
    lo, hi = np.percentile(means, [2.5, 97.5], axis=1)
    covered = float(((lo <= 0) & (0 <= hi)).mean())
    assert bootstrap_coverage(5) == pytest.approx(0.846, abs=0.002)
    assert covered == pytest.approx(bootstrap_coverage(5), abs=0.025)  # MC SE 0.007; bootstrap discreteness
    assert few_seeds(3) and few_seeds(5) and few_seeds(9) and not few_seeds(10) and not few_seeds(30)
