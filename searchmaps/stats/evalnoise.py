"""The evaluation's own noise: how much a row's validation loss, and a difference between two
maps' means, would move had other held-out windows been scored. A bootstrap over the
evaluation's windows (:func:`eval_noise`): every draw resamples the window indices once and
applies the same draw to every row, since every map and seed is scored on the same windows
(so a difference between maps is paired in its windows as in its seeds). Given each window's
held-out document (``docs``), it resamples documents instead, each drawn with all its windows
(a cluster bootstrap): windows of one document share its topic and style, so resampling them
one by one as if independent understates the evaluation's noise. Beside it the seeds' noise of
the same quantities, from the rows' validation losses."""

from __future__ import annotations

import itertools

import numpy as np

N_BOOT = 2000


def eval_noise(rows: list[tuple[str, int, float, np.ndarray]], n_boot: int = N_BOOT, seed: int = 0,
               docs=None) -> dict | None:
    """``rows``: (candidate, seed, val_loss, per-window losses) of one horizon's successful
    rows. Rows whose window count differs from the most common one are left out (another
    evaluation). ``docs``: each window's document (as many as the windows kept, else ignored):
    every draw takes as many documents as there are, with replacement, and a row's mean is over
    the drawn documents' windows. Returns None with fewer than 2 windows; else ``windows``,
    ``rows``, ``documents`` (0: windows resampled), and:

    * ``row_sd``: median over rows of the bootstrap sd of the row's mean window loss;
    * ``diff_sd``: median over pairs of maps of the bootstrap sd of the difference between
      their means over seeds (NaN with one map);
    * ``seed_row_sd``: median over maps (2+ seeds) of the sd of val_loss over seeds;
    * ``seed_diff_sd``: median over pairs of maps of sd(paired per-seed difference) / sqrt(n)
      over the seeds the two share (2+), the seeds' sd of the difference of means;
    * ``row_share`` and ``diff_share``: the evaluation's variance as a fraction of the seeds'
      (NaN where the seeds' is not measured or 0)."""
    if not rows:
        return None
    sizes = [len(w) for *_, w in rows]
    n_win = max(set(sizes), key=lambda k: (sizes.count(k), k))
    rows = [r for r in rows if len(r[3]) == n_win]
    if n_win < 2:
        return None
    x = np.asarray([np.asarray(r[3], dtype=float) for r in rows])  # rows x windows
    rng = np.random.default_rng(seed)
    by_doc = docs is not None and len(docs) == n_win
    groups = np.unique(np.asarray(docs), return_inverse=True)[1].ravel() if by_doc \
        else np.arange(n_win)  # a window is its own group: the plain bootstrap over windows
    n_docs = int(groups.max()) + 1
    draws = rng.integers(0, n_docs, size=(n_boot, n_docs))
    picked = np.zeros((n_boot, n_docs))
    np.add.at(picked, (np.repeat(np.arange(n_boot), n_docs), draws.ravel()), 1.0)
    counts = picked[:, groups]  # draws x windows: how often each window's document was drawn
    boot = (x @ counts.T) / counts.sum(axis=1)  # rows x draws: each row's mean over each draw's windows
    row_sd = float(np.median(boot.std(axis=1, ddof=1)))

    cands = sorted({r[0] for r in rows})
    by = {c: [i for i, r in enumerate(rows) if r[0] == c] for c in cands}
    means = {c: boot[by[c]].mean(axis=0) for c in cands}
    pairs = list(itertools.combinations(cands, 2))
    diff_sd = float(np.median([np.std(means[a] - means[b], ddof=1) for a, b in pairs])) if pairs else float("nan")

    loss = {(r[0], r[1]): float(r[2]) for r in rows}
    seeds = {c: {r[1] for r in rows if r[0] == c} for c in cands}
    sds = [np.std([loss[c, s] for s in seeds[c]], ddof=1) for c in cands if len(seeds[c]) >= 2]
    seed_row_sd = float(np.median(sds)) if sds else float("nan")
    dsd = []
    for a, b in pairs:
        shared = sorted(seeds[a] & seeds[b])
        if len(shared) >= 2:
            d = [loss[a, s] - loss[b, s] for s in shared]
            dsd.append(np.std(d, ddof=1) / np.sqrt(len(shared)))
    seed_diff_sd = float(np.median(dsd)) if dsd else float("nan")

    def share(e, s):
        return float(e ** 2 / s ** 2) if np.isfinite(e) and np.isfinite(s) and s > 0 else float("nan")

    return {"windows": n_win, "documents": n_docs if by_doc else 0, "rows": len(rows), "maps": len(cands),
            "n_boot": n_boot, "row_sd": row_sd, "diff_sd": diff_sd, "seed_row_sd": seed_row_sd,
            "seed_diff_sd": seed_diff_sd, "row_share": share(row_sd, seed_row_sd), "diff_share": share(diff_sd, seed_diff_sd)}
