"""The seed bootstrap every ladder statistic shares.

Input everywhere: a long DataFrame of successful rows with columns ``candidate``,
``seed``, ``rung``, ``horizon_target`` (the rung's tokens or training FLOPs) and a metric
(default ``val_loss``, nats; lower is better). Seeds are paired across candidates and
rungs (seed s of every candidate is the same data order and initial draw, and a rung is a
branch of the same run), so every bootstrap resamples **seeds**, the same draw for every
candidate and every rung, keeping that pairing. Here: the ``values[seed, candidate, rung]``
cube (:func:`cube`), the resamples, percentile intervals, rank correlations, and how far a
bootstrap over few seeds can be trusted (:func:`bootstrap_coverage`, :func:`few_seeds`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

N_BOOT = 2000
PUBLISHED_SD = 0.25  # assumed seed sd of a published single-seed number (perplexity; see agreement_with)
MIN_COVERAGE = 0.90  # a bootstrap over seeds whose mean interval would cover less than this is flagged
COVERAGE_SOURCE = "experiments/calibration/bootstrap-coverage-2026-12-07.txt"
MEASURED_COVERAGE = {  # what the bootstraps that stay cover at 3, 5, 10 seeds, from COVERAGE_SOURCE (a test keeps
    # them equal): synthetic studies copying ilr-table1-rope-scale's rows, the project's own functions
    "tau first-last": {3: 0.800, 5: 0.915, 10: 0.995},
    "tau vs table": {3: 0.650, 5: 0.710, 10: 0.760},
    "tau vs table (seeds)": {3: 0.805, 5: 0.900, 10: 0.955},
    "prediction": {3: 0.725, 5: 0.838, 10: 0.887},
    "prediction (shared floor)": {3: 0.637, 5: 0.900, 10: 0.863},
    "gap at target": {3: 0.775, 5: 0.833, 10: 0.933},
    "gap at target (shared floor)": {3: 0.692, 5: 0.817, 10: 0.892},
}


def cube(df: pd.DataFrame, metric: str) -> tuple[np.ndarray, list[str], list[int], list[float], list[int]]:
    """``values[seed, candidate, rung]`` over the seeds every candidate has at every rung
    it reached; NaN where a candidate did not reach a rung."""
    for col in ("candidate", "seed", "rung", "horizon_target", metric):
        if col not in df.columns:
            raise ValueError(f"ladder rows need a {col!r} column")
    rungs = sorted(int(r) for r in df["rung"].unique())
    cands = sorted(str(c) for c in df["candidate"].unique())
    horizons = [float(df.loc[df["rung"] == r, "horizon_target"].iloc[0]) for r in rungs]
    piv = df.pivot_table(index="seed", columns=["candidate", "rung"], values=metric, aggfunc="last")
    seeds = [int(s) for s in piv.index]
    out = np.full((len(seeds), len(cands), len(rungs)), np.nan)
    for (c, r), col in piv.items():
        out[:, cands.index(str(c)), rungs.index(int(r))] = col.to_numpy(dtype=float)
    return out, cands, rungs, horizons, seeds


def shared_seeds(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates with every seed (axis 1 of ``block[seed, cand]``) and the seeds all of them share."""
    has = ~np.isnan(block)
    cands = has.any(axis=0)
    seeds = has[:, cands].all(axis=1)
    cands = cands & has[seeds].all(axis=0)
    return seeds, cands


def boot_indices(n_seeds: int, n_boot: int, rng) -> np.ndarray:
    return rng.integers(0, n_seeds, size=(n_boot, n_seeds))


def once_per_input(fn):
    """``fn`` of arrays, computed once per distinct input: a bootstrap over a few seeds draws
    the same resample (the same means, bit for bit) many times (5 seeds: about 120 distinct
    of 1,000 draws), and a fit or a rank correlation is a pure function of its input, so each
    distinct one is computed once and its answer reused: the same numbers as computing every
    draw, in a fraction of the time."""
    done = {}

    def cached(*arrays: np.ndarray):
        key = tuple((a.shape, a.tobytes()) for a in arrays)
        if key not in done:
            done[key] = fn(*arrays)
        return done[key]
    return cached


def interval(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    draws = draws[np.isfinite(draws)]
    if not draws.size:
        return float("nan"), float("nan")
    lo, hi = np.percentile(draws, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def bootstrap_coverage(n_seeds: int, level: float = 0.95) -> float:
    """What a percentile-bootstrap ``level`` interval of a mean over ``n_seeds`` normal
    seeds actually covers: it is about ``mean ± z·s·sqrt((n-1)/n)/sqrt(n)`` where the exact
    interval needs Student's t on n-1 degrees of freedom, so the coverage is
    ``P(|t_{n-1}| < z·sqrt((n-1)/n))``: 0.75 with 3 seeds, 0.85 with 5, 0.90 from 10."""
    if n_seeds < 2:
        return float("nan")
    z = stats.norm.ppf(0.5 + level / 2)
    return float(2 * stats.t.cdf(z * math.sqrt((n_seeds - 1) / n_seeds), n_seeds - 1) - 1)


def measured_coverage(n_seeds: int) -> tuple[int, dict[str, float]] | None:
    """The measured coverage of the nominal 95 % bootstraps that stay (:data:`MEASURED_COVERAGE`)
    at the largest seed count measured that is not above ``n_seeds`` (a bootstrap's coverage
    grows with the seeds: a lower count's is the honest bound); None below the fewest measured."""
    counts = [n for n in sorted(next(iter(MEASURED_COVERAGE.values()))) if n <= n_seeds]
    if not counts:
        return None
    return counts[-1], {q: by_n[counts[-1]] for q, by_n in MEASURED_COVERAGE.items()}


def few_seeds(n_seeds: int) -> bool:
    """True when a bootstrap over ``n_seeds`` seeds is too few to trust its 95 % interval:
    the interval of a mean would cover less than :data:`MIN_COVERAGE` (fewer than 10 seeds)."""
    cov = bootstrap_coverage(n_seeds)
    return not (cov >= MIN_COVERAGE)


def tau_rho(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: NaN is the honest answer
        return float(stats.kendalltau(a, b).statistic), float(stats.spearmanr(a, b).statistic)


def tau_rho_small(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """:func:`tau_rho` without scipy's per-call overhead, for the few candidates a
    bootstrap loop ranks thousands of times: Kendall's τ-b from the signs of all pairs,
    Spearman's ρ as Pearson's r of average ranks (ties as scipy treats them; equal to it
    up to rounding, tested)."""
    iu = np.triu_indices(len(a), 1)
    sa, sb = np.sign(a[:, None] - a[None, :])[iu], np.sign(b[:, None] - b[None, :])[iu]
    den = math.sqrt(float((sa * sa).sum() * (sb * sb).sum()))
    tau = float((sa * sb).sum() / den) if den else float("nan")
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return tau, float((ra * rb).sum() / den) if den else float("nan")



def interval_inf(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Like :func:`interval` for draws that may be +inf (order statistics, no interpolation)."""
    draws = draws[~np.isnan(draws)]
    if not draws.size:
        return float("nan"), float("nan")
    lo, hi = np.quantile(draws, [0.5 * (1 - level), 0.5 * (1 + level)], method="inverted_cdf")
    return float(lo), float(hi)


def fit_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x; NaN when x does not vary (or is not finite)."""
    dx = x - x.mean()
    ss = float(dx @ dx)
    return float(dx @ (y - y.mean()) / ss) if np.isfinite(ss) and ss > 0 else float("nan")

