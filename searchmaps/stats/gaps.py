"""Each map's gap to the baseline across a horizon ladder: its measured trend per doubling,
its predicted gap at the target, and the pairs whose fitted curves cross before it (pure;
rows and seed pairing as in :mod:`searchmaps.stats.bootstrap`)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import optimize

from .bootstrap import boot_indices, cube, few_seeds, fit_slope, interval, interval_inf
from .scaling import bounds_hit, predict


def gap_trend(df: pd.DataFrame, reference: str, target: float, metric: str = "val_loss", last_rungs: int = 3,
              n_boot: int = 1000, random_state=0) -> pd.DataFrame:
    """The measured trend of each candidate's gap to ``reference`` (the baseline): the
    paired per-seed gap ``L(candidate) - L(reference)`` at each rung, regressed on log2 of
    the horizon, in nats (the metric's unit) per doubling. The slope is the least-squares
    line through the mean gaps over the ``last_rungs`` longest horizons (default 3: the
    fewest that make it more than one difference, and the latest regime of training,
    the one an extrapolation continues; ``slope_all`` uses every rung); ``change_last`` is
    the last step alone (last rung minus the one before, per doubling). ``closes_at`` is the
    horizon at which the measured gap at the last rung, moving at ``slope`` per doubling,
    reaches 0 (+inf when the slope does not move it towards 0). Intervals: 95 %, from
    resampling seeds (the same draw for every candidate and rung; the same draws as
    :func:`extrapolate` with the same ``random_state``). One row per candidate that shares
    seeds and its last rung with the reference; ``few_seeds`` as in :func:`few_seeds`."""
    values, cands, rungs, horizons, _ = cube(df, metric)
    if reference not in cands:
        raise ValueError(f"the reference {reference!r} has no rows")
    rng = np.random.default_rng(random_state)
    idx = boot_indices(values.shape[0], n_boot, rng)
    r = cands.index(reference)
    log_h = np.log2(np.asarray(horizons, dtype=float))
    cols = ["candidate", "reference", "n_seeds", "few_seeds", "horizon_first", "horizon_last", "gap_first",
            "gap_last", "gap_last_low", "gap_last_high", "trend_from", "slope", "slope_low", "slope_high",
            "slope_all", "slope_all_low", "slope_all_high", "change_last", "change_last_low", "change_last_high",
            "closes_at", "closes_at_low", "closes_at_high", "target", "closes_before_target"]
    rows = []
    for j, name in enumerate(cands):
        if j == r:
            continue
        both = ~np.isnan(values[:, j, :]) & ~np.isnan(values[:, r, :])
        ks = [k for k in range(len(rungs)) if both[:, k].any()]
        if len(ks) < 2:
            continue
        seeds = both[:, ks].all(axis=1)
        if not seeds.any():
            continue
        gaps = (values[:, j, :] - values[:, r, :])[:, ks]  # (seeds, rungs both reached)
        x = log_h[ks]
        tail = slice(max(0, len(ks) - last_rungs), len(ks))
        good = np.flatnonzero(seeds)

        def stat(pick):
            g = gaps[pick].mean(axis=0)
            slope = fit_slope(x[tail], g[tail])
            step = fit_slope(x[-2:], g[-2:])
            closes = g[-1] == 0 or slope * g[-1] < 0
            doublings = -g[-1] / slope if closes and slope != 0 else (0.0 if g[-1] == 0 else np.inf)
            doublings = doublings if np.isfinite(slope) else np.nan
            with np.errstate(over="ignore"):  # a slope near 0: closes "at" +inf
                closes_at = horizons[ks[-1]] * np.exp2(doublings)
            return g[-1], slope, fit_slope(x, g), step, float(closes_at)

        point = stat(good)
        draws = []
        for pick in idx:
            pick = pick[np.isin(pick, good)]
            draws.append(stat(pick) if pick.size else (np.nan,) * 5)
        draws = np.array(draws, dtype=float)
        (gl, gh), (sl, sh), (al, ah), (cl, ch) = (interval(draws[:, i]) for i in range(4))
        xl, xh = interval_inf(draws[:, 4])
        n = int(seeds.sum())
        rows.append({"candidate": name, "reference": reference, "n_seeds": n, "few_seeds": few_seeds(n),
                     "horizon_first": horizons[ks[0]], "horizon_last": horizons[ks[-1]],
                     "gap_first": float(gaps[good, 0].mean()), "gap_last": point[0], "gap_last_low": gl,
                     "gap_last_high": gh, "trend_from": horizons[ks[tail.start]], "slope": point[1], "slope_low": sl,
                     "slope_high": sh, "slope_all": point[2], "slope_all_low": al, "slope_all_high": ah,
                     "change_last": point[3], "change_last_low": cl, "change_last_high": ch, "closes_at": point[4],
                     "closes_at_low": xl, "closes_at_high": xh, "target": float(target),
                     "closes_before_target": bool(point[4] <= target)})
    return pd.DataFrame(rows, columns=cols)


def paired_gap_at_target(table: pd.DataFrame, boots: dict[str, np.ndarray], reference: str, column: str,
                         prefix: str) -> pd.DataFrame:
    """Each candidate's predicted gap to ``reference`` at the target (``table[column]``
    difference), with a 95 % interval from the paired bootstrap draws (``boots``: the
    same seed resamples for every candidate). Columns: candidate, ``{prefix}_gap_at_target``,
    ``_low``, ``_high``."""
    t = table.set_index("candidate")
    rows = []
    for name in t.index:
        if name == reference or reference not in t.index:
            continue
        d = boots[name] - boots[reference]
        lo, hi = interval(d)
        gap = float(t.loc[name, column] - t.loc[reference, column])
        rows.append({"candidate": name, f"{prefix}_gap_at_target": gap,
                     f"{prefix}_gap_at_target_low": lo, f"{prefix}_gap_at_target_high": hi})
    return pd.DataFrame(rows, columns=["candidate", f"{prefix}_gap_at_target", f"{prefix}_gap_at_target_low",
                                       f"{prefix}_gap_at_target_high"])


def crossings(table: pd.DataFrame, boots: dict[str, np.ndarray]) -> pd.DataFrame:
    """Pairs whose order at the last horizon is predicted to flip before the target: ``a``
    better than ``b`` at the last common horizon but predicted worse at the target. With
    the horizon where the fitted curves cross and the share of bootstrap resamples in
    which the order at the target flips (how sure the prediction is). ``fits_agree`` is False
    where the two fitted curves already have the pair the other way round at the last
    horizon (the fits miss the measured order there, so the "crossing" lies inside the data:
    ``crossing_at`` is then NaN). ``defensible`` is False where either fit sits on a bound
    or misses the data at the longest horizons (``residual_tail``) by at least the pair's
    measured gap: such a pair supports no crossover claim. One row per pair."""
    rows = []
    t = table.set_index("candidate")
    for a, b in itertools.combinations(t.index, 2):
        ra, rb = t.loc[a], t.loc[b]
        if not (np.isfinite(ra["prediction"]) and np.isfinite(rb["prediction"])):
            continue
        if ra["horizon_last"] != rb["horizon_last"]:
            continue  # promotion stopped one of them: no common last horizon
        better, worse = (a, b) if ra["loss_last"] <= rb["loss_last"] else (b, a)
        pb, pw = t.loc[better], t.loc[worse]
        if pb["prediction"] <= pw["prediction"]:
            continue
        defensible = all(_defensible(p_) for p_ in (pb, pw)) and \
            max(pb.get("residual_tail", 0.0), pw.get("residual_tail", 0.0)) < abs(pw["loss_last"] - pb["loss_last"])
        fa = (pb["E"], pb["A"], pb["alpha"])
        fb = (pw["E"], pw["A"], pw["alpha"])
        gap = lambda d: predict(fa, d) - predict(fb, d)  # noqa: E731 - > 0 once crossed
        lo, hi = float(pb["horizon_last"]), float(pb["target"])
        agree = bool(gap(lo) < 0)
        try:
            at = math.exp(optimize.brentq(lambda u: gap(math.exp(u)), math.log(lo), math.log(hi))) if agree \
                else float("nan")
        except ValueError:
            at = float("nan")
        da, db = boots[better], boots[worse]
        both = np.isfinite(da) & np.isfinite(db)
        share = float((da[both] > db[both]).mean()) if both.any() else float("nan")
        rows.append({"better_now": better, "worse_now": worse, "horizon_last": lo, "crossing_at": at,
                     "fits_agree": agree, "target": hi, "flip_share": share, "defensible": defensible})
    return pd.DataFrame(rows, columns=["better_now", "worse_now", "horizon_last", "crossing_at", "fits_agree",
                                       "target", "flip_share", "defensible"])


def _defensible(fit: pd.Series) -> bool:
    """A fit free of its bounds (:func:`bounds_hit`; judged from E alone when the table has
    no ``at_bound`` column)."""
    hit = fit.get("at_bound")
    if hit is None or (isinstance(hit, float) and math.isnan(hit)):
        hit = bounds_hit((fit["E"], fit["A"], fit["alpha"]), [fit["loss_last"]])
    return hit == ""

