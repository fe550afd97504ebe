"""Rules that answer "which maps could be the best?" with a set, and what they can resolve.

Every rule takes the ``seeds x candidates`` matrix of one metric (lower is better; paired
on seed; only the seeds every candidate has are used) and returns the **top group**: the
candidates it cannot rule out as the best.

- ``mcb`` (default): Hsu's multiple comparisons with the best (Hsu 1984, 1996) in the
  two-way layout (candidate x seed). The residual error of the additive model, pooled over
  all candidates, with (k-1)(n-1) degrees of freedom, gives one-sided simultaneous
  intervals for each candidate minus the best of the others; candidate i stays in when
  ``mean_i - min_{j != i} mean_j <= d * s * sqrt(2/n)``, d the one-sided Dunnett critical
  value for k-1 comparisons. The true best is in the group with probability >= 1 - alpha.
- ``holm``: paired t-tests of every pair, Holm over all k(k-1)/2 (the statistics module's
  original rule; robust to unequal variances, but it pays for every pair).
- ``friedman``: the rank-based option: ranks within each seed; a candidate stays in when
  its mean rank is within Nemenyi's critical difference (studentized range, all pairs) of
  the lowest. It assumes nothing about the noise's shape, and needs many seeds.

:func:`detectable_effect` gives each rule's minimum detectable effect (80 % power, metric
units) and :func:`seeds_needed` how many seeds a rule needs for a given effect, both from
the study's own residual noise.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

RULES = ("hsd", "mcb", "holm", "friedman")


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


# --------------------------------------------------------------------------- dispatch


def top_group(mat: pd.DataFrame, rule: str = "hsd", alpha: float = 0.05) -> list[str]:
    """The top group of a ``seeds x candidates`` matrix under ``rule``, best first."""
    if rule == "hsd":
        return hsd(mat, alpha)["top_group"]
    if rule == "mcb":
        return mcb(mat, alpha)["top_group"]
    if rule == "friedman":
        return friedman_nemenyi(mat, alpha)["top_group"]
    if rule == "holm":
        from .stats import all_pairs, top_group_of_pairs

        return top_group_of_pairs(mat, all_pairs(mat, "ttest", "holm", 0.95), alpha)
    raise ValueError(f"the top-group rule must be one of {', '.join(RULES)}, got {rule!r}")


# --------------------------------------------------------------------------- power


def _mcb_mde(sd: float, k: int, n: int, alpha: float, power: float) -> float:
    dof = (k - 1) * (n - 1)
    if n < 2 or k < 2 or not sd > 0:
        return float("nan")
    d = dunnett_critical(k - 1, dof, alpha)
    se = sd * math.sqrt(2 / n)
    # a candidate delta worse than the best is ruled out when its gap exceeds d*s*sqrt(2/n)
    return float(optimize.brentq(lambda nc: stats.nct.sf(d, dof, nc) - power, 0.0, 100.0) * se)


def _hsd_mde(sd: float, k: int, n: int, alpha: float, power: float) -> float:
    dof = (k - 1) * (n - 1)
    if n < 2 or k < 2 or not sd > 0:
        return float("nan")
    crit = studentized_range_critical(k, dof, alpha) / math.sqrt(2)  # in units of the difference's SE
    se = sd * math.sqrt(2 / n)
    return float(optimize.brentq(lambda nc: stats.nct.sf(crit, dof, nc) - power, 0.0, 100.0) * se)


def _holm_mde(sd: float, k: int, n: int, alpha: float, power: float) -> float:
    from .stats import min_detectable_effect

    return min_detectable_effect(sd * math.sqrt(2), n, alpha, power, max(1, k * (k - 1) // 2))


def _friedman_mde(sd: float, k: int, n: int, alpha: float, power: float, sims: int = 400) -> float:
    """By simulation: normal noise of ``sd``, one candidate delta worse than k-1 equal ones."""
    if n < 2 or k < 2 or not sd > 0:
        return float("nan")
    rng = np.random.default_rng(0)
    noise = rng.normal(0, sd, size=(sims, n, k))
    cd = nemenyi_cd(k, n, alpha)

    def rate(delta: float) -> float:
        x = noise.copy()
        x[:, :, 0] += delta
        ranks = stats.rankdata(x, axis=2).mean(axis=1)
        return float((ranks[:, 0] - ranks.min(axis=1) > cd).mean())

    hi = sd
    while rate(hi) < power:
        hi *= 2
        if hi > 1e3 * sd:
            return float("inf")  # too few seeds for the ranks ever to separate
    return float(optimize.brentq(lambda x: rate(x) - power, 0.0, hi, xtol=sd * 1e-3))


_MDE = {"hsd": _hsd_mde, "mcb": _mcb_mde, "holm": _holm_mde, "friedman": _friedman_mde}


def detectable_effect(mat: pd.DataFrame, rule: str = "mcb", alpha: float = 0.05, power: float = 0.8,
                      seeds: int | None = None) -> dict:
    """The smallest true gap to the best (metric units) that ``rule`` rules out with
    ``power``, from the study's residual noise (two-way model) at ``seeds`` (default: the
    seeds all candidates share). Returns ``mde``, ``mde_pct`` (of the best mean), ``sd``,
    ``n_seeds``, ``k``."""
    block = complete_block(mat)
    n, k = block.shape
    sd, _ = residual_sd(block.to_numpy(dtype=float)) if k > 1 and n > 1 else (float("nan"), 0)
    n_eval = seeds if seeds is not None else n
    mde = _MDE[rule](sd, k, n_eval, alpha, power) if np.isfinite(sd) else float("nan")
    best = float(block.mean(axis=0).min()) if k else float("nan")
    return {"mde": mde, "mde_pct": 100 * mde / best if best else float("nan"), "sd": sd, "n_seeds": n_eval, "k": k,
            "rule": rule, "alpha": alpha, "power": power}


def seeds_needed(mat: pd.DataFrame, effect: float, rule: str = "mcb", alpha: float = 0.05, power: float = 0.8,
                 max_seeds: int = 200) -> int | None:
    """The fewest seeds with which ``rule`` rules out a candidate ``effect`` (metric units)
    worse than the best with ``power``, at the study's residual noise; None if not within
    ``max_seeds``."""
    for n in range(2, max_seeds + 1):
        mde = detectable_effect(mat, rule, alpha, power, seeds=n)["mde"]
        if np.isfinite(mde) and mde <= effect:
            return n
    return None


# --------------------------------------------------------------------------- the bundle


def analyze(df: pd.DataFrame, metric: str = "val_ppl", reference: str | None = None, alpha: float = 0.05,
            method: str = "ttest", correction: str = "holm", rule: str = "hsd", random_state=0) -> dict:
    """:func:`searchmaps.stats.analyze` (pairwise tests, corrections, summary) with the top
    group chosen by ``rule``. Adds ``rule``, ``rule_detail`` (the rule's own numbers: gaps,
    allowance, constant, residual sd; None for holm) and ``detectable``
    (:func:`detectable_effect` of the rule at the study's seeds)."""
    from .stats import analyze as pairwise_analysis
    from .stats import to_matrix

    if rule not in RULES:
        raise ValueError(f"the top-group rule must be one of {', '.join(RULES)}, got {rule!r}")
    res = pairwise_analysis(df, metric, reference, alpha, method, correction, random_state)
    mat = to_matrix(df, metric)
    detail = {"hsd": hsd, "mcb": mcb, "friedman": friedman_nemenyi}.get(rule)
    res["rule"] = rule
    res["rule_detail"] = detail(mat, alpha) if detail else None
    if rule != "holm":
        res["top_group"] = res["rule_detail"]["top_group"]
    res["detectable"] = detectable_effect(mat, rule, alpha)
    return res


def variance_spread(mat: pd.DataFrame) -> float:
    """Largest over smallest per-map residual sd in the two-way layout (a pooled rule
    assumes them equal; see the README for what unequal noise does to it)."""
    block = complete_block(mat).to_numpy(dtype=float)
    n, k = block.shape
    if n < 2 or k < 2:
        return float("nan")
    e = block - block.mean(axis=0, keepdims=True) - block.mean(axis=1, keepdims=True) + block.mean()
    sds = np.sqrt((e ** 2).sum(axis=0) / max(1, n - 1))
    return float(sds.max() / sds.min()) if sds.min() > 0 else float("inf")
