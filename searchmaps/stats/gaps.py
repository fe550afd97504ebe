"""Each map's gap to the baseline across a horizon ladder: its measured trend per doubling,
its predicted gap at the target, and the pairs whose fitted curves cross before it (pure;
rows and seed pairing as in :mod:`searchmaps.stats.bootstrap`)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import optimize

from .bootstrap import cube, few_seeds, fit_slope, interval
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
    reaches 0 (+inf when the slope does not move it towards 0). Intervals: 95 %, the
    project's rule for a quantity over seeds (:func:`t_interval`, docs/statistics.md): a t
    interval over the per-seed values (each seed's gap, each seed's least-squares slope),
    which holds its coverage at 3-10 seeds where a percentile bootstrap over 5 seeds does
    not; ``closes_at``'s interval is where the measured last gap closes at the slope
    interval's two ends (inf where an end does not move it towards 0). ``n_boot`` and
    ``random_state`` are accepted and unused (nothing here is resampled). One row per
    candidate that shares seeds and its last rung with the reference; ``few_seeds`` as in
    :func:`few_seeds`."""
    values, cands, rungs, horizons, _ = cube(df, metric)
    if reference not in cands:
        raise ValueError(f"the reference {reference!r} has no rows")
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
        gaps = (values[:, j, :] - values[:, r, :])[:, ks][seeds]  # (seeds with every rung, rungs both reached)
        x = log_h[ks]
        tail = slice(max(0, len(ks) - last_rungs), len(ks))
        # per seed: its slope over the window, over every rung and over the last doubling (the
        # mean of the per-seed slopes is the slope of the mean gaps: one x for every seed)
        per_seed = np.array([[fit_slope(x[tail], g[tail]), fit_slope(x, g), fit_slope(x[-2:], g[-2:])] for g in gaps])
        (g_last, gl, gh), (slope, sl, sh), (s_all, al, ah), (step, cl, ch) = (
            t_interval(v) for v in (gaps[:, -1], *per_seed.T))
        at = horizons[ks[-1]]
        ends = sorted((_closes(g_last, sl, at), _closes(g_last, sh, at)))
        n = int(seeds.sum())
        point = _closes(g_last, slope, at)
        rows.append({"candidate": name, "reference": reference, "n_seeds": n, "few_seeds": few_seeds(n),
                     "horizon_first": horizons[ks[0]], "horizon_last": at,
                     "gap_first": float(gaps[:, 0].mean()), "gap_last": g_last, "gap_last_low": gl,
                     "gap_last_high": gh, "trend_from": horizons[ks[tail.start]], "slope": slope, "slope_low": sl,
                     "slope_high": sh, "slope_all": s_all, "slope_all_low": al, "slope_all_high": ah,
                     "change_last": step, "change_last_low": cl, "change_last_high": ch, "closes_at": point,
                     "closes_at_low": ends[0], "closes_at_high": ends[1], "target": float(target),
                     "closes_before_target": bool(point <= target)})
    return pd.DataFrame(rows, columns=cols)


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """The mean of per-seed values and its t interval (n - 1 degrees of freedom): the rule for
    every quantity over seeds that a seed yields one value of (docs/statistics.md, its
    coverage at 3-10 seeds measured in experiments/calibration). NaN bounds with one seed."""
    from scipy import stats as st

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if v.size < 2:
        return m, float("nan"), float("nan")
    half = float(st.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


def _closes(gap: float, slope: float, at: float) -> float:
    """The horizon at which ``gap`` at horizon ``at`` reaches 0 moving at ``slope`` per doubling
    (+inf when the slope does not move it towards 0; NaN for a NaN slope)."""
    if not np.isfinite(slope):
        return float("nan")
    if gap == 0:
        return float(at)
    if slope * gap >= 0:
        return float("inf")
    with np.errstate(over="ignore"):
        return float(at * np.exp2(-gap / slope))


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

