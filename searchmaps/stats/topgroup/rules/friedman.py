"""``friedman``: ranks within each seed (ties averaged), over the seeds every candidate has;
a candidate stays in when its mean rank is within Nemenyi's critical difference
(studentized range, all pairs) of the lowest. It assumes nothing about the noise's shape,
needs many seeds, and is not calibrated with unequal noise either (0.08 at 11 maps,
1 : 4)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from ..critical import complete_batch, complete_block, studentized_range_critical
from ..rule import Rule, TopGroup, register, sentence


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical difference of mean ranks for k candidates over n seeds."""
    q = studentized_range_critical(k, 1e6, alpha)
    return float(q / math.sqrt(2) * math.sqrt(k * (k + 1) / (6 * n)))


class Friedman(Rule):
    name = "friedman"
    label = "Friedman ranks with Nemenyi's critical difference"
    help = "ranks with Nemenyi's critical difference"
    unit = "mean rank"
    max_seeds = 60  # its simulated detectable gap is the slowest to compute

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """``gap`` is in mean rank above the lowest, ``bound`` Nemenyi's critical difference;
        ``extra``: ``mean_rank``."""
        block = complete_block(mat)
        names = [str(c) for c in block.columns]
        everyone = [str(c) for c in mat.columns]
        n, k = block.shape
        if k < 2 or n < 2:
            members, mean_rank, cd = names, {}, float("inf")
        else:
            ranks = stats.rankdata(block.to_numpy(dtype=float), axis=1).mean(axis=0)
            cd = nemenyi_cd(k, n, alpha)
            order = np.argsort(ranks, kind="stable")
            members = [names[i] for i in order if ranks[i] - ranks.min() <= cd]
            mean_rank = dict(zip(names, map(float, ranks)))
        low = min(mean_rank.values(), default=0.0)
        how = f"a candidate stays in when its mean rank is within {cd:.3g} of the lowest ({n} seeds)."
        return TopGroup(self.name, alpha, tuple(members), members[0] if members else everyone[0],
                        {c: v - low for c, v in mean_rank.items()}, {c: cd for c in everyone}, cd, self.unit, n,
                        self.per_pair, None, sentence(self, alpha, how), extra={"mean_rank": mean_rank})

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        x = complete_batch(x)
        ranks = stats.rankdata(x, axis=2).mean(axis=1)
        return ranks - ranks.min(axis=1, keepdims=True) <= nemenyi_cd(x.shape[2], x.shape[1], alpha)


register(Friedman())
