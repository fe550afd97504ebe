"""How small a difference the current seeds can resolve with the paired t-test (pure)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize, stats

from .paired import best_candidate, to_matrix


def min_detectable_effect(sd_diff: float, n_seeds: int, alpha: float = 0.05, power: float = 0.8,
                          n_comparisons: int = 1) -> float:
    """Smallest true mean difference (metric units) that a two-sided paired t-test
    over ``n_seeds`` seeds detects with probability ``power`` at level
    ``alpha / n_comparisons``, given the sd of paired differences ``sd_diff``.
    Solved on the noncentral t (``scipy.stats.nct``); NaN for n_seeds < 2."""
    n = int(n_seeds)
    if n < 2 or not sd_diff > 0:
        return float("nan")
    df, a = n - 1, alpha / n_comparisons
    crit = stats.t.ppf(1 - a / 2, df)

    def gap(dz: float) -> float:  # power at effect dz (in sd_diff units) minus target
        nc = dz * math.sqrt(n)
        lower = np.nan_to_num(stats.nct.cdf(-crit, df, nc))  # the wrong-sign tail, ~0
        return stats.nct.sf(crit, df, nc) + lower - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
    return float(optimize.brentq(gap, 0.0, hi) * sd_diff)


def detectable_difference(df: pd.DataFrame, metric: str = "val_ppl", alpha: float = 0.05, power: float = 0.8,
                          n_comparisons: int | None = None, seeds=None) -> dict:
    """How small a difference the current seeds can resolve with the paired t-test.

    ``sd_diff`` is the sd of paired differences pooled over the comparisons vs
    the best; ``n_seeds`` the median number of seeds shared with the best;
    ``n_comparisons`` defaults to all K(K-1)/2 pairs (the family :func:`compare`
    corrects over). Returns those, ``alpha``, ``power``, ``mde`` (metric units) at the
    current seeds and ``by_seeds`` (DataFrame n_seeds -> mde over ``seeds``, default
    3..2n+4). The exact tests' floor is :func:`resolution`'s business.
    """
    mat = to_matrix(df, metric)
    k = mat.shape[1]
    m = n_comparisons if n_comparisons is not None else max(1, k * (k - 1) // 2)
    best = best_candidate(mat)
    ss, dof, ns = 0.0, 0, []
    for c in mat.columns:
        if c == best:
            continue
        d = (mat[c] - mat[best]).dropna().to_numpy()
        ns.append(len(d))
        if len(d) > 1:
            ss, dof = ss + ((d - d.mean()) ** 2).sum(), dof + len(d) - 1
    sd = math.sqrt(ss / dof) if dof else float("nan")
    n = int(np.median(ns)) if ns else 0
    grid = list(seeds) if seeds is not None else list(range(3, 2 * max(n, 3) + 5))
    by = pd.DataFrame({"n_seeds": grid,
                       "mde": [min_detectable_effect(sd, s, alpha, power, m) for s in grid]})
    return {"sd_diff": sd, "n_seeds": n, "n_comparisons": m, "alpha": alpha, "power": power,
            "mde": min_detectable_effect(sd, n, alpha, power, m), "by_seeds": by}

