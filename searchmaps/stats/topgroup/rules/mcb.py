"""``mcb``: Hsu's multiple comparisons with the best (Hsu 1984, 1996) in the two-way layout
(pooled residual error, (k-1)(n-1) dof, the seeds every candidate has): a candidate stays
in when its mean minus the best other mean is at most the one-sided Dunnett allowance
``d s sqrt(2/n)``. The true best is in the group with probability >= 1 - alpha, but it
drops SOME map tied with the best far more often than alpha."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..critical import complete_batch, dunnett_critical, two_way, two_way_batch
from ..rule import Rule, TopGroup, register, sentence


class Mcb(Rule):
    name = "mcb"
    label = "Hsu's multiple comparisons with the best (seed noise pooled over every map)"
    help = "Hsu's MCB"
    pools_noise = True

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """``gap`` is to the best of the OTHER candidates (negative for the best);
        ``extra``: ``d`` (Dunnett's constant), ``sd`` and ``dof``."""
        names, means, order, n, k, sd, dof = two_way(mat)
        gaps = {}
        for i in range(k):
            others = np.delete(means, i)
            gaps[names[i]] = float(means[i] - others.min()) if others.size else float("-inf")
        d, bound = float("nan"), float("inf")
        tested = k >= 2 and dof >= 1 and sd > 0  # else no noise to judge by: everyone stays
        if tested:
            d = dunnett_critical(k - 1, dof, alpha)
            bound = d * sd * math.sqrt(2 / n)
        members = [names[i] for i in order if not tested or gaps[names[i]] <= bound]
        how = (f"residual sd of the candidate + seed model {sd:.3g} nats on {dof} degrees of freedom, "
               f"d = {d:.3g} (one-sided Dunnett, {len(gaps) - 1} comparisons); a candidate stays in when its gap to "
               f"the best of the others is at most {bound:.3g} nats.")
        caveat = ("MCB's guarantee is that the best map is in the group with probability ≥ 1 − α; it may drop a map "
                  "tied with the best (in simulation, some tied map in 11-47 % of all-equal studies), which the "
                  "default rule does not.")
        everyone = [str(c) for c in mat.columns]
        return TopGroup(self.name, alpha, tuple(members), members[0] if members else everyone[0], gaps,
                        {c: bound for c in everyone}, bound, self.unit, n, self.per_pair, None,
                        sentence(self, alpha, how), caveat, extra={"d": d, "sd": sd, "dof": dof})

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        x = complete_batch(x)
        means, sd, dof = two_way_batch(x)
        srt = np.sort(means, axis=1)
        other = np.where(means == srt[:, :1], srt[:, 1:2], srt[:, :1])  # best of the others
        bound = dunnett_critical(x.shape[2] - 1, dof, alpha) * sd * math.sqrt(2 / x.shape[1])
        return (means - other <= bound[:, None]) | ~(sd > 0)[:, None]


register(Mcb())
