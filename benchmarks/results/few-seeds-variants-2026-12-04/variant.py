import math, warnings
import numpy as np
from scipy import special
from searchmaps.stats.topgroup import *
from searchmaps.stats.topgroup import fit_f_dist, srange_critical
def pair_tests_v(x, alpha=0.05, moderate=True, welch=None, welch_max_n=10**9, sidak=None):
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
        if welch is not None and moderate and k > 2:
            pb = per_map[idx, best][:, None]
            nmap = np.sum(~np.isnan(x), axis=1).astype(float)  # (S,k) seeds per map
            nbest = nmap[idx, best][:, None]
            wd = (per_map + pb) ** 2 / (per_map ** 2 / np.maximum(nmap - 1, 1) + pb ** 2 / np.maximum(nbest - 1, 1))
            binds = (pooled <= tau) & (tau > 0) & (nb <= welch_max_n)
            dof = np.where(binds, np.minimum(dof, wd), dof)
        else:
            binds = np.zeros_like(tau, dtype=bool)
        tested = (nb >= 2) & (np.arange(k)[None, :] != best[:, None])  # no noise at all: any gap > 0 is out
        q = srange_critical(k, np.where(tested, dof, 1.0), alpha) / math.sqrt(2)
        if sidak is not None:
            from scipy import stats as _st
            mm = k * (k - 1) / 2
            a1 = 1 - (1 - alpha) ** (1 / mm)
            qs = _st.t.ppf(1 - a1 / 2, np.where(tested, dof, 1.0))
            q = np.where(binds, np.maximum(q, qs), q) if sidak == "binds" else np.maximum(q, qs)
        allowance = np.where(tested, q * np.sqrt(pooled / np.maximum(nb, 1)), np.inf)
    gap = np.where(np.arange(k)[None, :] == best[:, None], 0.0, gap)
    keep = ~(tested & (gap > allowance))
    return {"best": best, "keep": keep, "gap": gap, "allowance": allowance, "n_pairs": nb.astype(int),
            "dof": np.where(tested, dof, np.nan), "s0": np.sqrt(s02), "d0": d0}


