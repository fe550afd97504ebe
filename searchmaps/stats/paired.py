"""Which reuse maps really win: paired statistics over seeds.

Input everywhere is a long DataFrame of successful runs with columns ``candidate``
(str, the candidate's label, e.g. ``"4,2,1,1|rope"``), ``seed`` (int) and a metric
column (default ``val_ppl``; lower is better); :func:`reference_candidate` also reads
``map``. Seed ``s`` of two candidates shares data order and init draw, so every
comparison is PAIRED on seed and uses only the seeds both candidates have. Results are
plain dicts and DataFrames; metric units are kept (a ``mean_diff`` of 0.3 on
``val_ppl`` means 0.3 perplexity points).

Tests (``method``, records in :mod:`searchmaps.stats.procedures`): the paired t-test (``"ttest"``, the default everywhere), the exact
sign-flip permutation test (``"signflip"``) and the exact Wilcoxon signed-rank test
(``"wilcoxon"``). The two exact tests have a floor: with n paired seeds their smallest
two-sided p is 2 / 2**n (0.25 with 3 seeds, 0.0625 with 5), so they can reject only when
2 / 2**n <= alpha / m for m comparisons (8 candidates, 28 pairs, alpha 0.05: n >= 11
seeds). :func:`resolution` says whether a test can reject at all.

Multiple comparisons. "Candidate vs the best" compares against a candidate chosen
by looking at the same data, so correcting only over the comparisons that were
reported is anti-conservative (with 8 equal candidates that family-wise error is
about 0.1 at alpha 0.05; see ``tests/test_stats_paired.py``). Every comparison is
therefore corrected as a member of the family of ALL K(K-1)/2 candidate pairs:
whichever candidate turns out best, its comparisons are in that family, so the
family-wise error (Holm) of any reported subset is at most alpha.

The top group needs family-wise control. It is "the best and every candidate not
significantly worse", so one false rejection drops a map that is as good as the best.
Benjamini-Hochberg bounds only the expected share of false rejections among all
rejections, and the many true differences of a study buy it room for false ones: with
5 equally good maps and 6 maps 5 noise-sd worse (5 seeds, 2000 simulated studies) it
dropped a good map from the top group in 16 % of studies, Holm in 1 %. :func:`top_group_of_pairs`'s
callers (:func:`searchmaps.stats.analyze`, :mod:`searchmaps.stats.racing`) therefore accept only the corrections in
:data:`FAMILY_WISE`; :func:`compare`, :func:`pairwise_pvalues` and
:func:`planned_comparisons` take any ``multipletests`` method.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import stats

from .procedures import (CORRECTIONS, FAMILY_WISE, METHODS, PAIRED_TESTS, correction_of,  # noqa: F401  (re-exported)
                         paired_test_of, signflip_pvalues, wilcoxon_pvalues)


# --------------------------------------------------------------------------- shape


def to_matrix(df: pd.DataFrame, metric: str = "val_ppl") -> pd.DataFrame:
    """Pivot long rows to a ``seeds x candidates`` matrix (NaN where a run is
    missing); index is the sorted seeds, columns the sorted candidate names."""
    for col in ("candidate", "seed", metric):
        if col not in df.columns:
            raise ValueError(f"result rows need a {col!r} column; have {list(df.columns)}")
    dup = df.duplicated(["candidate", "seed"])
    if dup.any():
        first = df.loc[dup, ["candidate", "seed"]].iloc[0].tolist()
        raise ValueError(f"duplicate result rows for (candidate, seed) = {tuple(first)}")
    mat = df.pivot(index="seed", columns="candidate", values=metric).astype(float)
    return mat.sort_index().sort_index(axis=1)


def reference_candidate(df: pd.DataFrame) -> str | None:
    """The baseline: the first candidate (by name) whose ``map`` column is all ones
    (``1,1,1,1``); None when there is none or the rows have no ``map`` column."""
    if "map" not in df.columns:
        return None
    maps = df[["candidate", "map"]].drop_duplicates().sort_values("candidate", kind="stable")
    for cand, text in maps.itertuples(index=False):
        if all(part.strip() == "1" for part in str(text).split(",")):
            return str(cand)
    return None


def best_candidate(mat: pd.DataFrame) -> str:
    """Lowest mean over each candidate's own seeds (ties: first by name)."""
    return order_by_mean(mat)[0]


