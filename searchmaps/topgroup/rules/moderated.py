"""``moderated`` (the default): every candidate against the best on their own paired
differences, over the seeds the two share, each pair's variance moderated towards the
others' (empirical Bayes) but never below the two maps' own noise, and Tukey's studentized
range at the pair's degrees of freedom. It holds alpha when the maps' seed noise differs,
where pooling does not, with nearly hsd's power when it does not. All of its arithmetic
is here: :func:`moderated_pairs` sets up every pair, which both the decisions
(:func:`pair_tests`) and the p-values (:meth:`Moderated.simultaneous_pvalues`) read."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from ..critical import fit_f_dist, srange_critical
from ..rule import Rule, TopGroup, register, sentence, span


def moderated_pairs(x: np.ndarray, moderate: bool = True) -> dict:
    """Every ordered pair (i, j) of every study of a batch ``x`` (studies, seeds, k), NaN
    where a run is missing, over the seeds the two share.

    ``diff`` (studies, k, k): the mean paired difference x_i - x_j; ``n``: the seeds the
    pair shares; ``raw``: the variance of its differences on n - 1 degrees of freedom (NaN
    under 2 seeds). ``moderate`` shrinks each pair's variance towards a prior (empirical
    Bayes, as limma does for genes): :func:`~searchmaps.topgroup.critical.fit_f_dist` over
    all k(k-1)/2 pairs' variances gives s0^2 and its dof d0, d0 capped at the two-way
    layout's residual dof; the target is the larger of s0^2 and tau_ij = s_i^2 + s_j^2
    (per-map variances solved from every pair), and ``var`` is
    ``max((d0 target + (n - 1) raw) / (d0 + n - 1), tau_ij)`` on ``dof`` = d0 + n - 1
    degrees of freedom. Equally noisy maps so borrow the pooled error's strength (d0
    large), while a pair of noisy maps is never judged by the quiet maps' noise (the tau
    floor; without it the prior shrank noisy pairs and FWER reached 0.14). Without
    ``moderate``, or with two maps, ``var`` is the pair's own on n - 1 dof. ``s0sq`` and
    ``d0`` (studies,): the prior (NaN, 0 without one). ``var`` and ``dof`` are meaningful
    where n >= 2."""
    x = np.asarray(x, dtype=float)
    S, n, k = x.shape
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        d = x[:, :, :, None] - x[:, :, None, :]  # (studies, seeds, k, k)
        m = np.sum(~np.isnan(d), axis=1)
        raw = np.where(m >= 2, np.nanvar(d, axis=1, ddof=1), np.nan)
        diff = np.nanmean(d, axis=1)
        moderated = moderate and k > 2
        if moderated:
            iu = np.triu_indices(k, 1)
            obs = np.sum(~np.isnan(x), axis=(1, 2))
            rows = np.sum(np.any(~np.isnan(x), axis=2), axis=1)
            cap = np.maximum(obs - k - rows + 1, 0).astype(float)  # residual dof of the additive two-way model
            s02, d0 = fit_f_dist(raw[:, iu[0], iu[1]], (m[:, iu[0], iu[1]] - 1).astype(float))
            d0 = np.minimum(d0, cap)
            # the pair's own structure: per-map variances from every pair (v_ij = s_i^2 + s_j^2, so
            # s_j^2 = (sum_i v_ij - sum_pairs v / (k - 1)) / (k - 2)), a floor under the prior
            vz = np.where(np.eye(k, dtype=bool)[None] | np.isnan(raw), 0.0, raw)
            total = vz.sum(axis=(1, 2)) / 2 / (k - 1)
            per_map = np.maximum((vz.sum(axis=2) - total[:, None]) / (k - 2), 0.0)
            tau = per_map[:, :, None] + per_map[:, None, :]
        else:
            s02, d0 = np.full(S, np.nan), np.zeros(S)
            tau = np.zeros((S, k, k))
        nu = m - 1.0
        prior = np.where(np.isfinite(s02) & (d0 > 0), d0, 0.0)[:, None, None]
        target = np.maximum(np.nan_to_num(s02)[:, None, None], tau)
        var = np.maximum((prior * target + nu * np.nan_to_num(raw)) / (prior + nu), tau)
    return {"diff": diff, "n": m, "raw": raw, "var": var, "dof": prior + nu, "s0sq": s02, "d0": d0}


def pair_tests(x: np.ndarray, alpha: float = 0.05, moderate: bool = True) -> dict:
    """Every candidate against the best, for a batch of studies ``x`` of shape (studies,
    seeds, candidates), NaN where a run is missing.

    The best is the lowest mean over each candidate's own seeds. Candidate i is compared
    with it over the seeds the two share (n_i of them, n_i >= 2): the mean difference d_i
    and the pair's variance from :func:`moderated_pairs` (``moderate``: the ``moderated``
    rule) on its degrees of freedom. The critical value is Tukey's studentized range for k
    means at the pair's dof over sqrt 2 (Games-Howell's). Without ``moderate`` this is the
    Games-Howell comparison with the best (liberal with few seeds: 0.16 at 11 maps x 3
    seeds, benchmarks/calibration.py).

    Returns arrays: ``best`` (studies,), ``keep`` (studies, k; the best kept, and any
    candidate sharing fewer than 2 seeds with it), ``gap`` (mean paired difference to the
    best; 0 for the best), ``allowance`` (the gap above which a candidate is out; inf
    where untested), ``n_pairs``, ``dof``, ``s0`` (prior sd of a difference), ``d0``."""
    x = np.asarray(x, dtype=float)
    if x.ndim == 2:
        x = x[None]
    S, n, k = x.shape
    pairs = moderated_pairs(x, moderate)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(x, axis=1)
        best = np.argmin(np.where(np.isnan(means), np.inf, means), axis=1)
        at = (np.arange(S)[:, None], np.arange(k)[None, :], best[:, None])  # (candidate, best) of each study
        gap, nb, pooled, dof = pairs["diff"][at], pairs["n"][at].astype(float), pairs["var"][at], pairs["dof"][at]
        tested = (nb >= 2) & (np.arange(k)[None, :] != best[:, None])  # no noise at all: any gap > 0 is out
        q = srange_critical(k, np.where(tested, dof, 1.0), alpha) / math.sqrt(2)
        allowance = np.where(tested, q * np.sqrt(pooled / np.maximum(nb, 1)), np.inf)
    gap = np.where(np.arange(k)[None, :] == best[:, None], 0.0, gap)
    keep = ~(tested & (gap > allowance))
    return {"best": best, "keep": keep, "gap": gap, "allowance": allowance, "n_pairs": nb.astype(int),
            "dof": np.where(tested, dof, np.nan), "s0": np.sqrt(pairs["s0sq"]), "d0": pairs["d0"]}


class Moderated(Rule):
    name = "moderated"
    label = ("each map against the best on the seeds the two share, each pair's seed noise moderated towards the "
             "others' but never below its own, Tukey's studentized range at the pair's degrees of freedom")
    help = "each map against the best on their shared seeds, each pair's noise moderated towards the others'"
    per_pair = True
    # benchmarks/calibration.py (2026-12-03): with 3 seeds and 1:4 noise, complete null, its FWER is
    # 0.066 (5 maps) and 0.073 (11 maps); from 5 seeds it is at most 0.047 in every cell
    few_seeds = (3, "with 3 seeds and noise that differs by map, this rule itself drops a map as good as the best "
                    "in up to 7 % of studies, not 5 % (benchmarks/calibration.py); from 5 seeds it holds 5 %")

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """On a matrix that may be unbalanced (a raced study: each pair uses the seeds it
        shares). ``extra``: ``n_pairs`` and ``dof`` (candidate -> seeds shared with the best
        and the test's degrees of freedom), ``s0`` (prior sd of a paired difference) and
        ``d0`` (its degrees of freedom)."""
        names = [str(c) for c in mat.columns]
        r = pair_tests(mat.to_numpy(dtype=float)[None], alpha)
        keep = set(np.asarray(names)[r["keep"][0]])
        per = lambda key, cast=float: {c: cast(v) for c, v in zip(names, r[key][0])}  # noqa: E731
        order = [str(c) for c in mat.mean().sort_values(kind="stable").index]
        allowance, n_pairs, dof = per("allowance"), per("n_pairs", int), per("dof")
        s0, d0 = float(r["s0"][0]), float(r["d0"][0])
        own = [v for v in allowance.values() if np.isfinite(v)]
        if not own:
            how = "no candidate shares two seeds with the best, so none can be ruled out."
        else:
            prior = (f"prior sd of a paired difference {s0:.3g} nats on {d0:.3g} degrees of freedom"
                     if np.isfinite(s0) and d0 > 0 else "no prior borrowed (the pairs' noise differs too much)")
            how = (f"each pair uses the seeds it shares (up to {max(n_pairs.values())}); {prior}; "
                   f"{span([v for v in dof.values() if np.isfinite(v)])} degrees of freedom per pair; a candidate "
                   f"stays in when its gap to the best is at most its own allowance, {span(own)} nats.")
        return TopGroup(self.name, alpha, tuple(c for c in order if c in keep), names[int(r["best"][0])],
                        per("gap"), allowance, max(own) if own else float("nan"), self.unit,
                        int(mat.notna().sum().max()), self.per_pair, None, sentence(self, alpha, how),
                        extra={"n_pairs": n_pairs, "dof": dof, "s0": s0, "d0": d0})

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        return pair_tests(x, alpha)["keep"]

    def simultaneous_pvalues(self, mat: pd.DataFrame) -> dict:
        """The pair's mean paired difference over the seeds the two share, its variance
        moderated exactly as :func:`pair_tests` moderates a pair with the best
        (:func:`moderated_pairs`), and P(Q > |t| sqrt 2) for Tukey's studentized range Q of
        k means at the pair's degrees of freedom (up to the 0.3 % of
        :func:`~searchmaps.topgroup.critical.srange_critical`'s table, the p decides as the
        allowance does)."""
        names = [str(c) for c in mat.columns]
        k = len(names)
        if k < 2:
            return {}
        pairs = moderated_pairs(mat.to_numpy(dtype=float)[None])
        diff, m, var, dof = pairs["diff"][0], pairs["n"][0], pairs["var"][0], pairs["dof"][0]
        out = {}
        for i, j in zip(*np.triu_indices(k, 1)):
            if m[i, j] < 2:
                out[(names[i], names[j])] = 1.0
            elif not var[i, j] > 0:
                out[(names[i], names[j])] = 0.0 if diff[i, j] != 0 else 1.0
            else:
                stat = abs(diff[i, j]) / math.sqrt(var[i, j] / int(m[i, j])) * math.sqrt(2)
                out[(names[i], names[j])] = float(stats.studentized_range.sf(stat, k, dof[i, j]))
        return out


register(Moderated())
