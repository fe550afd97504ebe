"""Where do the curves go? Power-law fits ``L(D) = E + A·D^-alpha`` per candidate and with a
floor the candidates share, and their extrapolation to a target horizon with intervals from
refits on resampled seeds (pure; rows and seed pairing as in :mod:`searchmaps.stats.bootstrap`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import optimize

from .bootstrap import boot_indices, cube, few_seeds, fit_slope, interval, once_per_input

ALPHA_MIN, ALPHA_MAX = 1e-3, 3.0  # fit_power_law's bounds on the exponent


def power_law(d, e, a, alpha):
    """``L(D) = E + A * D^-alpha`` with D in units of the reference horizon."""
    return e + a * np.power(d, -alpha)


def fit_power_law(horizons, losses) -> tuple[float, float, float] | None:
    """Least-squares ``(E, A, alpha)`` of :func:`power_law` through (horizon, loss) points,
    horizons divided by their largest; ``0 <= E <= min(loss)``, ``A >= 0``, ``0 < alpha <= 3``.
    None when there are fewer than 3 points or the fit does not converge. Three points
    determine the curve exactly; the bootstrap over seeds then carries the whole
    uncertainty of an extrapolation."""
    x = np.asarray(horizons, dtype=float)
    y = np.asarray(losses, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3:
        return None
    scale = x.max()
    lo = float(y.min())
    guess = [0.9 * lo, max(1e-6, float(y[np.argmin(x)] - 0.9 * lo) * (x.min() / scale) ** 0.5), 0.5]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (e, a, alpha), _ = optimize.curve_fit(power_law, x / scale, y, p0=guess,
                                                  bounds=([0.0, 0.0, ALPHA_MIN], [lo, np.inf, ALPHA_MAX]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    return float(e), float(a) * scale ** float(alpha), float(alpha)  # A in the horizons' own units


def predict(params, horizon) -> float:
    e, a, alpha = params
    return float(e + a * float(horizon) ** -alpha)


def _predicted(fit, target: float) -> float:
    return predict(fit, target) if fit is not None else np.nan


def _shared_predicted(fit, target: float, k: int) -> np.ndarray:
    if fit is None:
        return np.full(k, np.nan)
    return fit[0] + fit[1] * float(target) ** -fit[2]


def bounds_hit(fit, losses) -> str:
    """Which bounds of :func:`fit_power_law` a fit sits on (``"E=0"``, ``"E=min loss"``,
    ``"alpha=3"``, ``"alpha=0"``, ``"A=0"``, joined by ``;``), ``""`` for none. A fit on a
    bound is not the least-squares curve the data ask for (left free, a floor at 0 goes
    negative): its extrapolation is the bound's, not the data's."""
    e, a, alpha = fit
    lo = float(np.nanmin(losses))
    tol = 1e-6 * abs(lo)
    hit = []
    if e <= tol:
        hit.append("E=0")
    elif e >= lo - tol:
        hit.append("E=min loss")
    if a <= tol:
        hit.append("A=0")
    if alpha >= ALPHA_MAX * (1 - 1e-6):
        hit.append("alpha=3")
    elif alpha <= ALPHA_MIN * (1 + 1e-3):
        hit.append("alpha=0")
    return ";".join(hit)


def extrapolate(df: pd.DataFrame, target: float, metric: str = "val_loss", n_boot: int = 1000,
                random_state=0, reference: str | None = None) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Each candidate's fitted ``L(D) = E + A D^-alpha`` over the rungs it reached, its
    prediction at ``target`` (same unit as the horizons) and a 95 % prediction interval
    from refitting on bootstrap resamples of seeds. Returns the table (candidate, E, A,
    alpha, horizon_last, loss_last, target, prediction, prediction_low, prediction_high,
    n_rungs, fit_share: the share of resamples whose fit converged, and the fit's checks
    below) and the bootstrap predictions per candidate (NaN where a fit failed), the same
    draws for every candidate.

    Checks: ``at_bound`` (:func:`bounds_hit`); ``residual_last`` (measured minus fitted
    mean at the last horizon) and ``residual_tail`` (the largest absolute residual at the
    two longest horizons; with 3 rungs a free fit is exact, so it is 0 unless a bound
    holds); with a ``reference`` (the baseline), ``gap_to_reference`` (measured, last
    horizon) and ``residual_exceeds_gap`` (this fit's or the baseline's ``residual_tail``
    is at least that gap: the fits cannot resolve the gap they would extrapolate);
    ``defensible`` is neither. A fit that is not defensible supports no crossover claim.
    ``few_seeds`` flags intervals from too few seeds (:func:`few_seeds`)."""
    values, cands, rungs, horizons, _ = cube(df, metric)
    rng = np.random.default_rng(random_state)
    n_seeds = values.shape[0]
    idx = boot_indices(n_seeds, n_boot, rng)
    rows, boots = [], {}
    for j, name in enumerate(cands):
        reached = [k for k in range(len(rungs)) if not np.isnan(values[:, j, k]).all()]
        seeds = ~np.isnan(values[:, j, reached]).any(axis=1)
        block = values[:, j, reached]
        hs = [horizons[k] for k in reached]
        means = np.nanmean(block[seeds], axis=0) if seeds.any() else None
        fit = fit_power_law(hs, means) if seeds.any() else None
        draws = np.full(n_boot, np.nan)
        if fit is not None:
            good = np.flatnonzero(seeds)
            refit = once_per_input(lambda m: _predicted(fit_power_law(hs, m), target))
            for b, pick in enumerate(idx):
                pick = pick[np.isin(pick, good)]
                if pick.size:
                    draws[b] = refit(block[pick].mean(axis=0))
        lo, hi = interval(draws)
        boots[name] = draws
        row = {"candidate": name, "E": np.nan, "A": np.nan, "alpha": np.nan, "horizon_last": hs[-1] if hs else np.nan,
               "loss_last": float(np.nanmean(block[seeds, -1])) if seeds.any() else np.nan, "target": float(target),
               "prediction": np.nan, "prediction_low": lo, "prediction_high": hi, "n_rungs": len(hs),
               "fit_share": float(np.isfinite(draws).mean()), "n_seeds": int(seeds.sum()),
               "few_seeds": few_seeds(int(seeds.sum())), "at_bound": "", "residual_last": np.nan,
               "residual_tail": np.nan}
        if fit is not None:
            resid = means - np.array([predict(fit, h) for h in hs])
            row.update(E=fit[0], A=fit[1], alpha=fit[2], prediction=predict(fit, target),
                       at_bound=bounds_hit(fit, means), residual_last=float(resid[-1]),
                       residual_tail=float(np.abs(resid[-2:]).max()))
        rows.append(row)
    table = pd.DataFrame(rows)
    table["gap_to_reference"] = np.nan
    table["residual_exceeds_gap"] = pd.array([pd.NA] * len(table), dtype="boolean")
    fitted = table["E"].notna()
    table["defensible"] = fitted & (table["at_bound"] == "")
    if reference is not None and reference in set(table["candidate"]):
        ref = table.set_index("candidate").loc[reference]
        same = fitted & (table["horizon_last"] == ref["horizon_last"]) & (table["candidate"] != reference)
        gap = table["loss_last"] - ref["loss_last"]
        table.loc[same, "gap_to_reference"] = gap[same]
        worst = np.maximum(table["residual_tail"], ref["residual_tail"])
        table.loc[same, "residual_exceeds_gap"] = (worst >= gap.abs())[same]
        table["defensible"] = table["defensible"] & ~table["residual_exceeds_gap"].fillna(False).astype(bool)
        if not ref["at_bound"] == "" or not np.isfinite(ref["E"]):
            table.loc[table["candidate"] != reference, "defensible"] = False  # every gap uses the baseline's fit
    return table, boots


