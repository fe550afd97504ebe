"""How far a cheap proxy's ranking (a supernet's scores) can be trusted against stand-alone
training, and the ceiling any proxy meets: the stand-alone study's agreement with itself
over split halves of its seeds (pure)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from .bootstrap import N_BOOT, interval, tau_rho, tau_rho_small
from .paired import to_matrix
from .topgroup import DEFAULT_RULE, top_group


def proxy_agreement(proxy: pd.DataFrame, truth: pd.DataFrame, metric: str = "val_loss", rule: str = DEFAULT_RULE,
                    alpha: float = 0.05, n_boot: int = N_BOOT, random_state=0) -> dict:
    """How far a cheap proxy's ranking (a supernet's scores: ``proxy`` rows of candidate,
    seed, metric, one seed per supernet) can be trusted against stand-alone training
    (``truth`` rows, paired seeds), over the candidates both have:

    - ``kendall_tau``, ``spearman_rho`` between the two sets of means, each with a 95 %
      bootstrap interval (proxy seeds and truth seeds resampled, each the same draw for
      every candidate);
    - ``top_group`` (the truth's, by ``rule``), ``proxy_top`` (as many candidates, by the
      proxy's means) and ``top_agreement`` (the share of the truth's top group the proxy's
      top holds);
    - ``pick`` (the proxy's best) and its ``regret``: the truth's mean for the pick minus the
      truth's best mean (metric units; 0 when the proxy picks the truth's best), with
      ``regret_ppl`` in perplexity when the metric is a loss in nats; ``regret_low`` and
      ``regret_high`` its 95 % bootstrap interval (the same draws as τ's);
    - the ceiling: :func:`split_half_agreement` of the truth over the shared candidates
      (``ceiling_tau`` and its spread over splits, ``ceiling_top_agreement``,
      ``ceiling_regret``), and ``tau_share``, the proxy's τ as a fraction of ``ceiling_tau``."""

    p = proxy.pivot_table(index="seed", columns="candidate", values=metric, aggfunc="last")
    t = to_matrix(truth, metric).dropna(axis=0, how="any")
    names = sorted(set(p.columns) & set(t.columns))
    if len(names) < 2:
        raise ValueError(f"the proxy and the stand-alone rows share {len(names)} candidate(s); need two or more")
    p, t = p[names].dropna(axis=0, how="any"), t[names]
    pm, tm = p.mean().to_numpy(), t.mean().to_numpy()
    tau, rho = tau_rho_small(pm, tm)
    rng = np.random.default_rng(random_state)
    draws, regrets = [], []
    for _ in range(n_boot):
        pi = rng.integers(0, len(p), size=len(p))
        ti = rng.integers(0, len(t), size=len(t))
        pb, tb = p.to_numpy()[pi].mean(axis=0), t.to_numpy()[ti].mean(axis=0)
        draws.append(tau_rho_small(pb, tb))
        regrets.append(tb[int(np.argmin(pb))] - tb.min())  # the same draws: no change to the τ interval
    draws = np.array(draws)
    group = top_group(t, rule, alpha) if len(t) >= 2 else [names[int(np.argmin(tm))]]
    proxy_top = [names[i] for i in np.argsort(pm, kind="stable")[: len(group)]]
    pick = names[int(np.argmin(pm))]
    best = names[int(np.argmin(tm))]
    regret = float(tm[names.index(pick)] - tm.min())
    out = {"n_candidates": len(names), "proxy_seeds": len(p), "truth_seeds": len(t), "kendall_tau": tau,
           "spearman_rho": rho, "top_group": ";".join(group), "proxy_top": ";".join(proxy_top),
           "top_agreement": len(set(group) & set(proxy_top)) / len(group), "pick": pick, "truth_best": best,
           "regret": regret}
    (out["kendall_tau_low"], out["kendall_tau_high"]), (out["spearman_rho_low"], out["spearman_rho_high"]) = \
        interval(draws[:, 0]), interval(draws[:, 1])
    out["regret_low"], out["regret_high"] = interval(np.array(regrets))
    if metric == "val_loss":
        out["regret_ppl"] = float(math.exp(tm[names.index(pick)]) - math.exp(tm.min()))
    ceiling = split_half_agreement(t, len(group), n_splits=n_boot, random_state=random_state)
    out.update(ceiling)
    out["tau_share"] = tau / ceiling["ceiling_tau"] if ceiling["ceiling_tau"] > 0 else float("nan")
    return out


def seed_splits(n_seeds: int, n_splits: int = N_BOOT, random_state=0) -> list[tuple[tuple, tuple]]:
    """Ways to cut ``n_seeds`` seeds (positions 0..n-1) into two disjoint halves of
    ``n_seeds // 2`` each (one seed left out when the count is odd): every distinct split
    when there are at most ``n_splits`` of them (4 seeds: 3; 5 seeds: 15; 10 seeds: 126),
    else ``n_splits`` random ones (a half and its mirror count as one split)."""
    half = n_seeds // 2
    if half < 1:
        return []
    every = [(a, b) for a in itertools.combinations(range(n_seeds), half)
             for b in itertools.combinations([s for s in range(n_seeds) if s not in a], half) if a < b]
    if len(every) <= n_splits:
        return every
    rng = np.random.default_rng([random_state, 0x5117])
    out = []
    for _ in range(n_splits):
        order = rng.permutation(n_seeds)
        a, b = tuple(sorted(order[:half].tolist())), tuple(sorted(order[half:2 * half].tolist()))
        out.append((a, b) if a < b else (b, a))
    return out


def split_half_agreement(truth: pd.DataFrame, k: int = 1, n_splits: int = N_BOOT, random_state=0) -> dict:
    """The ceiling of any proxy's agreement with a stand-alone study: how well the study
    agrees with itself. ``truth`` is a ``seeds x candidates`` matrix (paired seeds; lower is
    better). Over the splits of :func:`seed_splits`, each half's per-candidate means are
    ranked against the other half's:

    - ``ceiling_tau``: the mean Kendall τ between the halves, with ``ceiling_tau_low`` and
      ``ceiling_tau_high`` the 2.5 and 97.5 percentiles over the splits;
    - ``ceiling_top_agreement``: the mean share of one half's top ``k`` that the other
      half's top ``k`` holds (``k``: the size of the whole study's top group);
    - ``ceiling_regret``: the mean over splits (both directions) of one half's stand-alone
      loss for the other half's best, minus its own best;
    - ``ceiling_splits`` and ``ceiling_half_seeds``: how many splits, seeds per half;
    - ``ceiling_tau_full``: the τ a perfect ranking would reach against the mean of *all*
      the seeds, from ``ceiling_tau`` by the normal-theory relation r = sin(πτ/2), the
      Spearman-Brown step from a half's seeds to all of them (R = k·r / (1 + (k-1)·r),
      k = seeds / half) and the attenuation a perfect predictor meets (τ = (2/π)·asin(√R)).

    Each half has half the seeds, so its means are noisier than the whole study's: the
    split-half ceiling is the agreement of two half-studies, a low estimate of how well the
    full study's ranking could be matched (a proxy can exceed it); ``ceiling_tau_full``
    is the model-based estimate of that (NaN with fewer than two seeds, or a ceiling at or
    below 0)."""
    mat = np.asarray(truth, dtype=float)
    splits = seed_splits(mat.shape[0], n_splits, random_state)
    nan = float("nan")
    if not splits or mat.shape[1] < 2:
        return {"ceiling_tau": nan, "ceiling_tau_low": nan, "ceiling_tau_high": nan, "ceiling_top_agreement": nan,
                "ceiling_regret": nan, "ceiling_splits": len(splits), "ceiling_half_seeds": mat.shape[0] // 2,
                "ceiling_tau_full": nan}
    taus, tops, regrets = [], [], []
    for a, b in splits:
        ma, mb = mat[list(a)].mean(axis=0), mat[list(b)].mean(axis=0)
        taus.append(tau_rho(ma, mb)[0])
        ta, tb = set(np.argsort(ma, kind="stable")[:k]), set(np.argsort(mb, kind="stable")[:k])
        tops.append(len(ta & tb) / k)
        regrets += [mb[int(np.argmin(ma))] - mb.min(), ma[int(np.argmin(mb))] - ma.min()]
    taus = np.array(taus)
    lo, hi = interval(taus)
    tau = float(np.nanmean(taus))
    return {"ceiling_tau": tau, "ceiling_tau_low": lo, "ceiling_tau_high": hi,
            "ceiling_top_agreement": float(np.mean(tops)), "ceiling_regret": float(np.mean(regrets)),
            "ceiling_splits": len(splits), "ceiling_half_seeds": mat.shape[0] // 2,
            "ceiling_tau_full": full_study_ceiling(tau, mat.shape[0] // 2, mat.shape[0])}


def full_study_ceiling(split_tau: float, half: int, seeds: int) -> float:
    """The τ a perfect ranking reaches against the mean of ``seeds`` seeds when two halves
    of ``half`` seeds agree at ``split_tau`` (normal theory; see :func:`split_half_agreement`)."""
    if not split_tau > 0:
        return float("nan")
    r = math.sin(math.pi * split_tau / 2)
    k = seeds / half
    reliability = k * r / (1 + (k - 1) * r)
    return 2 / math.pi * math.asin(math.sqrt(reliability))
