"""Does the ranking at the horizon you can afford hold at the horizon you care about?
Pure statistics over the rows of a horizon ladder (no plotting, no files).

Input everywhere: a long DataFrame of successful rows with columns ``candidate``,
``seed``, ``rung``, ``horizon_target`` (the rung's tokens or training FLOPs) and a metric
(default ``val_loss``, nats; lower is better). Seeds are paired across candidates and
rungs (seed s of every candidate is the same data order and initial draw, and a rung is a
branch of the same run), so every bootstrap resamples **seeds**, the same draw for every
candidate and every rung, keeping that pairing.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import optimize, stats

N_BOOT = 2000


def _cube(df: pd.DataFrame, metric: str) -> tuple[np.ndarray, list[str], list[int], list[float], list[int]]:
    """``values[seed, candidate, rung]`` over the seeds every candidate has at every rung
    it reached; NaN where a candidate did not reach a rung."""
    for col in ("candidate", "seed", "rung", "horizon_target", metric):
        if col not in df.columns:
            raise ValueError(f"ladder rows need a {col!r} column")
    rungs = sorted(int(r) for r in df["rung"].unique())
    cands = sorted(str(c) for c in df["candidate"].unique())
    horizons = [float(df.loc[df["rung"] == r, "horizon_target"].iloc[0]) for r in rungs]
    piv = df.pivot_table(index="seed", columns=["candidate", "rung"], values=metric, aggfunc="last")
    seeds = [int(s) for s in piv.index]
    out = np.full((len(seeds), len(cands), len(rungs)), np.nan)
    for (c, r), col in piv.items():
        out[:, cands.index(str(c)), rungs.index(int(r))] = col.to_numpy(dtype=float)
    return out, cands, rungs, horizons, seeds


def _complete(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates with every seed (axis 1 of ``block[seed, cand]``) and the seeds all of them share."""
    has = ~np.isnan(block)
    cands = has.any(axis=0)
    seeds = has[:, cands].all(axis=1)
    cands = cands & has[seeds].all(axis=0)
    return seeds, cands


def _boot_indices(n_seeds: int, n_boot: int, rng) -> np.ndarray:
    return rng.integers(0, n_seeds, size=(n_boot, n_seeds))


