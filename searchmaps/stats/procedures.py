"""The paired tests and the multiple-comparison corrections, one frozen record each.

A paired test (:class:`PairedTest`) turns a ``(m, n)`` matrix of paired differences (m
comparisons over n seeds) into two-sided p-values and says what the report needs about it:
its words, whether it is exact (a floor of 2 / 2**n on its p-values: it enumerates the
2**n sign patterns) and the second-opinion test shown beside it. A correction
(:class:`Correction`) adjusts a 1-D array of p-values and says whether it bounds the
family-wise error (what a top group or a race needs; why: :mod:`searchmaps.stats.paired`)
and its words. :data:`PAIRED_TESTS` and :data:`CORRECTIONS` are the registries, keyed by
the name users pass (``method=``/``--test``, ``correction=``/``--correction``); adding one
is one record plus its registry line, and :mod:`searchmaps.stats.paired` and the report
read nothing else. A correction name not registered here is passed to statsmodels'
``multipletests`` as it is (any of its methods works for :func:`~searchmaps.stats.compare`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests


# --------------------------------------------------------------------------- kernels


def signflip_pvalues(diffs, max_exact: int = 16, n_resamples: int = 9999, random_state=0) -> np.ndarray:
    """Two-sided sign-flip permutation p-values of ``mean(d) == 0``, one per row.

    ``diffs`` is ``(m, n)``: m comparisons over the same number n of paired seeds.
    For n <= ``max_exact`` all 2**n sign patterns are enumerated with numpy (same
    p-values as ``scipy.stats.permutation_test(..., permutation_type="samples")``,
    checked in the tests; sums within 1e-10 * sum|d| of the observed one count as
    ties, which unlike scipy's 100-eps relative tolerance also catches ties among
    rounded metrics). Above ``max_exact`` it delegates to
    scipy's Monte Carlo version with ``n_resamples`` draws from ``random_state``.
    """
    d = np.atleast_2d(np.asarray(diffs, dtype=float))
    m, n = d.shape
    if n == 0:
        return np.ones(m)
    if n > max_exact:
        res = stats.permutation_test(
            (d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
            vectorized=True, axis=-1, n_resamples=n_resamples, random_state=random_state,
        )
        return np.atleast_1d(res.pvalue)
    p = np.empty(m)
    chunk = max(1, 2**22 // 2**n)
    for lo in range(0, m, chunk):
        block = d[lo:lo + chunk]
        null = np.concatenate([block[:, :1], -block[:, :1]], axis=1)
        for i in range(1, n):  # every sign pattern, by doubling (no BLAS threads)
            null = np.concatenate([null + block[:, i:i + 1], null - block[:, i:i + 1]], axis=1)
        null = np.abs(null)  # column 0 is the observed sum (all signs +)
        tol = 1e-10 * np.abs(block).sum(axis=1, keepdims=True)  # sums equal up to rounding tie
        p[lo:lo + chunk] = (null >= null[:, :1] - tol).mean(axis=1)
    return p


def wilcoxon_pvalues(diffs, random_state=0) -> np.ndarray:
    """Two-sided exact Wilcoxon signed-rank p-values, one per row of ``(m, n)`` diffs.

    The sign-flip test on the signed ranks of ``|d|`` (mid-ranks for ties; zero
    differences dropped, as ``scipy.stats.wilcoxon``'s default does): the exact
    conditional null distribution, so tied ranks are handled exactly where scipy would
    fall back to the normal approximation; for tie-free rows it equals
    ``scipy.stats.wilcoxon(d, method="exact")`` (checked in the tests). The smallest
    p is 2 / 2**n over n non-zero differences. Above 16 seeds the permutations are
    sampled (see :func:`signflip_pvalues`)."""
    d = np.atleast_2d(np.asarray(diffs, dtype=float))
    if d.shape[1] == 0:
        return np.ones(d.shape[0])
    zeros = (d == 0).sum(axis=1, keepdims=True)
    ranks = stats.rankdata(np.abs(d), axis=1) - zeros  # zeros rank lowest: shift to ranks among the rest
    signed = np.where(d == 0, 0.0, np.sign(d) * ranks)  # a zero adds nothing, whichever its sign
    return signflip_pvalues(signed, random_state=random_state)


def ttest_pvalues(diffs, random_state=None) -> np.ndarray:
    """Two-sided one-sample t-test p-values of ``mean(d) == 0``, one per row of ``(m, n)``
    diffs (the paired t-test); NaN for constant rows (the callers map NaN to 1)."""
    d = np.atleast_2d(np.asarray(diffs, dtype=float))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant rows; handled by the caller
        return stats.ttest_1samp(d, 0.0, axis=1).pvalue


def holm_adjust(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values, the formula of statsmodels' ``multipletests``
    (pinned to it in the tests) without its ``gc.collect()`` on every call (~20 ms with
    pandas loaded, which would dominate racing and calibration loops)."""
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1))
    out = np.empty_like(p)
    out[order] = np.minimum(adj, 1.0)
    return out