def fit_shared_floor(horizons, means) -> tuple[float, np.ndarray, np.ndarray] | None:
    """One floor for every candidate: least-squares ``(E, A[j], alpha[j])`` of
    ``L_j(D) = E + A_j D^-alpha_j`` through ``means[candidate, rung]`` (NaN where a
    candidate did not reach a rung; candidates with fewer than 2 rungs are left out,
    their A and alpha NaN), with :func:`fit_power_law`'s bounds (``0 <= E <= min``). A
    second opinion on per-candidate fits: it spends 2K + 1 parameters on K candidates'
    points where those spend 3K, and a floor the maps share is the usual assumption of scaling laws
    (the data set's entropy). A in the horizons' own units. None when it fails."""
    h = np.asarray(horizons, dtype=float)
    y = np.asarray(means, dtype=float)
    use = np.isfinite(y).sum(axis=1) >= 2
    if use.sum() < 1 or np.isfinite(y[use]).sum() < 2 * use.sum() + 2:
        return None
    scale = h.max()
    x = h / scale
    ys = y[use]
    k = ys.shape[0]
    lo = float(np.nanmin(ys))
    mask = np.isfinite(ys)
    e0 = 0.5 * lo
    a0, al0 = np.empty(k), np.empty(k)
    for j in range(k):
        m = mask[j]
        lx, ly = np.log(x[m]), np.log(np.maximum(ys[j, m] - e0, 1e-9))
        slope = fit_slope(lx, ly)
        slope = slope if np.isfinite(slope) else -0.5
        a0[j], al0[j] = math.exp(float(np.mean(ly - slope * lx))), float(np.clip(-slope, 0.01, 2.9))

    def resid(theta):
        e, a, al = theta[0], theta[1:k + 1], theta[k + 1:]
        return (e + a[:, None] * np.power(x[None, :], -al[:, None]))[mask] - ys[mask]

    lower = np.r_[0.0, np.zeros(k), np.full(k, ALPHA_MIN)]
    upper = np.r_[lo, np.full(k, np.inf), np.full(k, ALPHA_MAX)]
    theta0 = np.clip(np.r_[e0, a0, al0], lower, np.where(np.isfinite(upper), upper * (1 - 1e-9), upper))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sol = optimize.least_squares(resid, theta0, bounds=(lower, upper), method="trf", x_scale="jac")
    except (ValueError, np.linalg.LinAlgError):
        return None
    if not sol.success:
        return None
    e = float(sol.x[0])
    a = np.full(len(y), np.nan)
    al = np.full(len(y), np.nan)
    al[use] = sol.x[k + 1:]
    a[use] = sol.x[1:k + 1] * np.power(scale, al[use])
    return e, a, al


