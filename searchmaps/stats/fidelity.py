"""Proxy fidelity: every cheap proxy a study offers, scored against the ranking its longest
rung (the converged answer) gives (pure).

A ladder study's rows (``candidate``, ``seed``, ``rung``, ``horizon_target``, the metric,
``train_flops``; :func:`searchmaps.stats.bootstrap.cube`'s shape) hold the truth, its last
rung, and the proxies that cost less than it:

- ``rung``: the ranking at an earlier rung (training stopped there);
- ``extrapolation``: each map's ``L(D) = E + A D^-alpha`` fitted to the rungs up to one
  (three or more) and read at the last rung's horizon;
- ``racing``: the default race (:func:`searchmaps.stats.racing.race_step`, the top-group
  rule's) run over the seeds in order at a rung, seeds added one round at a time; its answer
  is the survivors, not a full ranking (no τ);
- ``depth``: the ranking by applied depth alone (deeper ranks better; ties share a rank),
  which costs nothing.

For each: Kendall's τ between the proxy's scores and the truth's means with a 95 % interval
over seeds (:data:`N_BOOT` resamples of the shared seeds, one draw for proxy and truth: they
are paired on seed), whether the proxy's best is the truth's best, the share of the truth's
top group (under ``rule``) that the proxy keeps, and its cost: the training FLOPs of the rows
it needs as a share of the last rung's rows' (what the converged study trained; a ladder's
earlier cooldown branches are not counted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bootstrap import N_BOOT, boot_indices, cube, interval, once_per_input, shared_seeds, tau_rho_small
from .racing import race_step
from .scaling import fit_power_law, predict as power_law_at
from .topgroup import DEFAULT_RULE, top_group

COLUMNS = ["proxy", "kind", "rung", "horizon", "n_candidates", "n_seeds", "kendall_tau", "kendall_tau_low",
           "kendall_tau_high", "proxy_best", "truth_best", "names_best", "truth_top_group", "proxy_top_group",
           "top_kept", "keeps_top", "train_flops", "cost_share"]


def proxy_fidelity(rows: pd.DataFrame, depth: dict[str, float] | None = None, metric: str = "val_loss",
                   alpha: float = 0.05, rule: str = DEFAULT_RULE, n_boot: int = N_BOOT, min_seeds: int = 3,
                   random_state=0) -> pd.DataFrame:
    """One row per proxy (columns :data:`COLUMNS`) against the last rung of ``rows`` over the
    candidates and seeds the last rung shares. ``depth`` maps a candidate to its applied
    depth (``applied_layers``; taken from ``rows`` when it has that column)."""
    values, cands, rungs, horizons, _ = cube(rows, metric)
    flops, *_ = cube(rows, "train_flops")
    last = len(rungs) - 1
    seeds, keep = shared_seeds(values[:, :, last])
    if keep.sum() < 2 or seeds.sum() < 2:
        raise ValueError(f"the last rung has {int(keep.sum())} candidate(s) on {int(seeds.sum())} shared seed(s); "
                         "need two or more of each")
    names = [c for c, k in zip(cands, keep) if k]
    vals, cost = values[seeds][:, keep], flops[seeds][:, keep]
    truth = vals[:, :, last].mean(axis=0)
    truth_best = names[int(np.argmin(truth))]
    truth_top = set(top_group(pd.DataFrame(vals[:, :, last], columns=names), rule, alpha))
    total = float(np.nansum(cost[:, :, last]))
    idx = boot_indices(vals.shape[0], n_boot, np.random.default_rng(random_state))
    base = {"n_candidates": len(names), "n_seeds": int(vals.shape[0]), "truth_best": truth_best,
            "truth_top_group": ";".join(sorted(truth_top))}
    out = []

    def scored(proxy, kind, rung, score, draws, top, spent):
        best = [names[j] for j in np.flatnonzero(score == np.nanmin(score))]
        kept = len(truth_top & set(top)) / len(truth_top)
        lo, hi = interval(np.asarray(draws, dtype=float)) if draws is not None else (np.nan, np.nan)
        tau = tau_rho_small(score, truth)[0] if draws is not None else np.nan
        out.append(dict(base, proxy=proxy, kind=kind, rung=rung, horizon=horizons[rung] if rung is not None else np.nan,
                        kendall_tau=tau, kendall_tau_low=lo, kendall_tau_high=hi, proxy_best=";".join(best),
                        names_best=best == [truth_best], proxy_top_group=";".join(sorted(top)), top_kept=kept,
                        keeps_top=kept == 1.0, train_flops=spent, cost_share=spent / total if total else np.nan))

    tau = once_per_input(lambda a, b: tau_rho_small(a, b)[0])
    for k in range(last):
        block = vals[:, :, k]
        if np.isnan(block).any():
            continue  # a map or seed stopped before this rung: no ranking of them all
        draws = [tau(block[i].mean(axis=0), vals[i, :, last].mean(axis=0)) for i in idx]
        top = top_group(pd.DataFrame(block, columns=names), rule, alpha)
        scored(f"rung {k}", "rung", k, block.mean(axis=0), draws, top, float(np.nansum(cost[:, :, k])))
    for k in range(2, last):
        block = vals[:, :, : k + 1]
        if np.isnan(block).any():
            continue
        hs, target = horizons[: k + 1], horizons[last]
        def at_target(means, hs=hs, target=target):
            fit = fit_power_law(hs, means)
            return power_law_at(fit, target) if fit is not None else np.nan

        predict = once_per_input(at_target)
        score = np.array([predict(block[:, j].mean(axis=0)) for j in range(len(names))])
        if not np.isfinite(score).all():
            continue
        draws = [tau(np.array([predict(block[i, j].mean(axis=0)) for j in range(len(names))]),
                     vals[i, :, last].mean(axis=0)) for i in idx]
        per_seed = np.array([[predict(block[s, j]) for j in range(len(names))] for s in range(block.shape[0])])
        top = (top_group(pd.DataFrame(per_seed, columns=names), rule, alpha) if np.isfinite(per_seed).all()
               else [names[int(np.argmin(score))]])  # each seed's own fit read at the target, under the rule
        scored(f"extrapolation from rungs 0-{k}", "extrapolation", k, score, draws, top,
               float(np.nansum(cost[:, :, k])))
    for k in range(last + 1):
        block = vals[:, :, k]
        if np.isnan(block).any() or block.shape[0] < min_seeds:
            continue
        survivors, n, spent = list(names), min_seeds, 0.0
        spent += float(np.nansum(cost[:n, :, k]))
        while True:
            cols = [names.index(c) for c in survivors]
            long = pd.DataFrame([{"candidate": names[j], "seed": s, metric: block[s, j]} for s in range(n) for j in cols])
            survivors = race_step(long, metric, alpha, min_seeds=min_seeds, max_seeds=block.shape[0],
                                  rule=rule)["survivors"]
            if len(survivors) == 1 or n >= block.shape[0]:
                break
            spent += float(np.nansum(cost[n, [names.index(c) for c in survivors], k]))
            n += 1
        score = np.array([block[:n, j].mean() if names[j] in survivors else np.nan for j in range(len(names))])
        scored(f"racing at rung {k}", "racing", k, score, None, survivors, spent)
    depth = depth if depth is not None else _depth_of(rows)
    if depth and all(c in depth for c in names):
        score = -np.array([float(depth[c]) for c in names])
        draws = [tau(score, vals[i, :, last].mean(axis=0)) for i in idx]
        deepest = [c for c, s in zip(names, score) if s == score.min()]
        scored("applied depth alone", "depth", None, score, draws, deepest, 0.0)
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def _depth_of(rows: pd.DataFrame) -> dict[str, float] | None:
    if "applied_layers" not in rows.columns:
        return None
    return {str(c): float(v) for c, v in rows.groupby("candidate")["applied_layers"].first().items()}
