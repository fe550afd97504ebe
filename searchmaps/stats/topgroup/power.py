"""What a rule can resolve at a study's noise: the smallest gap it rules out with 80 % power
(:func:`detectable_effect`, from :meth:`~searchmaps.stats.topgroup.rule.Rule.mde_in_sd`) and how
many seeds a given gap needs (:func:`seeds_needed`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .critical import complete_block, residual_sd
from .rule import DEFAULT_RULE, get_rule


def detectable_effect(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05, power: float = 0.8,
                      seeds: int | None = None) -> dict:
    """The smallest true gap to the best (metric units) that ``rule`` rules out with
    ``power``: its ``mde_in_sd`` times the study's seed noise (the residual sd of the
    two-way model over the seeds all candidates share), at ``seeds`` (default: those
    seeds). Returns ``mde``, ``mde_pct`` (of the best mean), ``sd``, ``n_seeds``, ``k``,
    ``rule``, ``alpha``, ``power``."""
    r = get_rule(rule)
    block = complete_block(mat)
    n, k = block.shape
    sd, _ = residual_sd(block.to_numpy(dtype=float)) if k > 1 and n > 1 else (float("nan"), 0)
    n_eval = seeds if seeds is not None else n
    mde = r.mde_in_sd(k, int(n_eval), alpha, power) * sd if np.isfinite(sd) and sd > 0 else float("nan")
    best = float(block.mean(axis=0).min()) if k else float("nan")
    return {"mde": mde, "mde_pct": 100 * mde / best if best else float("nan"), "sd": sd, "n_seeds": n_eval, "k": k,
            "rule": rule, "alpha": alpha, "power": power}


def seeds_needed(mat: pd.DataFrame, effect: float, rule: str = DEFAULT_RULE, alpha: float = 0.05,
                 power: float = 0.8, max_seeds: int | None = None) -> int | None:
    """The fewest seeds with which ``rule`` rules out a candidate ``effect`` (metric units)
    worse than the best with ``power``, at the study's residual noise; None if not within
    ``max_seeds`` (default: the rule's ``max_seeds``). Bisection on the seeds (the
    detectable gap falls with them)."""
    max_seeds = get_rule(rule).max_seeds if max_seeds is None else max_seeds

    def ok(n: int) -> bool:
        mde = detectable_effect(mat, rule, alpha, power, seeds=n)["mde"]
        return bool(np.isfinite(mde) and mde <= effect)

    if not ok(max_seeds):
        return None
    lo, hi = 1, max_seeds  # ok(hi), not ok(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid >= 2 and ok(mid) else (mid, hi)
    while hi > 2 and ok(hi - 1):  # Monte Carlo noise: make it the fewest
        hi -= 1
    return hi
