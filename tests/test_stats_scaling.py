"""Power-law fits, their extrapolation and the shared floor, on tables checked by hand."""

import numpy as np
import pandas as pd
import pytest
from helpers import HORIZONS, ladder_rows, laws_rows

from searchmaps.stats import crossings, extrapolate, fit_power_law, power_law


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


def test_the_report_warns_when_fitted_floors_sit_at_zero():
    from searchmaps.report.horizons import floor_sentence

    scaling = pd.DataFrame({"candidate": ["a", "b", "c"], "E": [1e-13, 1.5, float("nan")],
                            "loss_last": [1.8, 1.9, 2.0]})
    said = floor_sentence(scaling, [5e4, 8e5])
    assert said.startswith("For 1 of 2 candidates the fitted floor E is at its bound 0: over 50k to 800k")
    assert floor_sentence(scaling.iloc[1:], [5e4, 8e5]) == ""


def test_a_shared_floor_fit_recovers_the_floor_and_says_when_it_is_at_its_bound():
    from searchmaps.stats import fit_shared_floor, shared_floor

    hs = np.array([5e4, 1e5, 2e5, 4e5, 8e5])
    laws = [(1.5, 40.0, 0.35), (1.5, 80.0, 0.40), (1.5, 20.0, 0.30)]
    means = np.array([[e + a * h ** -al for h in hs] for e, a, al in laws])
    e, a, al = fit_shared_floor(hs, means)
    assert e == pytest.approx(1.5, abs=1e-4)
    assert a == pytest.approx([40, 80, 20], rel=1e-3) and al == pytest.approx([0.35, 0.40, 0.30], rel=1e-3)
    df = laws_rows({"a": laws[0], "b": laws[1], "c": laws[2]}, list(hs))
    table, boots = shared_floor(df, target=5e8, n_boot=30)
    assert (table["shared_at_bound"] == "").all() and table["shared_E"].iloc[0] == pytest.approx(1.5 + 0.02, abs=0.01)
    assert (table["shared_prediction_low"] <= table["shared_prediction"] + 1e-9).all()
    steep = laws_rows({"a": (0.0, 40.0, 0.35), "b": (0.0, 80.0, 0.40)}, list(hs),
                       bump={("a", 4): -0.1, ("b", 4): -0.1})
    table, _ = shared_floor(steep, target=5e8, n_boot=10)
    assert (table["shared_at_bound"] == "E=0").all()
