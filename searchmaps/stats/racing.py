"""Racing: stop training candidates that are already significantly worse.

Pure decisions over result rows (no training here). Rows are the long DataFrame of
:mod:`searchmaps.stats` (``candidate``, ``seed``, a metric, lower is better); a
race adds one seed to every surviving candidate per round and calls
:func:`race_step` after each round. Comparisons are paired on seed and corrected
over all pairs of the candidates still racing (see :mod:`searchmaps.stats`), with a
family-wise correction: a wrong drop loses a map that could be the best.

Default rule: the top group's own, :data:`searchmaps.stats.topgroup.DEFAULT_RULE` (``moderated``:
each map against the best on their shared seeds, the pair's noise moderated towards the
others'), which resolves differences close to what pooling the noise over every map does
(``hsd``) and stays calibrated when the maps' seed noise differs, so clearly worse maps
leave after the first round. ``holm`` (paired t-tests of every pair) is the conservative
alternative; the exact sign-flip test cannot reject with few seeds (its smallest p-value
is 2 / 2**n against Holm's alpha / m), which would turn a race into the full factorial.

Looks: one after every round, from ``min_seeds`` seeds up to and including the last one at
``max_seeds`` (the survivors' full seeds), each at ``alpha / looks``; the last look's
survivors are racing's answer (the scheduler runs it too).
"""

from __future__ import annotations

import pandas as pd

from . import topgroup
from .paired import all_pairs, best_candidate, order_by_mean, oriented, require_family_wise, to_matrix


def race_step(df: pd.DataFrame, metric: str = "val_ppl", alpha: float = 0.05, method: str = "ttest",
              correction: str = "holm", min_seeds: int = 3, max_seeds: int | None = None,
              candidates=None, random_state=0, rule: str = topgroup.DEFAULT_RULE) -> dict:
    """Which candidates keep racing after the rows seen so far.

    ``candidates`` restricts the race to those names (default: every candidate in
    ``df``). A candidate is dropped when it is significantly worse than the current
    best (lowest mean): corrected p <= ``alpha`` over all pairs of racing
    candidates that share at least ``min_seeds`` seeds; pairs with fewer are not
    tested, so nothing is dropped before ``min_seeds`` paired seeds exist.
    ``correction`` must be family-wise (:data:`searchmaps.stats.FAMILY_WISE`).

    Looking again after every seed inflates the chance of ever dropping wrongly
    (8 equal candidates, looks at 3..10 seeds: 0.13 at alpha 0.05). With
    ``max_seeds`` (the planned seeds per candidate) each call tests at
    ``alpha / looks``, looks = max_seeds - min_seeds + 1 (Bonferroni over looks;
    0.02 in the case above); None means a single look at ``alpha``.

    That is the ``holm`` rule's race (a rule that decides by the study's own test). With
    any other ``rule`` (:data:`searchmaps.stats.topgroup.RULES`; default ``moderated``) a
    candidate is dropped when the rule (at ``alpha / looks``, once every racer has at least
    ``min_seeds`` seeds) leaves it out of the top group; ``moderated`` compares each pair
    over the seeds it shares, the pooled rules over the seeds every racer has.

    Returns ``survivors`` (ordered by mean, best first), ``dropped``
    ({candidate: why, in words}), ``best``, ``n_seeds`` ({candidate: seeds so far}),
    ``family_size`` (pairs tested; 0 for a pooled rule) and ``alpha_per_look``.
    """
    require_family_wise(correction)
    mat = to_matrix(df, metric)
    if candidates is not None:
        missing = sorted(set(candidates) - set(mat.columns))
        if missing:
            raise ValueError(f"no result rows for racing candidates {missing}")
        mat = mat[sorted(candidates)]
    looks = 1 if max_seeds is None else max(1, int(max_seeds) - int(min_seeds) + 1)
    level = alpha / looks
    best = best_candidate(mat)
    n_seeds = {str(c): int(v) for c, v in mat.count().items()}
    if not topgroup.get_rule(rule).study_test:
        order = order_by_mean(mat)
        if min(n_seeds.values(), default=0) < min_seeds or mat.shape[1] < 2:
            return {"survivors": order, "dropped": {}, "best": best, "n_seeds": n_seeds, "family_size": 0,
                    "alpha_per_look": level}
        detail = topgroup.rule_detail(mat, rule, level)
        keep = set(detail.members)
        gap, allowance = detail.gap, detail.allowance
        dropped = {c: f"gap {gap.get(c, float('nan')):.3g} beyond the {rule} allowance "
                      f"{allowance.get(c, float('nan')):.3g} (alpha {level:.3g} per look)" for c in order if c not in keep}
        return {"survivors": [c for c in order if c in keep], "dropped": dropped, "best": best, "n_seeds": n_seeds,
                "family_size": 0, "alpha_per_look": level}
    pairs = all_pairs(mat, method, correction, 0.95, random_state, min_pairs=max(2, int(min_seeds)))
    survivors, dropped = [], {}
    for c in order_by_mean(mat):
        r = oriented(pairs, c, best) if c != best else None
        if r is not None and r["n_pairs"] >= min_seeds and r["p_adjusted"] <= level and r["mean_diff"] > 0:
            dropped[c] = f"corrected p = {r['p_adjusted']:.3g}"
        else:
            survivors.append(c)
    return {"survivors": survivors, "dropped": dropped, "best": best, "n_seeds": n_seeds,
            "family_size": pairs["family_size"], "alpha_per_look": level}
