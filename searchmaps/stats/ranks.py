"""Does the ranking at the horizon you can afford hold at the horizon you care about?
Rank agreement across the rungs of a horizon ladder, and against a published ranking
(pure; rows and seed pairing as in :mod:`searchmaps.stats.bootstrap`)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from .bootstrap import N_BOOT, boot_indices, cube, few_seeds, interval, once_per_input, shared_seeds, tau_rho
from .paired import adjust_pvalues, to_matrix
from .topgroup import DEFAULT_RULE, top_group

PUBLISHED_SD = 0.25  # assumed seed sd of a published single-seed number (perplexity; see agreement_with)


def rank_by_rung(df: pd.DataFrame, metric: str = "val_loss", n_boot: int = N_BOOT, random_state=0) -> pd.DataFrame:
    """Each candidate's rank (1 = lowest mean) at each rung, among the candidates that
    reached it, with a 95 % bootstrap interval over seeds. Columns: candidate, rung,
    horizon, n_seeds, mean, rank, rank_low, rank_high."""
    values, cands, rungs, horizons, _ = cube(df, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for k, (rung, horizon) in enumerate(zip(rungs, horizons)):
        seeds, keep = shared_seeds(values[:, :, k])
        block = values[:, :, k][seeds][:, keep]  # (seeds, candidates) at this rung
        names = [c for c, k_ in zip(cands, keep) if k_]
        if not names:
            continue
        ranks = stats.rankdata(block.mean(axis=0))
        idx = boot_indices(block.shape[0], n_boot, rng)
        boot = np.array([stats.rankdata(block[i].mean(axis=0)) for i in idx])
        for j, name in enumerate(names):
            lo, hi = interval(boot[:, j])
            rows.append({"candidate": name, "rung": rung, "horizon": horizon, "n_seeds": int(block.shape[0]),
                         "mean": float(block[:, j].mean()), "rank": float(ranks[j]), "rank_low": lo, "rank_high": hi})
    return pd.DataFrame(rows, columns=["candidate", "rung", "horizon", "n_seeds", "mean", "rank", "rank_low",
                                       "rank_high"])


def rank_stability(df: pd.DataFrame, metric: str = "val_loss", top_metric: str = "val_ppl", alpha: float = 0.05,
                   n_boot: int = N_BOOT, random_state=0, rule: str = DEFAULT_RULE) -> pd.DataFrame:
    """For every pair of rungs: Kendall's tau and Spearman's rho between the candidates'
    mean ``metric`` at the two horizons, each with a 95 % bootstrap interval over seeds
    (one draw of seeds for both rungs), and the overlap of the two top groups
    (:func:`searchmaps.stats.topgroup.top_group` under ``rule``, the study's own rule, on
    ``top_metric``), over the candidates that reached
    both rungs with the seeds they all share. One row per pair, shorter horizon first;
    ``few_seeds`` flags intervals from too few seeds (:func:`few_seeds`). Every pair is
    descriptive: the confirmatory top group is the last rung's, in the report."""

    values, cands, rungs, horizons, seed_ids = cube(df, metric)
    tops, _, _, _, _ = cube(df, top_metric) if top_metric in df.columns else (values, 0, 0, 0, 0)
    rng = np.random.default_rng(random_state)
    rows = []
    for a, b in itertools.combinations(range(len(rungs)), 2):
        missing = np.isnan(values[:, :, a]) | np.isnan(values[:, :, b])
        seeds, keep = shared_seeds(np.where(missing, np.nan, 0.0))  # reached both rungs, seeds all of them share
        names = [c for c, k in zip(cands, keep) if k]
        row = {"rung_a": rungs[a], "rung_b": rungs[b], "horizon_a": horizons[a], "horizon_b": horizons[b],
               "n_candidates": len(names), "n_seeds": int(seeds.sum()), "few_seeds": few_seeds(int(seeds.sum()))}
        if len(names) >= 2 and seeds.sum() >= 1:
            xa, xb = values[seeds][:, keep, a], values[seeds][:, keep, b]
            tau, rho = tau_rho(xa.mean(axis=0), xb.mean(axis=0))
            pair = once_per_input(tau_rho)
            draws = np.array([pair(xa[i].mean(axis=0), xb[i].mean(axis=0))
                              for i in boot_indices(xa.shape[0], n_boot, rng)])
            (tl, th), (rl, rh) = interval(draws[:, 0]), interval(draws[:, 1])
            group = []
            for k in (a, b):
                long = pd.DataFrame([{"candidate": n, "seed": seed_ids[s], "val": tops[s, cands.index(n), k]}
                                     for s in np.flatnonzero(seeds) for n in names])
                group.append(set(top_group(to_matrix(long, "val"), rule, alpha)) if seeds.sum() >= 2 else set(names))
            inter, union = group[0] & group[1], group[0] | group[1]
            row.update(kendall_tau=tau, kendall_tau_low=tl, kendall_tau_high=th, spearman_rho=rho,
                       spearman_rho_low=rl, spearman_rho_high=rh, top_group_a=";".join(sorted(group[0])),
                       top_group_b=";".join(sorted(group[1])), top_overlap=len(inter), top_union=len(union),
                       top_jaccard=len(inter) / len(union) if union else float("nan"))
        rows.append(row)
    cols = ["rung_a", "rung_b", "horizon_a", "horizon_b", "n_candidates", "n_seeds", "few_seeds", "kendall_tau",
            "kendall_tau_low",
            "kendall_tau_high", "spearman_rho", "spearman_rho_low", "spearman_rho_high", "top_group_a", "top_group_b",
            "top_overlap", "top_union", "top_jaccard"]
    return pd.DataFrame(rows).reindex(columns=cols)