def multipletests_adjust(method: str) -> Callable[[np.ndarray], np.ndarray]:
    """The adjustment of statsmodels' ``multipletests`` method ``method``."""
    def adjust(p: np.ndarray) -> np.ndarray:
        return multipletests(p, method=method)[1]
    return adjust


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class PairedTest:
    """A paired test. ``name``: what users pass; ``words``: its name in the report
    (``"paired t-test"``); ``pvalues(diffs, rng)``: two-sided p-values of the rows of a
    complete ``(m, n)`` difference matrix, n >= 2 (NaN where undefined; the caller maps NaN
    and all-zero rows to 1); ``exact``: it enumerates the 2**n sign patterns, so its
    smallest p over n seeds is 2 / 2**n (else it has no floor); ``companion``: the test
    the report shows beside it as a second opinion."""
    name: str
    words: str
    pvalues: Callable[[np.ndarray, np.random.Generator], np.ndarray]
    exact: bool
    companion: str

    def min_pvalue(self, n_seeds: int) -> float:
        """The smallest two-sided p over ``n_seeds`` paired seeds (1 below 2 seeds)."""
        n = int(n_seeds)
        if n < 2:
            return 1.0
        return 2.0 / 2**n if self.exact else 0.0

    def min_seeds(self, threshold: float) -> int:
        """The fewest paired seeds whose smallest p is at most ``threshold`` (alpha / m)."""
        return max(2, math.ceil(math.log2(2 / threshold) - 1e-12)) if self.exact else 2


@dataclass(frozen=True)
class Correction:
    """A multiple-comparison correction. ``name``: what users pass; ``words``: its name in
    the report (``"Holm"``); ``adjust(p)``: adjusted p-values of a non-empty, NaN-free 1-D
    array; ``family_wise``: it bounds the chance of ANY false rejection (a top group and a
    race accept only these); for a family-wise one, ``bar`` (``"Holm's first step"``) and
    ``under`` (``"to pass Holm's first step"``) name what needs p <= alpha / m in the report's
    floor sentences; ``refusal``: why the report refuses it, where it does."""
    name: str
    words: str
    adjust: Callable[[np.ndarray], np.ndarray]
    family_wise: bool
    bar: str = ""
    under: str = ""
    refusal: str | None = None


def _signflip(d, rng):
    return signflip_pvalues(d, random_state=rng)


def _wilcoxon(d, rng):
    return wilcoxon_pvalues(d, random_state=rng)


PAIRED_TESTS: dict[str, PairedTest] = {
    "ttest": PairedTest("ttest", "paired t-test", ttest_pvalues, exact=False, companion="signflip"),
    "signflip": PairedTest("signflip", "exact paired sign-flip test", _signflip, exact=True, companion="ttest"),
    "wilcoxon": PairedTest("wilcoxon", "exact Wilcoxon signed-rank test", _wilcoxon, exact=True, companion="ttest"),
}

CORRECTIONS: dict[str, Correction] = {
    "holm": Correction("holm", "Holm", holm_adjust, family_wise=True, bar="Holm's first step",
                       under="to pass Holm's first step"),
    "bonferroni": Correction("bonferroni", "Bonferroni", multipletests_adjust("bonferroni"), family_wise=True,
                             bar="the Bonferroni correction", under="under Bonferroni"),
    "fdr_bh": Correction("fdr_bh", "Benjamini-Hochberg", multipletests_adjust("fdr_bh"), family_wise=False,
                         refusal="the top group needs family-wise control, and Benjamini-Hochberg drops a map as "
                                 "good as the best from it in about 1 study in 6 (5 equal and 6 worse maps); use "
                                 "holm (the default) or bonferroni"),
}

METHODS = tuple(PAIRED_TESTS)  # compatibility: the registered test names, in registry order
FAMILY_WISE = tuple(k for k, c in CORRECTIONS.items() if c.family_wise)  # bound the chance of ANY false rejection


def paired_test_of(method: str) -> PairedTest:
    """The registered test ``method``; ValueError naming the registered ones otherwise."""
    try:
        return PAIRED_TESTS[method]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {tuple(PAIRED_TESTS)}, got {method!r}") from None


def correction_of(correction: str) -> Correction:
    """The registered correction ``correction``, or one that hands the name to statsmodels'
    ``multipletests`` (not family-wise: :data:`FAMILY_WISE` lists the ones that are)."""
    rec = CORRECTIONS.get(correction)
    if rec is None:
        rec = Correction(str(correction), str(correction), multipletests_adjust(correction), family_wise=False)
    return rec
