"""Whether a study's maps' seed noise differs enough that a rule which pools it would
conclude otherwise (:func:`noise_check`, :func:`variance_spread`)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from .critical import complete_block
from .rule import DEFAULT_RULE, get_rule, top_group

POOLED_RULE = "hsd"  # what a rule that assumes equally noisy maps concludes, beside the study's


def variance_spread(mat: pd.DataFrame) -> float:
    """Largest over smallest per-map residual sd in the two-way layout, over the seeds all
    maps share (a pooled rule assumes them equal; see docs/statistics.md for what unequal noise
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
# at 2x (11 maps x 5 seeds, a third of them noisy, 2,000 studies; 0.045 at 1x): experiments/calibration/calibration.py
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
    NOISE_SPREAD, where pooling starts to err, whether or not chance explains it), ``pools``
    (``rule`` itself assumes equal noise), ``pooled_rule`` (:data:`POOLED_RULE`) and, when
    wide, what it concludes: ``pooled_group`` (None otherwise) next to ``group``
    (``rule``'s); ``seeds`` (shared by every map) and ``few_seeds``: the rule's own measured
    caveat (:attr:`Rule.few_seeds`) when noise is wide and the seeds are that few, else None."""
    block = complete_block(mat)
    n, k = block.shape
    spread = variance_spread(mat)
    threshold = max(NOISE_SPREAD, spread_by_chance(k, n)) if n >= 2 and k >= 2 else float("nan")
    unequal = bool(np.isfinite(threshold) and spread > threshold)
    wide = bool(np.isfinite(spread) and spread > NOISE_SPREAD)
    few = get_rule(rule).few_seeds
    return {"spread": spread, "threshold": threshold, "unequal": unequal, "wide": wide, "rule": rule, "seeds": n,
            "few_seeds": few[1] if few and wide and 2 <= n <= few[0] else None,
            "pools": get_rule(rule).pools_noise, "pooled_rule": POOLED_RULE, "group": top_group(mat, rule, alpha),
            "pooled_group": top_group(mat, POOLED_RULE, alpha) if wide else None}