def order_by_mean(mat: pd.DataFrame) -> list[str]:
    """The candidates (columns of a :func:`to_matrix` matrix), lowest mean first."""
    return [str(c) for c in mat.mean().sort_values(kind="stable").index]


# --------------------------------------------------------------------------- per candidate


def summarize(df: pd.DataFrame, metric: str = "val_ppl", confidence: float = 0.95) -> pd.DataFrame:
    """Per candidate, sorted by mean (best first): ``n_seeds``, ``mean``, ``std``
    (ddof=1), ``sem``, and the t-interval ``ci_low``/``ci_high`` at ``confidence``;
    std/sem/CI are NaN with a single seed. Units are the metric's."""
    g = df.groupby("candidate")[metric]
    out = pd.DataFrame({"n_seeds": g.count(), "mean": g.mean(), "std": g.std(ddof=1)})
    out["sem"] = out["std"] / np.sqrt(out["n_seeds"])
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(0.5 + confidence / 2, out["n_seeds"] - 1) * out["sem"]
    out["ci_low"], out["ci_high"] = out["mean"] - half, out["mean"] + half
    out = out.sort_values(["mean"], kind="stable").reset_index()
    return out[["candidate", "n_seeds", "mean", "std", "sem", "ci_low", "ci_high"]]


# --------------------------------------------------------------------------- paired tests


def min_pvalue(method: str, n_seeds: int) -> float:
    """The smallest two-sided p-value ``method`` can give over ``n_seeds`` paired seeds:
    2 / 2**n for the exact sign-flip and Wilcoxon tests (only all-same-sign
    differences reach it), 0 for the t-test (any p, given a large enough effect), 1
    below 2 seeds (nothing is tested)."""
    return paired_test_of(method).min_pvalue(n_seeds)


def resolution(method: str, n_seeds: int, alpha: float = 0.05, n_comparisons: int = 1) -> dict:
    """Whether ``method`` can reject anything in a family of ``n_comparisons`` tests
    over ``n_seeds`` paired seeds, under Holm (or Bonferroni) at ``alpha``: its first
    step needs p <= alpha / m. Returns ``method``, ``n_seeds``, ``n_comparisons``,
    ``min_p`` (:func:`min_pvalue`), ``threshold`` (alpha / m), ``can_reject`` and
    ``min_seeds`` (the fewest paired seeds for which it can)."""
    m = max(1, int(n_comparisons))
    threshold = alpha / m
    min_p = min_pvalue(method, n_seeds)
    need = paired_test_of(method).min_seeds(threshold)
    return {"method": method, "n_seeds": int(n_seeds), "n_comparisons": m, "min_p": min_p,
            "threshold": threshold, "can_reject": bool(min_p <= threshold), "min_seeds": need}


def _pvalues(d: np.ndarray, method: str, rng) -> np.ndarray:
    """p-values of rows of a complete ``(m, n)`` difference matrix."""
    m, n = d.shape
    test = paired_test_of(method)
    if n < 2:
        return np.ones(m)
    p = test.pvalues(d, rng)
    p = np.where(np.all(d == 0, axis=1), 1.0, p)  # no difference at all
    return np.where(np.isnan(p), 1.0, np.clip(p, 0.0, 1.0))


