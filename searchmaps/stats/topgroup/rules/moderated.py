"""``moderated`` (the default): every candidate against the best on their own paired
differences, over the seeds the two share, each pair's variance moderated towards the
others' (empirical Bayes) but never below the two maps' own noise, and Tukey's studentized
range at the pair's degrees of freedom. It holds alpha when the maps' seed noise differs,
where pooling does not, with nearly hsd's power when it does not.

With few seeds it switches to Dunnett's T3 (:data:`FEW_SEEDS`): a pair sharing at most 4
seeds (3 degrees of freedom of its own) takes the Welch–Satterthwaite dof of its two maps'
variances where their noise sets its variance, and the larger of Tukey's value and Šidák's
t over the comparisons (all k(k-1)/2 pairs with 3 seeds or fewer, the k - 1 with the best
at 4). With so few seeds a 4x noise spread cannot be told from chance, and Tukey's
shared-denominator value is too small for statistics with separate ones: with 1:4 noise,
all maps equal, Tukey's value alone dropped a map tied with the best in 6.6 % (5 maps) and
7.3 % (11 maps) of studies at 3 seeds and 5.9 % at 4 (5 maps); T3 gives 2.9-4.6 % there, and
over the k - 1 comparisons alone still 6.5 % at 3 seeds x 11 maps (experiments/calibration/calibration.py,
experiments/calibration/README.md). From 5 seeds nothing changes, so neither does the power there.

All of its arithmetic is here: :func:`moderated_pairs` sets up every pair, which both the
decisions (:func:`pair_tests`) and the p-values (:meth:`Moderated.simultaneous_pvalues`)
read."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from ..critical import fit_f_dist, sidak_t_critical, sidak_t_sf, srange_critical
from ..rule import Rule, TopGroup, register, sentence, span


FEW_SEEDS = 4  # a pair sharing at most this many seeds is judged by T3 (module docstring)
SIDAK_ALL_PAIRS = 3  # ... over all k(k-1)/2 pairs up to this many seeds, over the k - 1 with the best above


def moderated_pairs(x: np.ndarray, moderate: bool = True, t3_seeds: int = FEW_SEEDS) -> dict:
    """Every ordered pair (i, j) of every study of a batch ``x`` (studies, seeds, k), NaN
    where a run is missing, over the seeds the two share.

    ``diff`` (studies, k, k): the mean paired difference x_i - x_j; ``n``: the seeds the
    pair shares; ``raw``: the variance of its differences on n - 1 degrees of freedom (NaN
    under 2 seeds). ``moderate`` shrinks each pair's variance towards a prior (empirical
    Bayes, as limma does for genes): :func:`~searchmaps.stats.topgroup.critical.fit_f_dist` over
    all k(k-1)/2 pairs' variances gives s0^2 and its dof d0, d0 capped at the two-way
    layout's residual dof; the target is the larger of s0^2 and tau_ij = s_i^2 + s_j^2
    (per-map variances solved from every pair), and ``var`` is
    ``max((d0 target + (n - 1) raw) / (d0 + n - 1), tau_ij)`` on ``dof`` = d0 + n - 1
    degrees of freedom. Equally noisy maps so borrow the pooled error's strength (d0
    large), while a pair of noisy maps is never judged by the quiet maps' noise (the tau
    floor; without it the prior shrank noisy pairs and FWER reached 0.14). Without
    ``moderate``, or with two maps, ``var`` is the pair's own on n - 1 dof. ``s0sq`` and
    ``d0`` (studies,): the prior (NaN, 0 without one). ``var`` and ``dof`` are meaningful
    where n >= 2.

    ``few``: the pair shares at most ``t3_seeds`` seeds (:data:`FEW_SEEDS`; 0 turns T3 off,
    as the rule was until 2026-12-04) and ``moderate`` is on, so it is judged by Dunnett's T3:
    where the floor tau sets ``var``, ``dof`` is at most the Welch–Satterthwaite dof of
    s_i^2 + s_j^2, each on the pair's n - 1 (between n - 1 and 2(n - 1)); ``family``: how
    many comparisons Šidák's t covers for it (k(k-1)/2 up to :data:`SIDAK_ALL_PAIRS` shared
    seeds, else k - 1)."""
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
        dof = prior + nu
        few = (m <= t3_seeds) & moderate
        if moderated:
            a, b = per_map[:, :, None], per_map[:, None, :]
            welch = np.where(a + b > 0, (a + b) ** 2 / ((a ** 2 + b ** 2) / np.maximum(nu, 1.0)), nu)
            dof = np.where(few & (var <= tau) & (tau > 0), np.minimum(dof, welch), dof)
        family = np.where(m <= SIDAK_ALL_PAIRS, k * (k - 1) // 2, k - 1)
    return {"diff": diff, "n": m, "raw": raw, "var": var, "dof": dof, "s0sq": s02, "d0": d0, "few": few,
            "family": family}


def critical(k: int, dof: np.ndarray, few: np.ndarray, family: np.ndarray, alpha: float) -> np.ndarray:
    """A pair's critical value for its t statistic: Tukey's studentized range of k means at
    its dof over sqrt 2, and where ``few`` (T3) at least Šidák's t over ``family``
    comparisons at the same dof."""
    q = srange_critical(k, dof, alpha) / math.sqrt(2)
    return np.where(few, np.maximum(q, sidak_t_critical(family, dof, alpha)), q)


def pair_tests(x: np.ndarray, alpha: float = 0.05, moderate: bool = True, t3_seeds: int = FEW_SEEDS) -> dict:
    """Every candidate against the best, for a batch of studies ``x`` of shape (studies,
    seeds, candidates), NaN where a run is missing.

    The best is the lowest mean over each candidate's own seeds. Candidate i is compared
    with it over the seeds the two share (n_i of them, n_i >= 2): the mean difference d_i
    and the pair's variance from :func:`moderated_pairs` (``moderate``: the ``moderated``
    rule) on its degrees of freedom. The critical value is Tukey's studentized range for k
    means at the pair's dof over sqrt 2 (Games-Howell's), and for a pair sharing at most
    ``t3_seeds`` seeds at least Šidák's t (Dunnett's T3; :func:`moderated_pairs`). Without
    ``moderate`` this is the Games-Howell comparison with the best (liberal with few seeds:
    0.16 at 11 maps x 3 seeds, experiments/calibration/calibration.py).

    Returns arrays: ``best`` (studies,), ``keep`` (studies, k; the best kept, and any
    candidate sharing fewer than 2 seeds with it), ``gap`` (mean paired difference to the
    best; 0 for the best), ``allowance`` (the gap above which a candidate is out; inf
    where untested), ``n_pairs``, ``dof``, ``s0`` (prior sd of a difference), ``d0``."""
    x = np.asarray(x, dtype=float)
    if x.ndim == 2:
        x = x[None]
    S, n, k = x.shape
    pairs = moderated_pairs(x, moderate, t3_seeds)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(x, axis=1)
        best = np.argmin(np.where(np.isnan(means), np.inf, means), axis=1)
        at = (np.arange(S)[:, None], np.arange(k)[None, :], best[:, None])  # (candidate, best) of each study
        gap, nb, pooled, dof = pairs["diff"][at], pairs["n"][at].astype(float), pairs["var"][at], pairs["dof"][at]
        few, family = pairs["few"][at], pairs["family"][at]
        tested = (nb >= 2) & (np.arange(k)[None, :] != best[:, None])  # no noise at all: any gap > 0 is out
        q = critical(k, np.where(tested, dof, 1.0), few, family, alpha)
        allowance = np.where(tested, q * np.sqrt(pooled / np.maximum(nb, 1)), np.inf)
    gap = np.where(np.arange(k)[None, :] == best[:, None], 0.0, gap)
    keep = ~(tested & (gap > allowance))
    return {"best": best, "keep": keep, "gap": gap, "allowance": allowance, "n_pairs": nb.astype(int),
            "dof": np.where(tested, dof, np.nan), "s0": np.sqrt(pairs["s0sq"]), "d0": pairs["d0"]}


class Moderated(Rule):
    name = "moderated"
    label = ("each map against the best on the seeds the two share, each pair's seed noise moderated towards the "
             "others' but never below its own, Tukey's studentized range at the pair's degrees of freedom, "
             "Dunnett's T3 where a pair shares at most 4 seeds")
    help = ("each map against the best on their shared seeds, each pair's noise moderated towards the others' "
            "(Dunnett's T3 with at most 4 shared seeds)")
    per_pair = True
    # no few_seeds caveat: with T3 at <= 4 shared seeds its FWER is at most alpha + 2 SE in every cell of
    # experiments/calibration/calibration.py (3, 4, 5 and 10 seeds; experiments/calibration/calibration-2026-12-04.txt)

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """On a matrix that may be unbalanced (a raced study: each pair uses the seeds it
        shares). ``extra``: ``n_pairs`` and ``dof`` (candidate -> seeds shared with the best
        and the test's degrees of freedom), ``s0`` (prior sd of a paired difference) and
        ``d0`` (its degrees of freedom), ``t3`` (the candidates judged by Dunnett's T3: at most
        :data:`FEW_SEEDS` seeds shared with the best)."""
        names = [str(c) for c in mat.columns]
        r = pair_tests(mat.to_numpy(dtype=float)[None], alpha)
        keep = set(np.asarray(names)[r["keep"][0]])
        per = lambda key, cast=float: {c: cast(v) for c, v in zip(names, r[key][0])}  # noqa: E731
        order = [str(c) for c in mat.mean().sort_values(kind="stable").index]
        allowance, n_pairs, dof = per("allowance"), per("n_pairs", int), per("dof")
        s0, d0 = float(r["s0"][0]), float(r["d0"][0])
        own = [v for v in allowance.values() if np.isfinite(v)]
        t3 = [c for c in names if np.isfinite(allowance[c]) and n_pairs[c] <= FEW_SEEDS]
        if not own:
            how = "no candidate shares two seeds with the best, so none can be ruled out."
        else:
            prior = (f"prior sd of a paired difference {s0:.3g} nats on {d0:.3g} degrees of freedom"
                     if np.isfinite(s0) and d0 > 0 else "no prior borrowed (the pairs' noise differs too much)")
            how = (f"each pair uses the seeds it shares (up to {max(n_pairs.values())}); {prior}; "
                   f"{span([v for v in dof.values() if np.isfinite(v)])} degrees of freedom per pair; a candidate "
                   f"stays in when its gap to the best is at most its own allowance, {span(own)} nats.")
            if t3:
                how += (f" {'Every pair' if len(t3) == len(own) else f'{len(t3)} of the {len(own)} pairs'} with the "
                        f"best share{'s' if len(t3) == len(own) or len(t3) == 1 else ''} at most {FEW_SEEDS} seeds, too few "
                        f"to tell a map's own noise from chance: there the allowance is Dunnett's T3 (Welch's degrees "
                        f"of freedom, Šidák's t over the comparisons), which holds α when noise differs by map.")
        return TopGroup(self.name, alpha, tuple(c for c in order if c in keep), names[int(r["best"][0])],
                        per("gap"), allowance, max(own) if own else float("nan"), self.unit,
                        int(mat.notna().sum().max()), self.per_pair, None, sentence(self, alpha, how),
                        extra={"n_pairs": n_pairs, "dof": dof, "s0": s0, "d0": d0, "t3": t3})

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        return pair_tests(x, alpha)["keep"]

    def simultaneous_pvalues(self, mat: pd.DataFrame) -> dict:
        """The pair's mean paired difference over the seeds the two share, its variance
        moderated exactly as :func:`pair_tests` moderates a pair with the best
        (:func:`moderated_pairs`), and P(Q > |t| sqrt 2) for Tukey's studentized range Q of
        k means at the pair's degrees of freedom; for a pair judged by T3 (``few``) the larger
        of that and Šidák's p over its ``family`` of comparisons at the same dof (up to the
        0.3 % of :func:`~searchmaps.stats.topgroup.critical.srange_critical`'s table, the p decides
        as the allowance does)."""
        names = [str(c) for c in mat.columns]
        k = len(names)
        if k < 2:
            return {}
        pairs = moderated_pairs(mat.to_numpy(dtype=float)[None])
        diff, m, var, dof = pairs["diff"][0], pairs["n"][0], pairs["var"][0], pairs["dof"][0]
        few, family = pairs["few"][0], pairs["family"][0]
        out = {}
        for i, j in zip(*np.triu_indices(k, 1)):
            if m[i, j] < 2:
                out[(names[i], names[j])] = 1.0
            elif not var[i, j] > 0:
                out[(names[i], names[j])] = 0.0 if diff[i, j] != 0 else 1.0
            else:
                t = abs(diff[i, j]) / math.sqrt(var[i, j] / int(m[i, j]))
                p = float(stats.studentized_range.sf(t * math.sqrt(2), k, dof[i, j]))
                if few[i, j]:
                    p = max(p, float(sidak_t_sf(t, family[i, j], dof[i, j])))
                out[(names[i], names[j])] = p
        return out


register(Moderated())