def _interval(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    draws = draws[np.isfinite(draws)]
    if not draws.size:
        return float("nan"), float("nan")
    lo, hi = np.percentile(draws, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def _tau_rho(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: NaN is the honest answer
        return float(stats.kendalltau(a, b).statistic), float(stats.spearmanr(a, b).statistic)


# --------------------------------------------------------------------------- ranks


def rank_by_rung(df: pd.DataFrame, metric: str = "val_loss", n_boot: int = N_BOOT, random_state=0) -> pd.DataFrame:
    """Each candidate's rank (1 = lowest mean) at each rung, among the candidates that
    reached it, with a 95 % bootstrap interval over seeds. Columns: candidate, rung,
    horizon, n_seeds, mean, rank, rank_low, rank_high."""
    values, cands, rungs, horizons, _ = _cube(df, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for k, (rung, horizon) in enumerate(zip(rungs, horizons)):
        seeds, keep = _complete(values[:, :, k])
        block = values[:, :, k][seeds][:, keep]  # (seeds, candidates) at this rung
        names = [c for c, k_ in zip(cands, keep) if k_]
        if not names:
            continue
        ranks = stats.rankdata(block.mean(axis=0))
        idx = _boot_indices(block.shape[0], n_boot, rng)
        boot = np.array([stats.rankdata(block[i].mean(axis=0)) for i in idx])
        for j, name in enumerate(names):
            lo, hi = _interval(boot[:, j])
            rows.append({"candidate": name, "rung": rung, "horizon": horizon, "n_seeds": int(block.shape[0]),
                         "mean": float(block[:, j].mean()), "rank": float(ranks[j]), "rank_low": lo, "rank_high": hi})
    return pd.DataFrame(rows, columns=["candidate", "rung", "horizon", "n_seeds", "mean", "rank", "rank_low",
                                       "rank_high"])


def rank_stability(df: pd.DataFrame, metric: str = "val_loss", top_metric: str = "val_ppl", alpha: float = 0.05,
                   n_boot: int = N_BOOT, random_state=0, rule: str = "moderated") -> pd.DataFrame:
    """For every pair of rungs: Kendall's tau and Spearman's rho between the candidates'
    mean ``metric`` at the two horizons, each with a 95 % bootstrap interval over seeds
    (one draw of seeds for both rungs), and the overlap of the two top groups
    (:func:`searchmaps.topgroup.top_group` under ``rule``, the study's own rule, on
    ``top_metric``), over the candidates that reached
    both rungs with the seeds they all share. One row per pair, shorter horizon first."""
    from .stats import to_matrix
    from .topgroup import top_group

    values, cands, rungs, horizons, seed_ids = _cube(df, metric)
    tops, _, _, _, _ = _cube(df, top_metric) if top_metric in df.columns else (values, 0, 0, 0, 0)
    rng = np.random.default_rng(random_state)
    rows = []
    for a, b in itertools.combinations(range(len(rungs)), 2):
        missing = np.isnan(values[:, :, a]) | np.isnan(values[:, :, b])
        seeds, keep = _complete(np.where(missing, np.nan, 0.0))  # reached both rungs, seeds all of them share
        names = [c for c, k in zip(cands, keep) if k]
        row = {"rung_a": rungs[a], "rung_b": rungs[b], "horizon_a": horizons[a], "horizon_b": horizons[b],
               "n_candidates": len(names), "n_seeds": int(seeds.sum())}
        if len(names) >= 2 and seeds.sum() >= 1:
            xa, xb = values[seeds][:, keep, a], values[seeds][:, keep, b]
            tau, rho = _tau_rho(xa.mean(axis=0), xb.mean(axis=0))
            draws = np.array([_tau_rho(xa[i].mean(axis=0), xb[i].mean(axis=0))
                              for i in _boot_indices(xa.shape[0], n_boot, rng)])
            (tl, th), (rl, rh) = _interval(draws[:, 0]), _interval(draws[:, 1])
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
    cols = ["rung_a", "rung_b", "horizon_a", "horizon_b", "n_candidates", "n_seeds", "kendall_tau", "kendall_tau_low",
            "kendall_tau_high", "spearman_rho", "spearman_rho_low", "spearman_rho_high", "top_group_a", "top_group_b",
            "top_overlap", "top_union", "top_jaccard"]
    return pd.DataFrame(rows).reindex(columns=cols)


def agreement_with(df: pd.DataFrame, reference: dict[str, float], metric: str = "val_loss", n_boot: int = N_BOOT,
                   random_state=0) -> pd.DataFrame:
    """Kendall's tau (with its p-value and a 95 % bootstrap interval over seeds) and
    Spearman's rho between the candidates' means at each rung and a published ranking
    (``reference``: candidate -> value, lower is better), over the candidates both have.
    One row per rung. The interval says how much the seeds move this study's side of the
    comparison; the published side is one number per candidate (no seeds to resample)."""
    values, cands, rungs, horizons, _ = _cube(df, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for k, (rung, horizon) in enumerate(zip(rungs, horizons)):
        seeds, keep = _complete(values[:, :, k])
        names = [c for c, k_ in zip(cands, keep) if k_ and c in reference]
        block = values[seeds][:, [cands.index(n) for n in names], k]  # (seeds, names)
        theirs = np.array([reference[n] for n in names])
        tau = p = rho = lo = hi = float("nan")
        if len(names) >= 3:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kt = stats.kendalltau(block.mean(axis=0), theirs)
            tau, p, rho = float(kt.statistic), float(kt.pvalue), _tau_rho(block.mean(axis=0), theirs)[1]
            draws = np.array([_tau_rho(block[i].mean(axis=0), theirs)[0]
                              for i in _boot_indices(block.shape[0], n_boot, rng)])
            lo, hi = _interval(draws)
        rows.append({"rung": rung, "horizon": horizon, "n_candidates": len(names), "n_seeds": int(block.shape[0]),
                     "kendall_tau": tau, "kendall_tau_low": lo, "kendall_tau_high": hi, "p_value": p,
                     "spearman_rho": rho})
    return pd.DataFrame(rows, columns=["rung", "horizon", "n_candidates", "n_seeds", "kendall_tau", "kendall_tau_low",
                                       "kendall_tau_high", "p_value", "spearman_rho"])


# --------------------------------------------------------------------------- scaling


def power_law(d, e, a, alpha):
    """``L(D) = E + A * D^-alpha`` with D in units of the reference horizon."""
    return e + a * np.power(d, -alpha)


def fit_power_law(horizons, losses) -> tuple[float, float, float] | None:
    """Least-squares ``(E, A, alpha)`` of :func:`power_law` through (horizon, loss) points,
    horizons divided by their largest; ``0 <= E <= min(loss)``, ``A >= 0``, ``0 < alpha <= 3``.
    None when there are fewer than 3 points or the fit does not converge. Three points
    determine the curve exactly; the bootstrap over seeds then carries the whole
    uncertainty of an extrapolation."""
    x = np.asarray(horizons, dtype=float)
    y = np.asarray(losses, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3:
        return None
    scale = x.max()
    lo = float(y.min())
    guess = [0.9 * lo, max(1e-6, float(y[np.argmin(x)] - 0.9 * lo) * (x.min() / scale) ** 0.5), 0.5]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (e, a, alpha), _ = optimize.curve_fit(power_law, x / scale, y, p0=guess,
                                                  bounds=([0.0, 0.0, 1e-3], [lo, np.inf, 3.0]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    return float(e), float(a) * scale ** float(alpha), float(alpha)  # A in the horizons' own units


def predict(params, horizon) -> float:
    e, a, alpha = params
    return float(e + a * float(horizon) ** -alpha)


def extrapolate(df: pd.DataFrame, target: float, metric: str = "val_loss", n_boot: int = 1000,
                random_state=0) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Each candidate's fitted ``L(D) = E + A D^-alpha`` over the rungs it reached, its
    prediction at ``target`` (same unit as the horizons) and a 95 % prediction interval
    from refitting on bootstrap resamples of seeds. Returns the table (candidate, E, A,
    alpha, horizon_last, loss_last, target, prediction, prediction_low, prediction_high,
    n_rungs, fit_share: the share of resamples whose fit converged) and the bootstrap
    predictions per candidate (NaN where a fit failed), the same draws for every candidate."""
    values, cands, rungs, horizons, _ = _cube(df, metric)
    rng = np.random.default_rng(random_state)
    n_seeds = values.shape[0]
    idx = _boot_indices(n_seeds, n_boot, rng)
    rows, boots = [], {}
    for j, name in enumerate(cands):
        reached = [k for k in range(len(rungs)) if not np.isnan(values[:, j, k]).all()]
        seeds = ~np.isnan(values[:, j, reached]).any(axis=1)
        block = values[:, j, reached]
        hs = [horizons[k] for k in reached]
        fit = fit_power_law(hs, np.nanmean(block[seeds], axis=0)) if seeds.any() else None
        draws = np.full(n_boot, np.nan)
        if fit is not None:
            good = np.flatnonzero(seeds)
            for b, pick in enumerate(idx):
                pick = pick[np.isin(pick, good)]
                if pick.size:
                    f = fit_power_law(hs, block[pick].mean(axis=0))
                    draws[b] = predict(f, target) if f is not None else np.nan
        lo, hi = _interval(draws)
        boots[name] = draws
        row = {"candidate": name, "E": np.nan, "A": np.nan, "alpha": np.nan, "horizon_last": hs[-1] if hs else np.nan,
               "loss_last": float(np.nanmean(block[seeds, -1])) if seeds.any() else np.nan, "target": float(target),
               "prediction": np.nan, "prediction_low": lo, "prediction_high": hi, "n_rungs": len(hs),
               "fit_share": float(np.isfinite(draws).mean())}
        if fit is not None:
            row.update(E=fit[0], A=fit[1], alpha=fit[2], prediction=predict(fit, target))
        rows.append(row)
    return pd.DataFrame(rows), boots


def crossings(table: pd.DataFrame, boots: dict[str, np.ndarray]) -> pd.DataFrame:
    """Pairs whose order at the last horizon is predicted to flip before the target: ``a``
    better than ``b`` at the last common horizon but predicted worse at the target. With
    the horizon where the fitted curves cross and the share of bootstrap resamples in
    which the order at the target flips (how sure the prediction is). ``fits_agree`` is False
    where the two fitted curves already have the pair the other way round at the last
    horizon (the fits miss the measured order there, so the "crossing" lies inside the data:
    ``crossing_at`` is then NaN). One row per pair."""
    rows = []
    t = table.set_index("candidate")
    for a, b in itertools.combinations(t.index, 2):
        ra, rb = t.loc[a], t.loc[b]
        if not (np.isfinite(ra["prediction"]) and np.isfinite(rb["prediction"])):
            continue
        if ra["horizon_last"] != rb["horizon_last"]:
            continue  # promotion stopped one of them: no common last horizon
        better, worse = (a, b) if ra["loss_last"] <= rb["loss_last"] else (b, a)
        pb, pw = t.loc[better], t.loc[worse]
        if pb["prediction"] <= pw["prediction"]:
            continue
        fa = (pb["E"], pb["A"], pb["alpha"])
        fb = (pw["E"], pw["A"], pw["alpha"])
        gap = lambda d: predict(fa, d) - predict(fb, d)  # noqa: E731 - > 0 once crossed
        lo, hi = float(pb["horizon_last"]), float(pb["target"])
        agree = bool(gap(lo) < 0)
        try:
            at = math.exp(optimize.brentq(lambda u: gap(math.exp(u)), math.log(lo), math.log(hi))) if agree \
                else float("nan")
        except ValueError:
            at = float("nan")
        da, db = boots[better], boots[worse]
        both = np.isfinite(da) & np.isfinite(db)
        share = float((da[both] > db[both]).mean()) if both.any() else float("nan")
        rows.append({"better_now": better, "worse_now": worse, "horizon_last": lo, "crossing_at": at,
                     "fits_agree": agree, "target": hi, "flip_share": share})
    return pd.DataFrame(rows, columns=["better_now", "worse_now", "horizon_last", "crossing_at", "fits_agree",
                                       "target", "flip_share"])


# --------------------------------------------------------------------------- a proxy against the truth


def proxy_agreement(proxy: pd.DataFrame, truth: pd.DataFrame, metric: str = "val_loss", rule: str = "moderated",
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
      ``regret_ppl`` in perplexity when the metric is a loss in nats."""
    from .stats import to_matrix
    from .topgroup import top_group

    p = proxy.pivot_table(index="seed", columns="candidate", values=metric, aggfunc="last")
    t = to_matrix(truth, metric).dropna(axis=0, how="any")
    names = sorted(set(p.columns) & set(t.columns))
    if len(names) < 2:
        raise ValueError(f"the proxy and the stand-alone rows share {len(names)} candidate(s); need two or more")
    p, t = p[names].dropna(axis=0, how="any"), t[names]
    pm, tm = p.mean().to_numpy(), t.mean().to_numpy()
    tau, rho = _tau_rho(pm, tm)
    rng = np.random.default_rng(random_state)
    draws = []
    for _ in range(n_boot):
        pi = rng.integers(0, len(p), size=len(p))
        ti = rng.integers(0, len(t), size=len(t))
        draws.append(_tau_rho(p.to_numpy()[pi].mean(axis=0), t.to_numpy()[ti].mean(axis=0)))
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
        _interval(draws[:, 0]), _interval(draws[:, 1])
    if metric == "val_loss":
        out["regret_ppl"] = float(math.exp(tm[names.index(pick)]) - math.exp(tm.min()))
    return out
