"""``hsd``: Tukey's honestly significant difference against the best in the two-way layout
(candidate x seed), the residual error pooled over every map on (k-1)(n-1) dof, over the
seeds every candidate has: candidate i stays in when ``mean_i - min_j mean_j <= q s /
sqrt(n)``, q the studentized range quantile for k means. The chance that it drops ANY map
as good as the best is at most alpha with equally noisy maps (the range of the tied maps'
means never exceeds the range of all); with 1 : 4 noise sd between maps it drops a map as
good as the best in 10-18 % of studies, more seeds or not."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from ..critical import complete_batch, complete_block, residual_sd, studentized_range_critical, two_way, two_way_batch
from ..rule import Rule, TopGroup, register, sentence


class Hsd(Rule):
    name = "hsd"
    label = "Tukey's HSD against the best (seed noise pooled over every map)"
    help = "Tukey's HSD with the noise pooled over every map"
    pools_noise = True

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """``gap`` is to the best of all; ``extra``: ``q``, ``sd`` and ``dof``."""
        names, means, order, n, k, sd, dof = two_way(mat)
        gaps = {names[i]: float(means[i] - means.min()) for i in range(k)}
        q, bound = float("nan"), float("inf")
        tested = k >= 2 and dof >= 1 and sd > 0  # else no noise to judge by: everyone stays
        if tested:
            q = studentized_range_critical(k, dof, alpha)
            bound = q * sd / math.sqrt(n)
        members = [names[i] for i in order if not tested or gaps[names[i]] <= bound]
        how = (f"residual sd of the candidate + seed model {sd:.3g} nats on {dof} degrees of freedom, "
               f"q = {q:.3g} (studentized range of {len(gaps)} means); a candidate stays in when its gap to the best "
               f"is at most {bound:.3g} nats.")
        everyone = [str(c) for c in mat.columns]
        return TopGroup(self.name, alpha, tuple(members), members[0] if members else everyone[0], gaps,
                        {c: bound for c in everyone}, bound, self.unit, n, self.per_pair, None,
                        sentence(self, alpha, how), extra={"q": q, "sd": sd, "dof": dof})

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        x = complete_batch(x)
        means, sd, dof = two_way_batch(x)
        gap = means - means.min(axis=1, keepdims=True)
        bound = studentized_range_critical(x.shape[2], dof, alpha) * sd / math.sqrt(x.shape[1])
        return (gap <= bound[:, None]) | ~(sd > 0)[:, None]

    def simultaneous_pvalues(self, mat: pd.DataFrame) -> dict:
        """The difference of means over the seeds every map has, on the pooled residual sd,
        against the studentized range of k means."""
        names = [str(c) for c in mat.columns]
        k = len(names)
        if k < 2:
            return {}
        block = complete_block(mat)
        n = len(block)
        sd, dof = residual_sd(block.to_numpy(dtype=float))
        means = block.mean(axis=0).to_numpy(dtype=float)
        out = {}
        for i in range(k):
            for j in range(i + 1, k):
                ok = n >= 2 and dof >= 1 and sd > 0
                stat = abs(means[i] - means[j]) / (sd / math.sqrt(n)) if ok else float("nan")
                out[(names[i], names[j])] = float(stats.studentized_range.sf(stat, k, dof)) if ok else 1.0
        return out


register(Hsd())
