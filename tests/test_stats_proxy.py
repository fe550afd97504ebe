"""A proxy's agreement with stand-alone training and its split-half ceiling, by hand."""

import math

import pandas as pd
import pytest


def test_a_proxy_checked_against_stand_alone_training_by_hand():
    from searchmaps.stats import proxy_agreement

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


def test_the_ceiling_is_the_tau_between_two_halves_of_the_seeds_by_hand():
    from searchmaps.stats import full_study_ceiling, seed_splits, split_half_agreement

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
