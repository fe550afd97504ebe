"""Gap trends to the baseline, crossings and whether a fit can defend them, on tables checked by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import HORIZONS, laws_rows

from searchmaps.stats import crossings, extrapolate, predict


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


def test_a_fit_pinned_at_its_bound_yields_no_crossover_sentence():
    """b is worse now and, by its fitted curve, better at the target. With b's own curve
    (floor 1.0) the crossing is claimed; when b's last point steepens so that its floor
    goes to the bound 0 (left free it would go negative), the same crossing is not claimed."""
    from searchmaps.report.horizons import crossing_sentences

    free = laws_rows({"a": (2.0, 40.0, 0.35), "b": (1.0, 150.0, 0.30)}, HORIZONS)
    table, boots = extrapolate(free, target=1e8, n_boot=100)
    cross = crossings(table, boots)
    assert table.set_index("candidate").loc["b", "at_bound"] == "" and cross["defensible"].all()
    said = " ".join(crossing_sentences(table, cross, 1e8, "tokens"))
    last = table["horizon_last"].max()
    if 1e8 / last > 4:  # issue 44: past 4x the last horizon the fit's continuation is no prediction
        assert f"Carried {1e8 / last:.0f}× beyond the last horizon" in said and "has `b` passing `a`" in said
        assert "predicts" not in said and "not a prediction" in said
        near = " ".join(crossing_sentences(table, cross.assign(target=4 * last), 4 * last, "tokens"))
        assert "Extrapolating each candidate's fitted" in near and "predicts" in near
    else:
        assert "predicts `b` passing `a`" in said

    pinned = laws_rows({"a": (2.0, 40.0, 0.35), "b": (0.0, 300.0, 0.30)}, HORIZONS, bump={("b", 2): -0.05})
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
    table, _ = extrapolate(laws_rows(laws, hs, bump={("c", 3): 0.05, ("c", 4): -0.05}), target=5e8, n_boot=50,
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
    from searchmaps.stats import gap_trend

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
    from searchmaps.stats import gap_trend

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


def test_the_gap_trend_intervals_are_t_intervals_over_the_seeds_slopes():
    """Issue 44, item 1 and table row 2: the slope's interval is the t interval over each
    seed's own least-squares slope (n - 1 degrees of freedom), by hand here, not a percentile
    bootstrap over 5 seeds (too narrow at so few)."""
    from scipy import stats as st

    from searchmaps.stats import gap_trend

    rng = np.random.default_rng(3)
    hs = [1e5, 2e5, 4e5, 8e5]
    noise = rng.normal(0, 0.02, (5, len(hs)))
    rows = [{"candidate": c, "seed": s, "rung": r, "horizon_target": h,
             "val_loss": 3 + (0.1 - 0.01 * r + noise[s, r] if c == "c" else 0.0)}
            for c in ("ref", "c") for s in range(5) for r, h in enumerate(hs)]
    row = gap_trend(pd.DataFrame(rows), "ref", target=5e8).iloc[0]
    x = np.log2(hs[1:])
    slopes = np.array([np.polyfit(x, 0.1 - 0.01 * np.arange(1, 4) + noise[s, 1:], 1)[0] for s in range(5)])
    half = st.t.ppf(0.975, 4) * slopes.std(ddof=1) / np.sqrt(5)
    assert row["slope"] == pytest.approx(slopes.mean())
    assert row["slope_low"] == pytest.approx(slopes.mean() - half) and row["slope_high"] == pytest.approx(slopes.mean() + half)
    last = 0.1 - 0.03 + noise[:, -1]
    half = st.t.ppf(0.975, 4) * last.std(ddof=1) / np.sqrt(5)
    assert row["gap_last_low"] == pytest.approx(last.mean() - half)
