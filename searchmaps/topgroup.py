"""Rules that answer "which maps could be the best?" with a set, and what they can resolve.

Every rule takes the ``seeds x candidates`` matrix of one metric (lower is better; paired
on seed) and returns the **top group**: the candidates it cannot rule out as the best. The
family-wise error the project holds them to: the chance that the group drops ANY map
truly as good as the best (all maps equal, or some tied with the best and the rest worse),
at most alpha. ``benchmarks/calibration.py`` measures every rule against it.

- ``moderated`` (default, :data:`DEFAULT_RULE`): every candidate against the best on
  their own paired differences, over the seeds the two share (so a raced study's extra
  seeds on the survivors count), each pair's variance moderated towards the others'
  (empirical Bayes) but never below the two maps' own noise, and Tukey's studentized
  range at the pair's degrees of freedom (:func:`pair_tests`). It holds alpha when the
  maps' seed noise differs, where pooling does not, with nearly hsd's power when it does
  not.
- ``hsd``: Tukey's studentized range against the best in the two-way layout (candidate x
  seed), the residual error pooled over every map on (k-1)(n-1) dof, over the seeds every
  candidate has. Calibrated with equally noisy maps; with 1 : 4 noise sd between maps it
  drops a map as good as the best in 10-18 % of studies, more seeds or not.
- ``mcb``: Hsu's multiple comparisons with the best (Hsu 1984, 1996) in the same layout:
  one-sided Dunnett constant; the true best is in the group with probability >= 1 - alpha,
  but it drops SOME map tied with the best far more often than alpha.
- ``holm``: paired t-tests of every pair, Holm over all k(k-1)/2 (the statistics module's
  original rule; robust to unequal variances, but it pays for every pair).
- ``friedman``: ranks within each seed; a candidate stays in when its mean rank is within
  Nemenyi's critical difference (studentized range, all pairs) of the lowest. It assumes
  nothing about the noise's shape, needs many seeds, and is not calibrated with unequal
  noise either (0.08 at 11 maps, 1 : 4).

:func:`rule_detail` gives every rule's answer in one shape; :func:`top_groups` the same
decisions for a batch of simulated studies. :func:`detectable_effect` gives a rule's
minimum detectable gap (80 % power) by simulation and :func:`seeds_needed` how many seeds
a rule needs for a given gap, both from the study's own residual noise.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

DEFAULT_RULE = "moderated"
RULES = ("moderated", "hsd", "mcb", "holm", "friedman")


def complete_block(mat: pd.DataFrame) -> pd.DataFrame:
    """The seeds every candidate has (rows with a NaN dropped)."""
    return mat.dropna(axis=0, how="any")


# --------------------------------------------------------------------------- MCB


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


def residual_sd(block: np.ndarray) -> tuple[float, int]:
    """The residual standard deviation of the additive two-way model (candidate + seed)
    over a complete ``seeds x candidates`` array, and its degrees of freedom (k-1)(n-1)."""
    n, k = block.shape
    dof = (k - 1) * (n - 1)
    if dof < 1:
        return float("nan"), 0
    resid = block - block.mean(axis=0, keepdims=True) - block.mean(axis=1, keepdims=True) + block.mean()
    return float(math.sqrt((resid ** 2).sum() / dof)), dof


def mcb(mat: pd.DataFrame, alpha: float = 0.05) -> dict:
    """Hsu's MCB over the seeds all candidates share. Returns ``top_group`` (ordered by
    mean), ``gap`` (candidate -> mean minus the best other mean), ``bound`` (the
    allowance d*s*sqrt(2/n): a gap above it rules the candidate out), ``d``, ``sd``,
    ``dof`` and ``n_seeds``."""
    block = complete_block(mat)
    names = [str(c) for c in block.columns]
    means = block.mean(axis=0).to_numpy(dtype=float)
    order = list(np.argsort(means, kind="stable"))
    n, k = block.shape
    sd, dof = residual_sd(block.to_numpy(dtype=float)) if k > 1 else (float("nan"), 0)
    gaps = {}
    for i in range(k):
        others = np.delete(means, i)
        gaps[names[i]] = float(means[i] - others.min()) if others.size else float("-inf")
    if k < 2 or dof < 1 or not sd > 0:
        return {"top_group": [names[i] for i in order], "gap": gaps, "bound": float("inf"), "d": float("nan"),
                "sd": sd, "dof": dof, "n_seeds": n}
    d = dunnett_critical(k - 1, dof, alpha)
    bound = d * sd * math.sqrt(2 / n)
    return {"top_group": [names[i] for i in order if gaps[names[i]] <= bound], "gap": gaps, "bound": bound,
            "d": d, "sd": sd, "dof": dof, "n_seeds": n}


def hsd(mat: pd.DataFrame, alpha: float = 0.05) -> dict:
    """Tukey's honestly significant difference against the best, in the same two-way layout
    as :func:`mcb` (pooled residual error, (k-1)(n-1) degrees of freedom): candidate i stays
    in when ``mean_i - min_j mean_j <= q * s / sqrt(n)``, q the studentized range quantile
    for k means. The chance that it drops ANY map as good as the best is at most alpha
    (the range of the tied maps' means never exceeds the range of all), which MCB's
    smaller Dunnett constant does not give. Same keys as :func:`mcb` (``gap`` is to the
    best of all; ``q`` instead of ``d``)."""
    block = complete_block(mat)
    names = [str(c) for c in block.columns]
    means = block.mean(axis=0).to_numpy(dtype=float)
    order = list(np.argsort(means, kind="stable"))
    n, k = block.shape
    sd, dof = residual_sd(block.to_numpy(dtype=float)) if k > 1 else (float("nan"), 0)
    gaps = {names[i]: float(means[i] - means.min()) for i in range(k)}
    if k < 2 or dof < 1 or not sd > 0:
        return {"top_group": [names[i] for i in order], "gap": gaps, "bound": float("inf"), "q": float("nan"),
                "sd": sd, "dof": dof, "n_seeds": n}
    q = studentized_range_critical(k, dof, alpha)
    bound = q * sd / math.sqrt(n)
    return {"top_group": [names[i] for i in order if gaps[names[i]] <= bound], "gap": gaps, "bound": bound,
            "q": q, "sd": sd, "dof": dof, "n_seeds": n}


# --------------------------------------------------------------------------- Friedman / Nemenyi


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical difference of mean ranks for k candidates over n seeds."""
    q = studentized_range_critical(k, 1e6, alpha)
    return float(q / math.sqrt(2) * math.sqrt(k * (k + 1) / (6 * n)))


def friedman_nemenyi(mat: pd.DataFrame, alpha: float = 0.05) -> dict:
    """The candidates whose mean rank (within each seed; ties averaged) is within
    Nemenyi's critical difference of the lowest. Returns ``top_group`` (by mean rank),
    ``mean_rank``, ``cd`` and ``n_seeds``."""
    block = complete_block(mat)
    names = [str(c) for c in block.columns]
    n, k = block.shape
    if k < 2 or n < 2:
        return {"top_group": names, "mean_rank": {}, "cd": float("inf"), "n_seeds": n}
    ranks = stats.rankdata(block.to_numpy(dtype=float), axis=1).mean(axis=0)
    cd = nemenyi_cd(k, n, alpha)
    order = np.argsort(ranks, kind="stable")
    return {"top_group": [names[i] for i in order if ranks[i] - ranks.min() <= cd],
            "mean_rank": dict(zip(names, map(float, ranks))), "cd": cd, "n_seeds": n}


# --------------------------------------------------------------------------- per-pair rules


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


def pair_tests(x: np.ndarray, alpha: float = 0.05, moderate: bool = True) -> dict:
    """Every candidate against the best on their own paired differences, for a batch of
    studies ``x`` of shape (studies, seeds, candidates), NaN where a run is missing.

    The best is the lowest mean over each candidate's own seeds. Candidate i is compared
    with it over the seeds the two share (n_i of them, n_i >= 2): the mean difference d_i,
    and the variance v_i of the differences on n_i - 1 degrees of freedom — that pair's own
    noise, so maps that differ in seed noise are each judged by theirs. ``moderate``
    (the ``moderated`` rule) shrinks v_i towards a prior (empirical Bayes, as limma does
    for genes): :func:`fit_f_dist` over all k(k-1)/2 pairs' variances gives s0^2 and its
    dof d0 (capped at the two-way layout's residual dof), the target is the larger of s0^2
    and tau_i = s_i^2 + s_best^2 (per-map variances solved from every pair), and the
    variance used is ``max((d0 target + (n_i - 1) v_i) / (d0 + n_i - 1), tau_i)`` on
    d0 + n_i - 1 degrees of freedom. Equally noisy maps so borrow the pooled error's
    strength (d0 large), while a pair of noisy maps is never judged by the quiet maps'
    noise (the tau floor; without it the prior shrank noisy pairs and FWER reached 0.14).
    The critical value is Tukey's studentized range for k means at the pair's dof over
    sqrt 2 (Games-Howell's). Without ``moderate`` this is the Games-Howell comparison with
    the best (liberal with few seeds: 0.16 at 11 maps x 3 seeds, benchmarks/calibration.py).

    Returns arrays: ``best`` (studies,), ``keep`` (studies, k; the best kept, and any
    candidate sharing fewer than 2 seeds with it), ``gap`` (mean paired difference to the
    best; 0 for the best), ``allowance`` (the gap above which a candidate is out; inf
    where untested), ``n_pairs``, ``dof``, ``s0`` (prior sd of a difference), ``d0``."""
    x = np.asarray(x, dtype=float)
    if x.ndim == 2:
        x = x[None]
    S, n, k = x.shape
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(x, axis=1)
        best = np.argmin(np.where(np.isnan(means), np.inf, means), axis=1)
        d = x[:, :, :, None] - x[:, :, None, :]  # (studies, seeds, k, k)
        m = np.sum(~np.isnan(d), axis=1)
        var = np.nanvar(d, axis=1, ddof=1)
        var = np.where(m >= 2, var, np.nan)
        iu = np.triu_indices(k, 1)
        obs = np.sum(~np.isnan(x), axis=(1, 2))
        rows = np.sum(np.any(~np.isnan(x), axis=2), axis=1)
        cap = np.maximum(obs - k - rows + 1, 0).astype(float)  # residual dof of the additive two-way model
        if moderate and k > 2:
            s02, d0 = fit_f_dist(var[:, iu[0], iu[1]], (m[:, iu[0], iu[1]] - 1).astype(float))
            d0 = np.minimum(d0, cap)
        else:
            s02, d0 = np.full(S, np.nan), np.zeros(S)
        idx = np.arange(S)
        db = d[idx[:, None], :, np.arange(k)[None, :], best[:, None]]  # (studies, k, seeds): x_i - x_best
        gap = np.nanmean(db, axis=2)
        nb = m[idx[:, None], np.arange(k)[None, :], best[:, None]].astype(float)
        vb = var[idx[:, None], np.arange(k)[None, :], best[:, None]]
        nu = nb - 1
        prior = np.where(np.isfinite(s02) & (d0 > 0), d0, 0.0)[:, None]
        # the pair's own structure: per-map variances from every pair (v_ij = s_i^2 + s_j^2, so
        # s_j^2 = (sum_i v_ij - sum_pairs v / (k - 1)) / (k - 2)), a floor under the prior
        vz = np.where(np.eye(k, dtype=bool)[None] | np.isnan(var), 0.0, var)
        total = vz.sum(axis=(1, 2)) / 2 / max(k - 1, 1)
        per_map = np.maximum((vz.sum(axis=2) - total[:, None]) / max(k - 2, 1), 0.0)
        tau = per_map + per_map[idx, best][:, None] if moderate and k > 2 else np.zeros_like(vb)
        target = np.maximum(np.nan_to_num(s02)[:, None], tau)
        pooled = np.maximum((prior * target + nu * np.nan_to_num(vb)) / (prior + nu), tau)
        dof = prior + nu
        tested = (nb >= 2) & (np.arange(k)[None, :] != best[:, None])  # no noise at all: any gap > 0 is out
        q = srange_critical(k, np.where(tested, dof, 1.0), alpha) / math.sqrt(2)
        allowance = np.where(tested, q * np.sqrt(pooled / np.maximum(nb, 1)), np.inf)
    gap = np.where(np.arange(k)[None, :] == best[:, None], 0.0, gap)
    keep = ~(tested & (gap > allowance))
    return {"best": best, "keep": keep, "gap": gap, "allowance": allowance, "n_pairs": nb.astype(int),
            "dof": np.where(tested, dof, np.nan), "s0": np.sqrt(s02), "d0": d0}


# --------------------------------------------------------------------------- batches of studies


def simultaneous_pvalues(mat: pd.DataFrame, rule: str = DEFAULT_RULE) -> dict | None:
    """Every pair's p-value in the rule's own simultaneous family, keyed ``(a, b)`` as
    :func:`searchmaps.stats.all_pairs` keys them; None for a rule that is not a comparison
    of every pair (holm decides by the study's own test, mcb and friedman by constants).

    ``moderated``: the pair's mean paired difference over the seeds the two share, its
    variance moderated exactly as :func:`pair_tests` moderates a pair with the best (the
    prior from every pair, floored at the two maps' own noise), and P(Q > |t| sqrt 2) for
    Tukey's studentized range Q of k means at the pair's degrees of freedom. ``hsd``: the
    difference of means over the seeds every map has, on the pooled residual sd. A
    candidate is out of the rule's top group exactly when its p against the best is at
    most alpha (up to the 0.3 % of :func:`srange_critical`'s table), so the ranking, the
    significance matrix and the top group speak with one voice."""
    if rule not in ("moderated", "hsd"):
        return None
    names = [str(c) for c in mat.columns]
    k = len(names)
    if k < 2:
        return {}
    out = {}
    if rule == "hsd":
        block = complete_block(mat)
        n = len(block)
        sd, dof = residual_sd(block.to_numpy(dtype=float))
        means = block.mean(axis=0).to_numpy(dtype=float)
        for i in range(k):
            for j in range(i + 1, k):
                ok = n >= 2 and dof >= 1 and sd > 0
                stat = abs(means[i] - means[j]) / (sd / math.sqrt(n)) if ok else float("nan")
                out[(names[i], names[j])] = float(stats.studentized_range.sf(stat, k, dof)) if ok else 1.0
        return out
    x = mat.to_numpy(dtype=float)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        d = x[:, :, None] - x[:, None, :]
        m = np.sum(~np.isnan(d), axis=0)
        var = np.where(m >= 2, np.nanvar(d, axis=0, ddof=1), np.nan)
        diff = np.nanmean(d, axis=0)
        iu = np.triu_indices(k, 1)
        obs, rows = np.sum(~np.isnan(x)), np.sum(np.any(~np.isnan(x), axis=1))
        cap = float(max(obs - k - rows + 1, 0))
        if k > 2:
            s02, d0 = fit_f_dist(var[None, iu[0], iu[1]], (m[None, iu[0], iu[1]] - 1).astype(float))
            s02, d0 = float(s02[0]), float(min(d0[0], cap))
            vz = np.where(np.eye(k, dtype=bool) | np.isnan(var), 0.0, var)
            total = vz.sum() / 2 / max(k - 1, 1)
            per_map = np.maximum((vz.sum(axis=1) - total) / max(k - 2, 1), 0.0)
        else:
            s02, d0, per_map = float("nan"), 0.0, np.zeros(k)
        prior = d0 if np.isfinite(s02) and d0 > 0 else 0.0
    for i, j in zip(*iu):
        n, nu = int(m[i, j]), int(m[i, j]) - 1
        if n < 2:
            out[(names[i], names[j])] = 1.0
            continue
        tau = per_map[i] + per_map[j] if k > 2 else 0.0
        target = max(np.nan_to_num(s02), tau)
        pooled = max((prior * target + nu * var[i, j]) / (prior + nu), tau)
        if not pooled > 0:
            out[(names[i], names[j])] = 0.0 if diff[i, j] != 0 else 1.0
            continue
        stat = abs(diff[i, j]) / math.sqrt(pooled / n) * math.sqrt(2)
        out[(names[i], names[j])] = float(stats.studentized_range.sf(stat, k, prior + nu))
    return out


def _complete(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    x = x[None] if x.ndim == 2 else x
    if np.isnan(x).any():
        raise ValueError("this batch form needs complete studies (no missing runs); use the DataFrame form")
    return x


def _pooled_batch(x: np.ndarray, alpha: float, rule: str) -> np.ndarray:
    """hsd or mcb over complete studies (studies, seeds, k): which candidates stay in."""
    x = _complete(x)
    S, n, k = x.shape
    dof = (k - 1) * (n - 1)
    means = x.mean(axis=1)
    resid = x - means[:, None, :] - x.mean(axis=2, keepdims=True) + x.mean(axis=(1, 2))[:, None, None]
    sd = np.sqrt((resid ** 2).sum(axis=(1, 2)) / max(dof, 1))
    if rule == "hsd":
        gap = means - means.min(axis=1, keepdims=True)
        bound = studentized_range_critical(k, dof, alpha) * sd / math.sqrt(n)
    else:
        srt = np.sort(means, axis=1)
        other = np.where(means == srt[:, :1], srt[:, 1:2], srt[:, :1])  # best of the others
        gap = means - other
        bound = dunnett_critical(k - 1, dof, alpha) * sd * math.sqrt(2 / n)
    return (gap <= bound[:, None]) | ~(sd > 0)[:, None]


def _friedman_batch(x: np.ndarray, alpha: float) -> np.ndarray:
    x = _complete(x)
    S, n, k = x.shape
    ranks = stats.rankdata(x, axis=2).mean(axis=1)
    return ranks - ranks.min(axis=1, keepdims=True) <= nemenyi_cd(k, n, alpha)


def _holm_batch(x: np.ndarray, alpha: float) -> np.ndarray:
    """Paired t-tests of every pair, Holm over all k(k-1)/2, the best kept with every
    candidate not significantly worse than it (as :func:`searchmaps.stats.top_group`)."""
    x = _complete(x)
    S, n, k = x.shape
    i, j = np.triu_indices(k, 1)
    d = x[:, :, i] - x[:, :, j]
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    with np.errstate(all="ignore"):
        p = 2 * stats.t.sf(np.abs(mean) / (sd / math.sqrt(n)), n - 1)
    p = np.where(np.all(d == 0, axis=1), 1.0, np.nan_to_num(p, nan=1.0))
    order = np.argsort(p, axis=1, kind="stable")
    adj = np.maximum.accumulate(np.take_along_axis(p, order, 1) * np.arange(p.shape[1], 0, -1), axis=1)
    padj = np.empty_like(p)
    np.put_along_axis(padj, order, np.minimum(adj, 1.0), 1)
    full = np.ones((S, k, k))
    full[:, i, j] = full[:, j, i] = padj
    means = x.mean(axis=1)
    best = np.argmin(means, axis=1)
    pb = full[np.arange(S)[:, None], np.arange(k)[None, :], best[:, None]]
    worse = means > means[np.arange(S), best][:, None]
    keep = ~((pb <= alpha) & worse)
    keep[np.arange(S), best] = True
    return keep


def top_groups(x, rule: str = "moderated", alpha: float = 0.05) -> np.ndarray:
    """Which candidates each rule keeps, for a batch of studies ``x`` (studies, seeds, k),
    as a boolean (studies, k): the same decisions as :func:`top_group` on each study (the
    tests check it), vectorised for calibration. hsd, mcb, holm and friedman need complete
    studies here."""
    if rule in ("moderated", "gameshowell"):
        return pair_tests(x, alpha, moderate=rule == "moderated")["keep"]
    if rule in ("hsd", "mcb"):
        return _pooled_batch(x, alpha, rule)
    if rule == "friedman":
        return _friedman_batch(x, alpha)
    if rule == "holm":
        return _holm_batch(x, alpha)
    raise ValueError(f"the top-group rule must be one of {', '.join(RULES)}, got {rule!r}")


# --------------------------------------------------------------------------- dispatch


def moderated(mat: pd.DataFrame, alpha: float = 0.05) -> dict:
    """The default rule (:func:`pair_tests` with moderation) on a ``seeds x candidates``
    matrix that may be unbalanced (a raced study: each pair uses the seeds it shares).
    Returns the registry's shape (:func:`rule_detail`) plus ``n_pairs`` and ``dof``
    (candidate -> seeds shared with the best and the test's degrees of freedom), ``s0``
    (prior sd of a paired difference) and ``d0`` (its degrees of freedom)."""
    names = [str(c) for c in mat.columns]
    r = pair_tests(mat.to_numpy(dtype=float)[None], alpha)
    keep = set(np.asarray(names)[r["keep"][0]])
    per = lambda key, cast=float: {c: cast(v) for c, v in zip(names, r[key][0])}  # noqa: E731
    return {"top_group": [c for c in _order(mat) if c in keep], "best": names[int(r["best"][0])],
            "gap": per("gap"), "allowance": per("allowance"), "n_pairs": per("n_pairs", int), "dof": per("dof"),
            "s0": float(r["s0"][0]), "d0": float(r["d0"][0]), "n_seeds": int(mat.notna().sum().max())}


def _order(mat: pd.DataFrame) -> list[str]:
    return [str(c) for c in mat.mean().sort_values(kind="stable").index]


def _holm(mat: pd.DataFrame, alpha: float = 0.05) -> dict:
    from .stats import all_pairs, best_candidate, oriented, top_group_of_pairs

    pairs = all_pairs(mat, "ttest", "holm", 0.95)
    best = best_candidate(mat)
    rows = {str(c): oriented(pairs, str(c), best) for c in mat.columns if str(c) != best}
    return {"top_group": top_group_of_pairs(mat, pairs, alpha), "best": best,
            "gap": {best: 0.0, **{c: r["mean_diff"] for c, r in rows.items()}},
            "allowance": {str(c): float("nan") for c in mat.columns},
            "p_adjusted": {c: r["p_adjusted"] for c, r in rows.items()}, "n_seeds": int(mat.notna().sum().max())}


_RULE_FUNCS = {"moderated": moderated, "hsd": hsd, "mcb": mcb, "friedman": friedman_nemenyi, "holm": _holm}


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"the top-group rule must be one of {', '.join(RULES)}, got {rule!r}")
    return rule


def rule_detail(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> dict:
    """Every rule's answer in one shape: ``rule``, ``top_group`` (best first), ``best``,
    ``gap`` and ``allowance`` (candidate -> its gap to the best and the gap above which the
    rule leaves it out; NaN allowances for holm, which decides by p-values; mean ranks for
    friedman), ``bound`` (the allowance when one serves every candidate, else the largest),
    ``unit`` (``"metric"`` or ``"mean rank"``), ``n_seeds`` and the rule's own numbers.
    The pooled rules (hsd, mcb, friedman) use the seeds every candidate has; moderated and
    holm use each pair's shared seeds."""
    check_rule(rule)
    names = [str(c) for c in mat.columns]
    d = dict(_RULE_FUNCS[rule](mat, alpha))
    if rule == "friedman":
        low = min(d["mean_rank"].values(), default=0.0)
        d["gap"] = {c: v - low for c, v in d["mean_rank"].items()}
        d["bound"] = d["cd"]
    if rule in ("hsd", "mcb", "friedman"):
        d["allowance"] = {c: d["bound"] for c in names}
        d["best"] = d["top_group"][0] if d["top_group"] else names[0]
    if rule in ("moderated", "holm"):
        finite = [v for v in d["allowance"].values() if np.isfinite(v)]
        d["bound"] = max(finite) if finite else float("nan")
    d["rule"], d["unit"] = rule, ("mean rank" if rule == "friedman" else "metric")
    return d


def top_group(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> list[str]:
    """The top group of a ``seeds x candidates`` matrix under ``rule``, best first."""
    return rule_detail(mat, rule, alpha)["top_group"]


# --------------------------------------------------------------------------- power


MDE_SIMS = 1000


@functools.lru_cache(maxsize=1024)
def mde_in_sd(rule: str, k: int, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true gap, in units of the per-map seed noise sd, at which ``rule``
    leaves a map out of the top group with probability ``power``, when the other k - 1 maps
    are tied with the best (k maps, n seeds each, normal noise, common random numbers from
    a fixed seed, so the same call gives the same number). By simulation through
    :func:`top_groups`, because the textbook formulas (one comparison's noncentral t
    against the rule's constant) ignore that the best is the lowest of k noisy means and
    overstated the gap by 15-57 %. Above 40 seeds it scales the 40-seed value by
    sqrt(40 / n). inf when no gap is detectable (friedman with too few seeds)."""
    check_rule(rule)
    if k < 2 or n < 2:
        return float("nan")
    if n > 40:
        return mde_in_sd(rule, k, 40, alpha, power) * math.sqrt(40 / n)
    sims = int(max(200, min(MDE_SIMS, 2e7 // (n * k * k))))
    e = np.random.default_rng(20261203).normal(size=(sims, n, k))

    def rate(delta: float) -> float:
        y = e.copy()
        y[:, :, 0] += delta
        return float(np.mean(~top_groups(y, rule, alpha)[:, 0]))

    hi = 1.0
    while rate(hi) < power:
        hi *= 2
        if hi > 1e3:
            return float("inf")
    lo = 0.0
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(mid) < power else (lo, mid)
    return (lo + hi) / 2


def detectable_effect(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05, power: float = 0.8,
                      seeds: int | None = None) -> dict:
    """The smallest true gap to the best (metric units) that ``rule`` rules out with
    ``power``: :func:`mde_in_sd` times the study's seed noise (the residual sd of the
    two-way model over the seeds all candidates share), at ``seeds`` (default: those
    seeds). Returns ``mde``, ``mde_pct`` (of the best mean), ``sd``, ``n_seeds``, ``k``,
    ``rule``, ``alpha``, ``power``."""
    check_rule(rule)
    block = complete_block(mat)
    n, k = block.shape
    sd, _ = residual_sd(block.to_numpy(dtype=float)) if k > 1 and n > 1 else (float("nan"), 0)
    n_eval = seeds if seeds is not None else n
    mde = mde_in_sd(rule, k, int(n_eval), alpha, power) * sd if np.isfinite(sd) and sd > 0 else float("nan")
    best = float(block.mean(axis=0).min()) if k else float("nan")
    return {"mde": mde, "mde_pct": 100 * mde / best if best else float("nan"), "sd": sd, "n_seeds": n_eval, "k": k,
            "rule": rule, "alpha": alpha, "power": power}


def seeds_needed(mat: pd.DataFrame, effect: float, rule: str = DEFAULT_RULE, alpha: float = 0.05,
                 power: float = 0.8, max_seeds: int = 200) -> int | None:
    """The fewest seeds with which ``rule`` rules out a candidate ``effect`` (metric units)
    worse than the best with ``power``, at the study's residual noise; None if not within
    ``max_seeds``. Bisection on the seeds (the detectable gap falls with them)."""

    def ok(n: int) -> bool:
        mde = detectable_effect(mat, rule, alpha, power, seeds=n)["mde"]
        return bool(np.isfinite(mde) and mde <= effect)

    if not ok(max_seeds):
        return None
    lo, hi = 1, max_seeds  # ok(hi), not ok(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid >= 2 and ok(mid) else (mid, hi)
    while hi > 2 and ok(hi - 1):  # Monte Carlo noise: make it the fewest
        hi -= 1
    return hi


# --------------------------------------------------------------------------- the bundle


def analyze(df: pd.DataFrame, metric: str = "val_ppl", reference: str | None = None, alpha: float = 0.05,
            method: str = "ttest", correction: str = "holm", rule: str = DEFAULT_RULE, random_state=0) -> dict:
    """:func:`searchmaps.stats.analyze` (pairwise tests, corrections, summary) with the top
    group chosen by ``rule``. Adds ``rule``, ``rule_detail`` (:func:`rule_detail`),
    ``detectable`` (:func:`detectable_effect` of the rule at the study's seeds) and
    ``spread`` (:func:`variance_spread`)."""
    from .stats import analyze as pairwise_analysis
    from .stats import to_matrix

    check_rule(rule)
    mat = to_matrix(df, metric)
    family = simultaneous_pvalues(mat, rule)
    res = pairwise_analysis(df, metric, reference, alpha, method, correction, random_state, simultaneous=family)
    res["rule"] = rule
    res["rule_detail"] = rule_detail(mat, rule, alpha)
    if rule == "holm":  # the all-pairs family of the study's own test (rule_detail's holm is the t-test's)
        res["rule_detail"]["top_group"] = res["top_group"]
    res["top_group"] = res["rule_detail"]["top_group"]
    res["detectable"] = detectable_effect(mat, rule, alpha)
    res["spread"] = variance_spread(mat)
    return res


def variance_spread(mat: pd.DataFrame) -> float:
    """Largest over smallest per-map residual sd in the two-way layout, over the seeds all
    maps share (a pooled rule assumes them equal; see the README for what unequal noise
    does to it)."""
    block = complete_block(mat).to_numpy(dtype=float)
    n, k = block.shape
    if n < 2 or k < 2:
        return float("nan")
    return float(_spreads(block[None])[0])


def _spreads(x: np.ndarray) -> np.ndarray:
    """:func:`variance_spread` of each complete study of a batch (studies, seeds, k)."""
    n = x.shape[1]
    e = x - x.mean(axis=1, keepdims=True) - x.mean(axis=2, keepdims=True) + x.mean(axis=(1, 2), keepdims=True)
    sds = np.sqrt((e ** 2).sum(axis=1) / max(1, n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sds.min(axis=1) > 0, sds.max(axis=1) / sds.min(axis=1), np.inf)


# where pooling starts to fail: hsd's FWER is 0.082 at a true 1.5x spread of per-map noise sd and 0.113
# at 2x (11 maps x 5 seeds, a third of them noisy, 2,000 studies; 0.045 at 1x): benchmarks/calibration.py
NOISE_SPREAD = 1.5


@functools.lru_cache(maxsize=256)
def spread_by_chance(k: int, n: int, q: float = 0.95) -> float:
    """The ``q`` quantile of :func:`variance_spread` when all k maps are equally noisy
    (n seeds, normal noise, 4,000 simulated studies from a fixed seed): a spread below it
    is what sampling alone gives (with 11 maps x 5 seeds, 6.4x)."""
    if n < 2 or k < 2:
        return float("nan")
    x = np.random.default_rng(20261203).normal(size=(4000, n, k))
    return float(np.quantile(_spreads(x), q))


def noise_check(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> dict:
    """Whether the maps' seed noise differs: ``spread`` (:func:`variance_spread`),
    ``threshold`` (the larger of :data:`NOISE_SPREAD` and :func:`spread_by_chance` at this
    study's size), ``unequal`` (spread above it: beyond chance), ``wide`` (spread above
    NOISE_SPREAD, where pooling starts to err, whether or not chance explains it), and,
    when wide, what a rule that assumes equal noise concludes: ``pooled_group`` (hsd's top
    group; None otherwise) next to ``group`` (``rule``'s)."""
    block = complete_block(mat)
    n, k = block.shape
    spread = variance_spread(mat)
    threshold = max(NOISE_SPREAD, spread_by_chance(k, n)) if n >= 2 and k >= 2 else float("nan")
    unequal = bool(np.isfinite(threshold) and spread > threshold)
    wide = bool(np.isfinite(spread) and spread > NOISE_SPREAD)
    return {"spread": spread, "threshold": threshold, "unequal": unequal, "wide": wide, "rule": rule,
            "group": top_group(mat, rule, alpha), "pooled_group": top_group(mat, "hsd", alpha) if wide else None}