def agreement_with(df: pd.DataFrame, reference: dict[str, float], metric: str = "val_loss", n_boot: int = N_BOOT,
                   random_state=0, reference_sd: float = PUBLISHED_SD) -> pd.DataFrame:
    """Kendall's tau (with its p-value and a 95 % bootstrap interval) and Spearman's rho
    between the candidates' means at each rung and a published ranking (``reference``:
    candidate -> value, lower is better), over the candidates both have. One row per rung.

    A published table is one seed per candidate, so its order carries seed noise of its
    own. Each bootstrap replicate resamples this study's seeds (the same draw for every
    candidate) *and* adds independent N(0, ``reference_sd``) noise to each published value
    (``reference_sd`` in the published values' unit; the default
    :data:`PUBLISHED_SD` = 0.25 perplexity is the middle of the 0.2-0.3 single-seed sd
    assumed for ILR's Table 1, at about 14 perplexity): ``kendall_tau_low``/``_high``
    carry both noises, ``kendall_tau_low_seeds``/``_high_seeds`` this study's seeds only.
    ``p_value`` is scipy's test of tau = 0 at each rung (it treats both sides as exact);
    ``p_holm`` adjusts it by Holm across the rungs (one family: the same question asked at
    every horizon). ``confirmatory`` marks the last rung; ``few_seeds`` flags intervals
    from too few seeds (:func:`few_seeds`)."""

    values, cands, rungs, horizons, _ = cube(df, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for k, (rung, horizon) in enumerate(zip(rungs, horizons)):
        seeds, keep = shared_seeds(values[:, :, k])
        names = [c for c, k_ in zip(cands, keep) if k_ and c in reference]
        block = values[seeds][:, [cands.index(n) for n in names], k]  # (seeds, names)
        theirs = np.array([reference[n] for n in names])
        tau = p = rho = lo = hi = slo = shi = float("nan")
        if len(names) >= 3:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kt = stats.kendalltau(block.mean(axis=0), theirs)
            tau, p, rho = float(kt.statistic), float(kt.pvalue), tau_rho(block.mean(axis=0), theirs)[1]
            idx = boot_indices(block.shape[0], n_boot, rng)
            noise = rng.normal(0.0, reference_sd, size=(n_boot, len(names))) if reference_sd > 0 else \
                np.zeros((n_boot, len(names)))
            ours = [block[i].mean(axis=0) for i in idx]
            against = once_per_input(tau_rho)
            slo, shi = interval(np.array([against(m, theirs)[0] for m in ours]))
            lo, hi = interval(np.array([tau_rho(m, theirs + e)[0] for m, e in zip(ours, noise)]))
        rows.append({"rung": rung, "horizon": horizon, "confirmatory": k == len(rungs) - 1,
                     "n_candidates": len(names), "n_seeds": int(block.shape[0]),
                     "few_seeds": few_seeds(int(block.shape[0])), "reference_sd": float(reference_sd),
                     "kendall_tau": tau, "kendall_tau_low": lo, "kendall_tau_high": hi, "kendall_tau_low_seeds": slo,
                     "kendall_tau_high_seeds": shi, "p_value": p, "spearman_rho": rho})
    out = pd.DataFrame(rows, columns=["rung", "horizon", "confirmatory", "n_candidates", "n_seeds", "few_seeds",
                                      "reference_sd", "kendall_tau", "kendall_tau_low", "kendall_tau_high",
                                      "kendall_tau_low_seeds", "kendall_tau_high_seeds", "p_value", "p_holm",
                                      "spearman_rho"])
    tested = out["p_value"].notna()
    out.loc[tested, "p_holm"] = adjust_pvalues(out.loc[tested, "p_value"].to_numpy(), "holm")
    return out


def agreement_shift(before: pd.DataFrame, after: pd.DataFrame, reference: dict[str, float],
                    baseline: str | None = None, metric: str = "val_loss", n_boot: int = N_BOOT, random_state=0,
                    reference_sd: float = PUBLISHED_SD, level: float = 0.95) -> pd.DataFrame:
    """How far one change of protocol moves a study's ranking toward a published one: two
    studies of the same candidates (``before`` and ``after``, rows as :func:`agreement_with`
    takes), compared at every horizon both reached. Per horizon: Kendall's tau of each
    against ``reference`` (over the candidates complete in both and published), their
    difference ``shift`` = tau_after - tau_before with a ``level`` bootstrap interval (each
    study's seeds resampled on their own, the same N(0, ``reference_sd``) noise added to the
    published values in both, since both meet the same table; ``shift_low_seeds``/``_high_seeds``:
    the seeds' part alone, the table taken as exact), and, when ``baseline`` names
    a candidate, each study's ``lead`` of that candidate in ``metric``: the best other mean
    minus the baseline's (positive: the baseline is ahead) with its interval."""
    va, ca, _, ha, _ = cube(before, metric)
    vb, cb, _, hb, _ = cube(after, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for ka, horizon in enumerate(ha):
        if horizon not in hb:
            continue
        kb = hb.index(horizon)
        sa, keep_a = shared_seeds(va[:, :, ka])
        sb, keep_b = shared_seeds(vb[:, :, kb])
        done_a = {c for c, k in zip(ca, keep_a) if k}
        done_b = {c for c, k in zip(cb, keep_b) if k}
        names = sorted(done_a & done_b & set(reference))
        if len(names) < 3:
            continue
        a = va[sa][:, [ca.index(n) for n in names], ka]
        b = vb[sb][:, [cb.index(n) for n in names], kb]
        theirs = np.array([reference[n] for n in names])
        tau_a, tau_b = tau_rho(a.mean(axis=0), theirs)[0], tau_rho(b.mean(axis=0), theirs)[0]
        ia, ib = boot_indices(a.shape[0], n_boot, rng), boot_indices(b.shape[0], n_boot, rng)
        noise = rng.normal(0.0, reference_sd, size=(n_boot, len(names))) if reference_sd > 0 else \
            np.zeros((n_boot, len(names)))
        draws = np.array([tau_rho(b[j].mean(axis=0), theirs + e)[0] - tau_rho(a[i].mean(axis=0), theirs + e)[0]
                          for i, j, e in zip(ia, ib, noise)])
        seeds_only = np.array([tau_rho(b[j].mean(axis=0), theirs)[0] - tau_rho(a[i].mean(axis=0), theirs)[0]
                               for i, j in zip(ia, ib)])
        lo, hi = interval(draws, level)
        slo, shi = interval(seeds_only, level)
        row = {"horizon": float(horizon), "n_candidates": len(names), "n_seeds_before": int(a.shape[0]),
               "n_seeds_after": int(b.shape[0]), "tau_before": tau_a, "tau_after": tau_b,
               "shift": tau_b - tau_a, "shift_low": lo, "shift_high": hi, "shift_low_seeds": slo,
               "shift_high_seeds": shi}
        if baseline is not None and baseline in names:
            j = names.index(baseline)
            for tag, block, idx in (("before", a, ia), ("after", b, ib)):
                row[f"lead_{tag}"] = _lead(block.mean(axis=0), j)
                row[f"lead_{tag}_low"], row[f"lead_{tag}_high"] = interval(
                    np.array([_lead(block[i].mean(axis=0), j) for i in idx]), level)
        rows.append(row)
    return pd.DataFrame(rows)


def _lead(means: np.ndarray, j: int) -> float:
    """The best other candidate's mean minus candidate j's (positive: j is ahead)."""
    return float(np.delete(means, j).min() - means[j])
