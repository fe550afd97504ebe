"""What every top-group rule stands on: the seeds a matrix's candidates share, the two-way
layout's residual noise, the critical values of the studentized range and Dunnett's
constant, and the empirical-Bayes prior of variances. Pure functions of arrays; no rule
here."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import optimize, special, stats


def complete_block(mat: pd.DataFrame) -> pd.DataFrame:
    """The seeds every candidate has (rows with a NaN dropped)."""
    return mat.dropna(axis=0, how="any")


def complete_batch(x: np.ndarray) -> np.ndarray:
    """A batch of studies (studies, seeds, k) (one study (seeds, k) becomes a batch of one);
    ValueError when a run is missing."""
    x = np.asarray(x, dtype=float)
    x = x[None] if x.ndim == 2 else x
    if np.isnan(x).any():
        raise ValueError("this batch form needs complete studies (no missing runs); use the DataFrame form")
    return x


def residual_sd(block: np.ndarray) -> tuple[float, int]:
    """The residual standard deviation of the additive two-way model (candidate + seed)
    over a complete ``seeds x candidates`` array, and its degrees of freedom (k-1)(n-1)."""
    n, k = block.shape
    dof = (k - 1) * (n - 1)
    if dof < 1:
        return float("nan"), 0
    resid = block - block.mean(axis=0, keepdims=True) - block.mean(axis=1, keepdims=True) + block.mean()
    return float(math.sqrt((resid ** 2).sum() / dof)), dof


def two_way(mat: pd.DataFrame) -> tuple[list[str], np.ndarray, list[int], int, int, float, int]:
    """The two-way layout (candidate + seed) over the seeds every candidate has: names,
    means (k,), the candidates' order by mean (stable), n seeds, k, the residual sd and its
    degrees of freedom (NaN, 0 with one candidate)."""
    block = complete_block(mat)
    names = [str(c) for c in block.columns]
    means = block.mean(axis=0).to_numpy(dtype=float)
    order = list(np.argsort(means, kind="stable"))
    n, k = block.shape
    sd, dof = residual_sd(block.to_numpy(dtype=float)) if k > 1 else (float("nan"), 0)
    return names, means, order, n, k, sd, dof


def two_way_batch(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`two_way` of each complete study of a batch (studies, seeds, k): the means
    (studies, k), the residual sd (studies,) and its degrees of freedom."""
    S, n, k = x.shape
    dof = (k - 1) * (n - 1)
    means = x.mean(axis=1)
    resid = x - means[:, None, :] - x.mean(axis=2, keepdims=True) + x.mean(axis=(1, 2))[:, None, None]
    return means, np.sqrt((resid ** 2).sum(axis=(1, 2)) / max(dof, 1)), dof


# --------------------------------------------------------------------------- critical values


@functools.lru_cache(maxsize=1024)
def dunnett_critical(m: int, dof: float, alpha: float = 0.05) -> float:
    """One-sided Dunnett critical value d: with m comparisons of equicorrelated (rho = 1/2)
    t statistics on ``dof`` degrees of freedom, P(max T_i <= d) = 1 - alpha. Computed as
    E_{Z, S}[Phi(Z + sqrt(2) d S)^m] (Z standard normal, S = sqrt(chi2_dof / dof)) by
    Gauss quadrature; checked against simulation in the tests."""
    if m < 1:
        return float("nan")
    z, wz = np.polynomial.hermite_e.hermegauss(80)
    wz = wz / math.sqrt(2 * math.pi)
    if math.isinf(dof) or dof > 1e5:
        s, ws = np.array([1.0]), np.array([1.0])
    else:
        u, wu = np.polynomial.legendre.leggauss(120)
        u = (u + 1) / 2
        s, ws = np.sqrt(stats.chi2.ppf(u, dof) / dof), wu / 2

    def coverage(d: float) -> float:
        inner = special.ndtr(z[None, :] + math.sqrt(2) * d * s[:, None]) ** m
        return float(ws @ (inner @ wz))

    return float(optimize.brentq(lambda d: coverage(d) - (1 - alpha), 0.0, 50.0))


@functools.lru_cache(maxsize=4096)
def studentized_range_critical(k: int, dof: float, alpha: float = 0.05) -> float:
    """The 1 - alpha quantile of the studentized range of k means on ``dof`` degrees of
    freedom (cached: scipy integrates it numerically, tens of milliseconds a call)."""
    return float(stats.studentized_range.ppf(1 - alpha, k, dof))


_Z, _WZ = np.polynomial.hermite_e.hermegauss(96)
_WZ = _WZ / math.sqrt(2 * math.pi)
_U, _WU = np.polynomial.legendre.leggauss(128)
_U, _WU = (_U + 1) / 2, _WU / 2
_DOF_GRID = np.array([1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 15, 20, 25, 30, 40, 50, 70, 100, 150,
                      250, 500, 1000, np.inf])


