"""``holm``: paired t-tests of every pair, Holm over all k(k-1)/2, the best kept with every
candidate not significantly worse than it (the statistics module's original rule; robust
to unequal variances, but it pays for every pair). In a study it decides by the study's
own test and correction (``study_test``), which racing and the report then use."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from ...paired import all_pairs, best_candidate, oriented, top_group_of_pairs
from ..critical import complete_batch
from ..rule import Rule, TopGroup, register, sentence


class Holm(Rule):
    name = "holm"
    label = "paired t-tests of every pair, Holm-corrected"
    help = "all-pairs t-tests"
    per_pair = True
    study_test = True

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """Paired t-tests, Holm over every pair; ``p`` is each candidate's corrected p against
        the best, the allowances NaN (it decides by p-values)."""
        pairs = all_pairs(mat, "ttest", "holm", 0.95)
        best = best_candidate(mat)
        rows = {str(c): oriented(pairs, str(c), best) for c in mat.columns if str(c) != best}
        how = "every candidate not significantly worse than the best in the all-pairs family."
        return TopGroup(self.name, alpha, tuple(top_group_of_pairs(mat, pairs, alpha)), best,
                        {best: 0.0, **{c: r["mean_diff"] for c, r in rows.items()}},
                        {str(c): float("nan") for c in mat.columns}, float("nan"), self.unit,
                        int(mat.notna().sum().max()), self.per_pair, {c: r["p_adjusted"] for c, r in rows.items()},
                        sentence(self, alpha, how))

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        x = complete_batch(x)
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


register(Holm())
