"""Racing: stop training candidates that are already significantly worse.

Pure decisions over result rows (no training here). Rows are the long DataFrame of
:mod:`searchmaps.stats` (``candidate``, ``seed``, a metric, lower is better); a
race adds one seed to every surviving candidate per round and calls
:func:`race_step` after each round. Comparisons are paired on seed and corrected
over all pairs of the candidates still racing (see :mod:`searchmaps.stats`).

Default test: the paired t-test. The exact sign-flip test cannot reject with few
seeds (its smallest p-value is 2 / 2**n against Holm's alpha / m; 8 candidates
need 11 seeds), which would turn a race into the full factorial.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from searchmaps.stats import _all_pairs, _best, _by_mean, _oriented, to_matrix, top_group


def race_step(df: pd.DataFrame, metric: str = "val_ppl", alpha: float = 0.05, method: str = "ttest",
              correction: str | None = "holm", min_seeds: int = 3, max_seeds: int | None = None,
              candidates=None, random_state=0) -> dict:
    """Which candidates keep racing after the rows seen so far.

    ``candidates`` restricts the race to those names (default: every candidate in
    ``df``). A candidate is dropped when it is significantly worse than the current
    best (lowest mean): corrected p <= ``alpha`` over all pairs of racing
    candidates that share at least ``min_seeds`` seeds; pairs with fewer are not
    tested, so nothing is dropped before ``min_seeds`` paired seeds exist.

    Looking again after every seed inflates the chance of ever dropping wrongly
    (8 equal candidates, looks at 3..10 seeds: 0.13 at alpha 0.05). With
    ``max_seeds`` (the planned seeds per candidate) each call tests at
    ``alpha / looks``, looks = max_seeds - min_seeds + 1 (Bonferroni over looks;
    0.02 in the case above); None means a single look at ``alpha``.

    Returns ``survivors`` (ordered by mean, best first), ``dropped``
    ({candidate: p_adjusted}), ``best``, ``n_seeds`` ({candidate: seeds so far}),
    ``family_size`` (pairs tested) and ``alpha_per_look``.
    """
    mat = to_matrix(df, metric)
    if candidates is not None:
        missing = sorted(set(candidates) - set(mat.columns))
        if missing:
            raise ValueError(f"no result rows for racing candidates {missing}")
        mat = mat[sorted(candidates)]
    pairs = _all_pairs(mat, method, correction, 0.95, np.random.default_rng(random_state),
                       min_pairs=max(2, int(min_seeds)))
    looks = 1 if max_seeds is None else max(1, int(max_seeds) - int(min_seeds) + 1)
    level = alpha / looks
    best = _best(mat)
    survivors, dropped = [], {}
    for c in _by_mean(mat):
        r = _oriented(pairs, c, best) if c != best else None
        if r is not None and r["n_pairs"] >= min_seeds and r["p_adjusted"] <= level and r["mean_diff"] > 0:
            dropped[c] = float(r["p_adjusted"])
        else:
            survivors.append(c)
    return {"survivors": survivors, "dropped": dropped, "best": best,
            "n_seeds": {str(c): int(v) for c, v in mat.count().items()},
            "family_size": pairs["family_size"], "alpha_per_look": level}


def _rows(values: np.ndarray, names: list[str]) -> pd.DataFrame:
    """Long rows from a ``seeds x candidates`` array."""
    n, k = values.shape
    return pd.DataFrame({"candidate": np.tile(np.asarray(names, dtype=object), n),
                         "seed": np.repeat(np.arange(n), k), "val_ppl": values.ravel()})


def simulate_race(true_means, noise_sd: float, max_seeds: int, start_seeds: int = 3, alpha: float = 0.05,
                  rng=None, seed_sd: float | None = None, method: str = "ttest",
                  correction: str | None = "holm", min_seeds: int = 3) -> dict:
    """Race on simulated data with known truth, next to the full factorial.

    Run ``s`` of candidate ``c`` scores ``true_means[c] + seed_sd * z_s +
    noise_sd * e_sc`` (z, e standard normal; ``z_s`` is shared by every candidate
    on seed s, so pairing removes it; ``seed_sd`` defaults to ``noise_sd``). Every
    candidate starts with ``start_seeds`` seeds; each round :func:`race_step`
    drops candidates and every survivor gets one more seed, until ``max_seeds`` or
    a single survivor. The full factorial trains every candidate on ``max_seeds``
    seeds (the same draws) and takes :func:`searchmaps.stats.top_group`.

    Returns ``top_group`` (racing's final survivors), ``trainings``, ``dropped_at``
    ({candidate: seeds it had when dropped}), ``full_top_group``,
    ``full_trainings`` (n_candidates * max_seeds), ``share`` (trainings /
    full_trainings), ``true_best`` (``"c0"``-style name of the lowest true mean),
    ``true_best_kept`` and ``same_top_group`` (racing's set == the full one).
    """
    rng = np.random.default_rng(rng)
    mu = np.asarray(true_means, dtype=float)
    k = mu.size
    seed_sd = noise_sd if seed_sd is None else seed_sd
    names = [f"c{i}" for i in range(k)]
    values = mu + seed_sd * rng.normal(size=(max_seeds, 1)) + noise_sd * rng.normal(size=(max_seeds, k))
    col = {c: i for i, c in enumerate(names)}

    survivors, n, dropped_at = list(names), min(start_seeds, max_seeds), {}
    first_look = min(max(start_seeds, min_seeds), max_seeds)  # alpha is split over looks first_look..max_seeds
    trainings = k * n
    while True:
        idx = [col[c] for c in survivors]
        step = race_step(_rows(values[:n, idx], survivors), "val_ppl", alpha, method, correction,
                         first_look, max_seeds)
        dropped_at.update({c: n for c in step["dropped"]})
        survivors = step["survivors"]
        if len(survivors) == 1 or n >= max_seeds:
            break
        n += 1
        trainings += len(survivors)

    full = top_group(_rows(values, names), "val_ppl", alpha, method, correction)
    true_best = names[int(np.argmin(mu))]
    return {"top_group": survivors, "trainings": int(trainings), "seeds_used": n, "dropped_at": dropped_at,
            "full_top_group": full, "full_trainings": k * max_seeds,
            "share": trainings / (k * max_seeds), "true_best": true_best,
            "true_best_kept": true_best in survivors, "same_top_group": set(survivors) == set(full)}