def shared_floor(df: pd.DataFrame, target: float, metric: str = "val_loss", n_boot: int = 1000,
                 random_state=0) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """:func:`fit_shared_floor` over every candidate's mean at each rung, each candidate's
    prediction at ``target`` and a 95 % interval from refits on the same seed resamples as
    :func:`extrapolate` (same ``random_state``: the same draws). Returns the table
    (candidate, shared_E, shared_at_bound: the floor sits at 0 or at the lowest mean,
    shared_A, shared_alpha, shared_prediction, shared_prediction_low, shared_prediction_high)
    and the bootstrap predictions per candidate."""
    values, cands, rungs, horizons, _ = cube(df, metric)
    rng = np.random.default_rng(random_state)
    idx = boot_indices(values.shape[0], n_boot, rng)
    seeds = ~np.isnan(values).reshape(values.shape[0], -1).all(axis=1)

    def means(pick):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a candidate missing a rung: NaN there
            return np.nanmean(values[pick], axis=0)  # (candidates, rungs)

    point = fit_shared_floor(horizons, means(np.flatnonzero(seeds)))
    draws = np.full((n_boot, len(cands)), np.nan)
    if point is not None:
        refit = once_per_input(lambda m: _shared_predicted(fit_shared_floor(horizons, m), target, len(cands)))
        for b, pick in enumerate(idx):
            draws[b] = refit(means(pick))
    rows = []
    for j, name in enumerate(cands):
        lo, hi = interval(draws[:, j])
        row = {"candidate": name, "shared_E": np.nan, "shared_at_bound": "", "shared_A": np.nan,
               "shared_alpha": np.nan, "shared_prediction": np.nan, "shared_prediction_low": lo,
               "shared_prediction_high": hi}
        if point is not None and np.isfinite(point[1][j]):
            e, a, al = point[0], point[1][j], point[2][j]
            lowest = float(np.nanmin(means(np.flatnonzero(seeds))))
            row.update(shared_E=e, shared_A=a, shared_alpha=al, shared_prediction=e + a * float(target) ** -al,
                       shared_at_bound="E=0" if e <= 1e-6 * lowest else "E=min loss" if e >= lowest * (1 - 1e-6)
                       else "")
        rows.append(row)
    return pd.DataFrame(rows), {name: draws[:, j] for j, name in enumerate(cands)}