def _diff_table(d: np.ndarray, method: str, confidence: float, rng) -> dict:
    """Column arrays (n_pairs, mean_diff, sd_diff, CI, p_value) for rows of a
    complete ``(m, n)`` difference matrix."""
    m, n = d.shape
    with np.errstate(all="ignore"):
        mean = d.mean(axis=1) if n else np.full(m, np.nan)
        sd = d.std(axis=1, ddof=1) if n > 1 else np.full(m, np.nan)
        half = stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n) if n > 1 else np.nan
    return {"n_pairs": np.full(m, n), "mean_diff": mean, "sd_diff": sd,
            "diff_ci_low": mean - half, "diff_ci_high": mean + half, "p_value": _pvalues(d, method, rng)}


def paired_test(a, b, method: str = "ttest", confidence: float = 0.95, random_state=0) -> dict:
    """Paired test of ``a`` vs ``b``, 1-D arrays over the same seeds (pairs with a
    NaN are dropped). Returns ``method``, ``n``, ``mean_diff`` (a - b, metric units),
    ``sd_diff``, the t-interval ``diff_ci_low``/``diff_ci_high`` of the mean
    difference and the two-sided ``p_value`` of ``method``. n < 2 or all differences
    zero give p = 1."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D over the same seeds, got {a.shape} and {b.shape}")
    d = (a - b)[~(np.isnan(a) | np.isnan(b))]
    row = _diff_table(d[None, :], method, confidence, np.random.default_rng(random_state))
    out = {"method": method, "n": int(row.pop("n_pairs")[0])}
    return {**out, **{k: float(v[0]) for k, v in row.items()}}


# --------------------------------------------------------------------------- all pairs


def adjust_pvalues(p, correction: str | None = "holm") -> np.ndarray:
    """Multiple-testing adjusted p-values of a 1-D array (NaN-free), by
    ``statsmodels``' ``multipletests`` method name (a registered correction's own
    ``adjust``, e.g. Holm without statsmodels' per-call ``gc.collect()``: see
    :mod:`searchmaps.stats.procedures`); None leaves them as they are."""
    p = np.asarray(p, dtype=float)
    if not correction or p.size == 0:
        return p.copy()
    return correction_of(correction).adjust(p)


def require_family_wise(correction: str | None) -> None:
    """ValueError unless ``correction`` bounds the family-wise error (see the module
    docstring: a top group or a race drops good maps under anything weaker)."""
    rec = CORRECTIONS.get(correction) if isinstance(correction, str) else None
    if rec is None or not rec.family_wise:
        names = [k for k, c in CORRECTIONS.items() if c.family_wise]
        raise ValueError(f"a top group needs family-wise control: correction must be one of "
                         f"{', '.join(names)}, got {correction!r}")


_STAT_COLS = ("n_pairs", "mean_diff", "sd_diff", "diff_ci_low", "diff_ci_high", "p_value")


def all_pairs(mat: pd.DataFrame, method: str = "ttest", correction: str | None = "holm", confidence: float = 0.95,
              random_state=0, min_pairs: int = 2) -> dict:
    """Paired statistics of a - b for every unordered pair of columns of a
    :func:`to_matrix` matrix (a < b by name), keyed ``(a, b)``: n_pairs, mean_diff,
    sd_diff, diff_ci_low/high, p_value, and ``p_adjusted`` corrected over every pair
    that has at least ``min_pairs`` (>= 2) shared seeds: the family, its size under
    the key ``"family_size"``; pairs outside it get ``p_adjusted`` 1. ``random_state``
    (a seed or a numpy Generator) drives the Monte Carlo tests above 16 seeds."""
    rng = np.random.default_rng(random_state)
    x = mat.to_numpy()
    names = list(mat.columns)
    pairs = list(itertools.combinations(range(len(names)), 2))
    cols = {k: np.full(len(pairs), np.nan) for k in _STAT_COLS}
    diffs = [x[:, i] - x[:, j] for i, j in pairs]
    keep = [~np.isnan(d) for d in diffs]
    by_n: dict[int, list[int]] = {}
    for k, mask in enumerate(keep):
        by_n.setdefault(int(mask.sum()), []).append(k)
    for n, idx in sorted(by_n.items()):  # batch the comparisons that share a seed count
        block = np.array([diffs[k][keep[k]] for k in idx]).reshape(len(idx), n)
        for col, vals in _diff_table(block, method, confidence, rng).items():
            cols[col][idx] = vals
    tested = cols["n_pairs"] >= max(2, min_pairs)
    cols["p_adjusted"] = np.ones(len(pairs))
    cols["p_adjusted"][tested] = adjust_pvalues(cols["p_value"][tested], correction)
    out: dict = {"family_size": int(tested.sum())}
    for k, (i, j) in enumerate(pairs):
        out[(names[i], names[j])] = {c: float(v[k]) for c, v in cols.items()}
    return out


def oriented(pairs: dict, cand: str, against: str) -> dict:
    """One pair of an :func:`all_pairs` result as ``cand - against``: candidate,
    against, n_pairs (int), mean_diff, diff_ci_low/high, p_value, p_adjusted."""
    if (cand, against) in pairs:
        r = dict(pairs[(cand, against)])
    else:
        r = dict(pairs[(against, cand)])
        r["mean_diff"] = -r["mean_diff"]
        r["diff_ci_low"], r["diff_ci_high"] = -r["diff_ci_high"], -r["diff_ci_low"]
    r["n_pairs"] = int(r["n_pairs"])
    del r["sd_diff"]
    return {"candidate": cand, "against": against, **r}


_COMPARE_COLS = ["candidate", "against", "kind", "n_pairs", "mean_diff", "diff_ci_low", "diff_ci_high",
                 "p_value", "p_adjusted", "significant"]


def comparison_table(mat: pd.DataFrame, pairs: dict, ref: str | None, alpha: float) -> pd.DataFrame:
    rows, seen = [], set()
    for kind, against in (("vs_best", best_candidate(mat)), ("vs_reference", ref)):
        if against is None:
            continue
        for c in order_by_mean(mat):
            key = frozenset((c, against))
            if c == against or key in seen:
                continue
            seen.add(key)
            rows.append({**oriented(pairs, c, against), "kind": kind})
    out = pd.DataFrame(rows, columns=_COMPARE_COLS[:-1])
    out["significant"] = out["p_adjusted"] <= alpha
    out.attrs["family_size"] = pairs["family_size"]
    return out[_COMPARE_COLS]


def top_group_of_pairs(mat: pd.DataFrame, pairs: dict, alpha: float) -> list[str]:
    """The best candidate of ``mat`` plus every candidate ``pairs`` (from :func:`all_pairs`)
    does not call significantly worse than it, ordered by mean."""
    best = best_candidate(mat)
    keep = [best]
    for c in order_by_mean(mat):
        if c != best:
            r = oriented(pairs, c, best)
            if not (r["p_adjusted"] <= alpha and r["mean_diff"] > 0):
                keep.append(c)
    return keep


def pvalue_matrix(mat: pd.DataFrame, pairs: dict) -> pd.DataFrame:
    out = pd.DataFrame(np.nan, index=mat.columns, columns=mat.columns)
    for key, r in pairs.items():
        if key != "family_size":
            out.loc[key[0], key[1]] = out.loc[key[1], key[0]] = r["p_adjusted"]
    return out


def check_reference(df: pd.DataFrame, mat: pd.DataFrame, reference: str | None) -> str | None:
    ref = reference if reference is not None else reference_candidate(df)
    if ref is not None and ref not in mat.columns:
        raise ValueError(f"reference {ref!r} is not among the candidates")
    return ref


def compare(df: pd.DataFrame, metric: str = "val_ppl", reference: str | None = None, method: str = "ttest",
            correction: str | None = "holm", alpha: float = 0.05, confidence: float = 0.95,
            random_state=0) -> pd.DataFrame:
    """Every candidate vs the best (lowest mean) and vs the reference.

    ``reference`` defaults to :func:`reference_candidate` (the all-ones map).
    Each unordered pair appears once: a vs_reference row is left out when that
    pair is already a vs_best row. Columns: candidate, against, kind
    (``vs_best``/``vs_reference``), n_pairs, mean_diff (candidate - against, metric
    units; > 0 means the candidate is worse), diff_ci_low/high (per-comparison
    t-interval at ``confidence``), p_value (``method``), p_adjusted
    (``correction``, a ``multipletests`` method name, over all K(K-1)/2 pairs; see
    the module docstring) and significant (p_adjusted <= alpha). The family size
    is in ``.attrs["family_size"]``.
    """
    mat = to_matrix(df, metric)
    pairs = all_pairs(mat, method, correction, confidence, random_state)
    return comparison_table(mat, pairs, check_reference(df, mat, reference), alpha)


def pairwise_pvalues(df: pd.DataFrame, metric: str = "val_ppl", method: str = "ttest",
                     correction: str | None = "holm", random_state=0) -> pd.DataFrame:
    """Square ``candidates x candidates`` matrix of corrected pairwise p-values
    (the same numbers :func:`compare` reports), NaN on the diagonal."""
    mat = to_matrix(df, metric)
    return pvalue_matrix(mat, all_pairs(mat, method, correction, 0.95, random_state))


def friedman(df: pd.DataFrame, metric: str = "val_ppl") -> dict | None:
    """Friedman omnibus test over the seeds every candidate has. None unless there
    are >= 3 candidates and >= 2 complete seeds; else ``statistic``,
    ``p_value``, ``n_seeds``, ``n_candidates``."""
    mat = to_matrix(df, metric).dropna()
    if mat.shape[1] < 3 or mat.shape[0] < 2:
        return None
    with np.errstate(all="ignore"):
        res = stats.friedmanchisquare(*mat.to_numpy().T)
    p = float(res.pvalue) if np.isfinite(res.pvalue) else 1.0
    return {"statistic": float(res.statistic), "p_value": p,
            "n_seeds": int(mat.shape[0]), "n_candidates": int(mat.shape[1])}


def planned_comparisons(df: pd.DataFrame, pairs, metric: str = "val_ppl", method: str = "ttest",
                        correction: str | None = "holm", alpha: float = 0.05, confidence: float = 0.95,
                        random_state=0) -> pd.DataFrame:
    """Pre-specified hypotheses ``[(a, b), ...]`` (candidate names), each a paired test
    of a vs b, corrected over THIS family only. Named before the results are seen, a few
    planned questions ("does 4,2,1,1 beat 2,2,2,2?") keep their power, where the same pair
    inside the all-pairs family of :func:`compare` pays for every other pair; so a pair
    can be significant here and not there.

    Returns one row per pair: candidate, against, n_pairs, mean_diff (a - b), diff_ci_low,
    diff_ci_high, p_value (``method``), p_adjusted, significant (p_adjusted <= alpha)."""
    mat = to_matrix(df, metric)
    rows = []
    for a, b in pairs:
        missing = [c for c in (a, b) if c not in mat.columns]
        if missing:
            raise ValueError(f"planned comparison {a} vs {b}: no result rows for {', '.join(missing)}")
        r = paired_test(mat[a].to_numpy(), mat[b].to_numpy(), method=method, confidence=confidence,
                        random_state=random_state)
        rows.append({"candidate": a, "against": b, "n_pairs": r["n"], "mean_diff": r["mean_diff"],
                     "diff_ci_low": r["diff_ci_low"], "diff_ci_high": r["diff_ci_high"], "p_value": r["p_value"]})
    out = pd.DataFrame(rows, columns=["candidate", "against", "n_pairs", "mean_diff", "diff_ci_low",
                                      "diff_ci_high", "p_value"])
    out["p_adjusted"] = adjust_pvalues(out["p_value"].to_numpy(), correction) if len(out) else []
    out["significant"] = out["p_adjusted"] <= alpha
    return out