@functools.lru_cache(maxsize=256)
def _srange_grid(k: int, alpha: float) -> np.ndarray:
    """The studentized range quantile q(k, dof) at every dof of ``_DOF_GRID`` by Gauss
    quadrature (P(range <= q s) = E_s[k int phi(z) (Phi(z) - Phi(z - q s))^(k-1) dz]) and
    bisection, all grid points at once; matches scipy's ``studentized_range`` to 1e-5
    relative (tests)."""
    finite = np.isfinite(_DOF_GRID)
    s = np.ones((_DOF_GRID.size, _U.size))
    s[finite] = np.sqrt(stats.chi2.ppf(_U[None, :], _DOF_GRID[finite, None]) / _DOF_GRID[finite, None])
    ws = np.where(finite[:, None], _WU[None, :], 0.0)
    ws[~finite, 0] = 1.0
    lo, hi = np.zeros(_DOF_GRID.size), np.full(_DOF_GRID.size, 400.0)
    for _ in range(55):
        mid = (lo + hi) / 2
        w = mid[:, None, None] * s[:, :, None]
        inner = k * (np.clip(special.ndtr(_Z) - special.ndtr(_Z - w), 0.0, 1.0) ** (k - 1)) @ _WZ
        below = (inner * ws).sum(axis=1) < 1 - alpha
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def srange_critical(k: int, dof, alpha: float = 0.05) -> np.ndarray:
    """The 1 - alpha quantile of the studentized range of k means, for an array of (not
    necessarily whole) degrees of freedom >= 1: log q interpolated in 1/dof between the
    quadrature grid's points (within 0.3 % of scipy's, tests), fast enough for thousands of
    pairs with their own dof."""
    dof = np.maximum(np.asarray(dof, dtype=float), 1.0)
    grid = np.log(_srange_grid(int(k), round(float(alpha), 12)))
    x = 1.0 / _DOF_GRID  # decreasing
    return np.exp(np.interp(1.0 / dof, x[::-1], grid[::-1]))


def sidak_t_critical(m, dof, alpha: float = 0.05) -> np.ndarray:
    """Šidák's two-sided t critical value for ``m`` comparisons: the 1 - a/2 quantile of t
    on ``dof`` degrees of freedom, a = 1 - (1 - alpha)^(1/m) (arrays broadcast; dof need not
    be whole). Dunnett's T3 compares each pair against it at the pair's Welch dof."""
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    a = -np.expm1(np.log1p(-alpha) / m)
    return stats.t.ppf(1 - a / 2, np.maximum(np.asarray(dof, dtype=float), 1.0))


def sidak_t_sf(stat, m, dof) -> np.ndarray:
    """The p-value matching :func:`sidak_t_critical`: 1 - (1 - p)^m, p the two-sided t
    p-value of ``stat`` on ``dof`` (so it is at most alpha exactly when stat exceeds the
    critical value)."""
    p = 2 * stats.t.sf(np.abs(np.asarray(stat, dtype=float)), np.maximum(np.asarray(dof, dtype=float), 1.0))
    p = np.minimum(p, 1.0)
    whole = p >= 1.0  # a difference of exactly 0 (bit-identical rows): 1, without log(0)
    sf = -np.expm1(np.maximum(np.asarray(m, dtype=float), 1.0) * np.log1p(-np.where(whole, 0.0, p)))
    return np.where(whole, 1.0, sf)


# --------------------------------------------------------------------------- variance prior


def fit_f_dist(v: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical-Bayes prior of sample variances (Smyth 2004, limma's ``fitFDist``), one per
    row: ``v`` are variances with ``nu`` degrees of freedom (NaN where there is none); the
    variances are modelled as s0^2 times a scaled F(nu, d0). Returns (s0^2, d0); d0 = inf
    when the variances spread no more than sampling alone explains."""
    v, nu = np.atleast_2d(v), np.broadcast_to(nu, np.shape(np.atleast_2d(v)))
    ok = np.isfinite(v) & (v > 0) & (nu > 0)
    half = np.where(ok, nu, 2.0) / 2
    e = np.where(ok, np.log(np.where(ok, v, 1.0)) - special.digamma(half) + np.log(half), np.nan)
    m = ok.sum(axis=1)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        emean = np.nanmean(e, axis=1)
        evar = np.nansum((e - emean[:, None]) ** 2, axis=1) / np.maximum(m - 1, 1) \
            - np.nanmean(np.where(ok, special.polygamma(1, half), np.nan), axis=1)
    d0 = np.full(len(v), np.inf)
    pos = (evar > 0) & (m > 1)
    d0[pos] = 2 * _trigamma_inverse(evar[pos])
    s0 = np.exp(emean)
    s0[pos] = np.exp(emean[pos] + special.digamma(d0[pos] / 2) - np.log(d0[pos] / 2))
    return s0, d0


def _trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (Newton's method from limma's starting point)."""
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = special.polygamma(1, x)
        step = tri * (1 - tri / y) / special.polygamma(2, x)
        x = np.maximum(x + step, 1e-8)
        if np.all(np.abs(step) < 1e-8 * x):
            break
    return x
