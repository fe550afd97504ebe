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

from .topgroup import DEFAULT_RULE

N_BOOT = 2000
PUBLISHED_SD = 0.25  # assumed seed sd of a published single-seed number (perplexity; see agreement_with)
MIN_COVERAGE = 0.90  # a bootstrap over seeds whose mean interval would cover less than this is flagged


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


def bootstrap_coverage(n_seeds: int, level: float = 0.95) -> float:
    """What a percentile-bootstrap ``level`` interval of a mean over ``n_seeds`` normal
    seeds actually covers: it is about ``mean ± z·s·sqrt((n-1)/n)/sqrt(n)`` where the exact
    interval needs Student's t on n-1 degrees of freedom, so the coverage is
    ``P(|t_{n-1}| < z·sqrt((n-1)/n))``: 0.75 with 3 seeds, 0.85 with 5, 0.90 from 10."""
    if n_seeds < 2:
        return float("nan")
    z = stats.norm.ppf(0.5 + level / 2)
    return float(2 * stats.t.cdf(z * math.sqrt((n_seeds - 1) / n_seeds), n_seeds - 1) - 1)


def few_seeds(n_seeds: int) -> bool:
    """True when a bootstrap over ``n_seeds`` seeds is too few to trust its 95 % interval:
    the interval of a mean would cover less than :data:`MIN_COVERAGE` (fewer than 10 seeds)."""
    cov = bootstrap_coverage(n_seeds)
    return not (cov >= MIN_COVERAGE)


def _tau_rho(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: NaN is the honest answer
        return float(stats.kendalltau(a, b).statistic), float(stats.spearmanr(a, b).statistic)


def _tau_rho_small(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """:func:`_tau_rho` without scipy's per-call overhead, for the few candidates a
    bootstrap loop ranks thousands of times: Kendall's τ-b from the signs of all pairs,
    Spearman's ρ as Pearson's r of average ranks (ties as scipy treats them; equal to it
    up to rounding, tested)."""
    iu = np.triu_indices(len(a), 1)
    sa, sb = np.sign(a[:, None] - a[None, :])[iu], np.sign(b[:, None] - b[None, :])[iu]
    den = math.sqrt(float((sa * sa).sum() * (sb * sb).sum()))
    tau = float((sa * sb).sum() / den) if den else float("nan")
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return tau, float((ra * rb).sum() / den) if den else float("nan")


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
                   n_boot: int = N_BOOT, random_state=0, rule: str = DEFAULT_RULE) -> pd.DataFrame:
    """For every pair of rungs: Kendall's tau and Spearman's rho between the candidates'
    mean ``metric`` at the two horizons, each with a 95 % bootstrap interval over seeds
    (one draw of seeds for both rungs), and the overlap of the two top groups
    (:func:`searchmaps.topgroup.top_group` under ``rule``, the study's own rule, on
    ``top_metric``), over the candidates that reached
    both rungs with the seeds they all share. One row per pair, shorter horizon first;
    ``few_seeds`` flags intervals from too few seeds (:func:`few_seeds`). Every pair is
    descriptive: the confirmatory top group is the last rung's, in the report."""
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
               "n_candidates": len(names), "n_seeds": int(seeds.sum()), "few_seeds": few_seeds(int(seeds.sum()))}
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
    from .stats import adjust_pvalues

    values, cands, rungs, horizons, _ = _cube(df, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for k, (rung, horizon) in enumerate(zip(rungs, horizons)):
        seeds, keep = _complete(values[:, :, k])
        names = [c for c, k_ in zip(cands, keep) if k_ and c in reference]
        block = values[seeds][:, [cands.index(n) for n in names], k]  # (seeds, names)
        theirs = np.array([reference[n] for n in names])
        tau = p = rho = lo = hi = slo = shi = float("nan")
        if len(names) >= 3:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kt = stats.kendalltau(block.mean(axis=0), theirs)
            tau, p, rho = float(kt.statistic), float(kt.pvalue), _tau_rho(block.mean(axis=0), theirs)[1]
            idx = _boot_indices(block.shape[0], n_boot, rng)
            noise = rng.normal(0.0, reference_sd, size=(n_boot, len(names))) if reference_sd > 0 else \
                np.zeros((n_boot, len(names)))
            ours = [block[i].mean(axis=0) for i in idx]
            slo, shi = _interval(np.array([_tau_rho(m, theirs)[0] for m in ours]))
            lo, hi = _interval(np.array([_tau_rho(m, theirs + e)[0] for m, e in zip(ours, noise)]))
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
    va, ca, _, ha, _ = _cube(before, metric)
    vb, cb, _, hb, _ = _cube(after, metric)
    rng = np.random.default_rng(random_state)
    rows = []
    for ka, horizon in enumerate(ha):
        if horizon not in hb:
            continue
        kb = hb.index(horizon)
        sa, keep_a = _complete(va[:, :, ka])
        sb, keep_b = _complete(vb[:, :, kb])
        done_a = {c for c, k in zip(ca, keep_a) if k}
        done_b = {c for c, k in zip(cb, keep_b) if k}
        names = sorted(done_a & done_b & set(reference))
        if len(names) < 3:
            continue
        a = va[sa][:, [ca.index(n) for n in names], ka]
        b = vb[sb][:, [cb.index(n) for n in names], kb]
        theirs = np.array([reference[n] for n in names])
        tau_a, tau_b = _tau_rho(a.mean(axis=0), theirs)[0], _tau_rho(b.mean(axis=0), theirs)[0]
        ia, ib = _boot_indices(a.shape[0], n_boot, rng), _boot_indices(b.shape[0], n_boot, rng)
        noise = rng.normal(0.0, reference_sd, size=(n_boot, len(names))) if reference_sd > 0 else \
            np.zeros((n_boot, len(names)))
        draws = np.array([_tau_rho(b[j].mean(axis=0), theirs + e)[0] - _tau_rho(a[i].mean(axis=0), theirs + e)[0]
                          for i, j, e in zip(ia, ib, noise)])
        seeds_only = np.array([_tau_rho(b[j].mean(axis=0), theirs)[0] - _tau_rho(a[i].mean(axis=0), theirs)[0]
                               for i, j in zip(ia, ib)])
        lo, hi = _interval(draws, level)
        slo, shi = _interval(seeds_only, level)
        row = {"horizon": float(horizon), "n_candidates": len(names), "n_seeds_before": int(a.shape[0]),
               "n_seeds_after": int(b.shape[0]), "tau_before": tau_a, "tau_after": tau_b,
               "shift": tau_b - tau_a, "shift_low": lo, "shift_high": hi, "shift_low_seeds": slo,
               "shift_high_seeds": shi}
        if baseline is not None and baseline in names:
            j = names.index(baseline)
            for tag, block, idx in (("before", a, ia), ("after", b, ib)):
                row[f"lead_{tag}"] = _lead(block.mean(axis=0), j)
                row[f"lead_{tag}_low"], row[f"lead_{tag}_high"] = _interval(
                    np.array([_lead(block[i].mean(axis=0), j) for i in idx]), level)
        rows.append(row)
    return pd.DataFrame(rows)


def _lead(means: np.ndarray, j: int) -> float:
    """The best other candidate's mean minus candidate j's (positive: j is ahead)."""
    return float(np.delete(means, j).min() - means[j])


# --------------------------------------------------------------------------- scaling


ALPHA_MIN, ALPHA_MAX = 1e-3, 3.0  # fit_power_law's bounds on the exponent


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
                                                  bounds=([0.0, 0.0, ALPHA_MIN], [lo, np.inf, ALPHA_MAX]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    return float(e), float(a) * scale ** float(alpha), float(alpha)  # A in the horizons' own units


def predict(params, horizon) -> float:
    e, a, alpha = params
    return float(e + a * float(horizon) ** -alpha)


def bounds_hit(fit, losses) -> str:
    """Which bounds of :func:`fit_power_law` a fit sits on (``"E=0"``, ``"E=min loss"``,
    ``"alpha=3"``, ``"alpha=0"``, ``"A=0"``, joined by ``;``), ``""`` for none. A fit on a
    bound is not the least-squares curve the data ask for (left free, a floor at 0 goes
    negative): its extrapolation is the bound's, not the data's."""
    e, a, alpha = fit
    lo = float(np.nanmin(losses))
    tol = 1e-6 * abs(lo)
    hit = []
    if e <= tol:
        hit.append("E=0")
    elif e >= lo - tol:
        hit.append("E=min loss")
    if a <= tol:
        hit.append("A=0")
    if alpha >= ALPHA_MAX * (1 - 1e-6):
        hit.append("alpha=3")
    elif alpha <= ALPHA_MIN * (1 + 1e-3):
        hit.append("alpha=0")
    return ";".join(hit)


def extrapolate(df: pd.DataFrame, target: float, metric: str = "val_loss", n_boot: int = 1000,
                random_state=0, reference: str | None = None) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Each candidate's fitted ``L(D) = E + A D^-alpha`` over the rungs it reached, its
    prediction at ``target`` (same unit as the horizons) and a 95 % prediction interval
    from refitting on bootstrap resamples of seeds. Returns the table (candidate, E, A,
    alpha, horizon_last, loss_last, target, prediction, prediction_low, prediction_high,
    n_rungs, fit_share: the share of resamples whose fit converged, and the fit's checks
    below) and the bootstrap predictions per candidate (NaN where a fit failed), the same
    draws for every candidate.

    Checks: ``at_bound`` (:func:`bounds_hit`); ``residual_last`` (measured minus fitted
    mean at the last horizon) and ``residual_tail`` (the largest absolute residual at the
    two longest horizons; with 3 rungs a free fit is exact, so it is 0 unless a bound
    holds); with a ``reference`` (the baseline), ``gap_to_reference`` (measured, last
    horizon) and ``residual_exceeds_gap`` (this fit's or the baseline's ``residual_tail``
    is at least that gap: the fits cannot resolve the gap they would extrapolate);
    ``defensible`` is neither. A fit that is not defensible supports no crossover claim.
    ``few_seeds`` flags intervals from too few seeds (:func:`few_seeds`)."""
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
        means = np.nanmean(block[seeds], axis=0) if seeds.any() else None
        fit = fit_power_law(hs, means) if seeds.any() else None
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
               "fit_share": float(np.isfinite(draws).mean()), "n_seeds": int(seeds.sum()),
               "few_seeds": few_seeds(int(seeds.sum())), "at_bound": "", "residual_last": np.nan,
               "residual_tail": np.nan}
        if fit is not None:
            resid = means - np.array([predict(fit, h) for h in hs])
            row.update(E=fit[0], A=fit[1], alpha=fit[2], prediction=predict(fit, target),
                       at_bound=bounds_hit(fit, means), residual_last=float(resid[-1]),
                       residual_tail=float(np.abs(resid[-2:]).max()))
        rows.append(row)
    table = pd.DataFrame(rows)
    table["gap_to_reference"] = np.nan
    table["residual_exceeds_gap"] = pd.array([pd.NA] * len(table), dtype="boolean")
    fitted = table["E"].notna()
    table["defensible"] = fitted & (table["at_bound"] == "")
    if reference is not None and reference in set(table["candidate"]):
        ref = table.set_index("candidate").loc[reference]
        same = fitted & (table["horizon_last"] == ref["horizon_last"]) & (table["candidate"] != reference)
        gap = table["loss_last"] - ref["loss_last"]
        table.loc[same, "gap_to_reference"] = gap[same]
        worst = np.maximum(table["residual_tail"], ref["residual_tail"])
        table.loc[same, "residual_exceeds_gap"] = (worst >= gap.abs())[same]
        table["defensible"] = table["defensible"] & ~table["residual_exceeds_gap"].fillna(False).astype(bool)
        if not ref["at_bound"] == "" or not np.isfinite(ref["E"]):
            table.loc[table["candidate"] != reference, "defensible"] = False  # every gap uses the baseline's fit
    return table, boots


def fit_shared_floor(horizons, means) -> tuple[float, np.ndarray, np.ndarray] | None:
    """One floor for every candidate: least-squares ``(E, A[j], alpha[j])`` of
    ``L_j(D) = E + A_j D^-alpha_j`` through ``means[candidate, rung]`` (NaN where a
    candidate did not reach a rung; candidates with fewer than 2 rungs are left out,
    their A and alpha NaN), with :func:`fit_power_law`'s bounds (``0 <= E <= min``). A
    second opinion on per-candidate fits: it spends 2K + 1 parameters on K candidates'
    points where those spend 3K, and a floor the maps share is the usual assumption of scaling laws
    (the data set's entropy). A in the horizons' own units. None when it fails."""
    h = np.asarray(horizons, dtype=float)
    y = np.asarray(means, dtype=float)
    use = np.isfinite(y).sum(axis=1) >= 2
    if use.sum() < 1 or np.isfinite(y[use]).sum() < 2 * use.sum() + 2:
        return None
    scale = h.max()
    x = h / scale
    ys = y[use]
    k = ys.shape[0]
    lo = float(np.nanmin(ys))
    mask = np.isfinite(ys)
    e0 = 0.5 * lo
    a0, al0 = np.empty(k), np.empty(k)
    for j in range(k):
        m = mask[j]
        lx, ly = np.log(x[m]), np.log(np.maximum(ys[j, m] - e0, 1e-9))
        slope = _slope(lx, ly)
        slope = slope if np.isfinite(slope) else -0.5
        a0[j], al0[j] = math.exp(float(np.mean(ly - slope * lx))), float(np.clip(-slope, 0.01, 2.9))

    def resid(theta):
        e, a, al = theta[0], theta[1:k + 1], theta[k + 1:]
        return (e + a[:, None] * np.power(x[None, :], -al[:, None]))[mask] - ys[mask]

    lower = np.r_[0.0, np.zeros(k), np.full(k, ALPHA_MIN)]
    upper = np.r_[lo, np.full(k, np.inf), np.full(k, ALPHA_MAX)]
    theta0 = np.clip(np.r_[e0, a0, al0], lower, np.where(np.isfinite(upper), upper * (1 - 1e-9), upper))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sol = optimize.least_squares(resid, theta0, bounds=(lower, upper), method="trf", x_scale="jac")
    except (ValueError, np.linalg.LinAlgError):
        return None
    if not sol.success:
        return None
    e = float(sol.x[0])
    a = np.full(len(y), np.nan)
    al = np.full(len(y), np.nan)
    al[use] = sol.x[k + 1:]
    a[use] = sol.x[1:k + 1] * np.power(scale, al[use])
    return e, a, al


def shared_floor(df: pd.DataFrame, target: float, metric: str = "val_loss", n_boot: int = 1000,
                 random_state=0) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """:func:`fit_shared_floor` over every candidate's mean at each rung, each candidate's
    prediction at ``target`` and a 95 % interval from refits on the same seed resamples as
    :func:`extrapolate` (same ``random_state``: the same draws). Returns the table
    (candidate, shared_E, shared_at_bound: the floor sits at 0 or at the lowest mean,
    shared_A, shared_alpha, shared_prediction, shared_prediction_low, shared_prediction_high)
    and the bootstrap predictions per candidate."""
    values, cands, rungs, horizons, _ = _cube(df, metric)
    rng = np.random.default_rng(random_state)
    idx = _boot_indices(values.shape[0], n_boot, rng)
    seeds = ~np.isnan(values).reshape(values.shape[0], -1).all(axis=1)

    def means(pick):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a candidate missing a rung: NaN there
            return np.nanmean(values[pick], axis=0)  # (candidates, rungs)

    point = fit_shared_floor(horizons, means(np.flatnonzero(seeds)))
    draws = np.full((n_boot, len(cands)), np.nan)
    if point is not None:
        for b, pick in enumerate(idx):
            f = fit_shared_floor(horizons, means(pick))
            if f is not None:
                draws[b] = f[0] + f[1] * float(target) ** -f[2]
    rows = []
    for j, name in enumerate(cands):
        lo, hi = _interval(draws[:, j])
        row = {"candidate": name, "shared_E": np.nan, "shared_at_bound": "", "shared_A": np.nan,
               "shared_alpha": np.nan, "shared_prediction": np.nan, "shared_prediction_low": lo,
               "shared_prediction_high": hi}
        if point is not None and np.isfinite(point[1][j]):
            e, a, al = point[0], point[1][j], point[2][j]
            lowest = float(np.nanmin(means(np.flatnonzero(seeds))))
            row.update(shared_E=e, shared_A=a, shared_alpha=al, shared_prediction=e + a * float(target) ** -al,
                       shared_at_bound="E=0" if e <= 1e-6 * lowest else "E=min loss" if e >= lowest * (1 - 1e-6)
                       else "")
        rows.append(row)
    return pd.DataFrame(rows), {name: draws[:, j] for j, name in enumerate(cands)}


def _interval_inf(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Like :func:`_interval` for draws that may be +inf (order statistics, no interpolation)."""
    draws = draws[~np.isnan(draws)]
    if not draws.size:
        return float("nan"), float("nan")
    lo, hi = np.quantile(draws, [0.5 * (1 - level), 0.5 * (1 + level)], method="inverted_cdf")
    return float(lo), float(hi)


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x; NaN when x does not vary (or is not finite)."""
    dx = x - x.mean()
    ss = float(dx @ dx)
    return float(dx @ (y - y.mean()) / ss) if np.isfinite(ss) and ss > 0 else float("nan")


def gap_trend(df: pd.DataFrame, reference: str, target: float, metric: str = "val_loss", last_rungs: int = 3,
              n_boot: int = 1000, random_state=0) -> pd.DataFrame:
    """The measured trend of each candidate's gap to ``reference`` (the baseline): the
    paired per-seed gap ``L(candidate) - L(reference)`` at each rung, regressed on log2 of
    the horizon, in nats (the metric's unit) per doubling. The slope is the least-squares
    line through the mean gaps over the ``last_rungs`` longest horizons (default 3: the
    fewest that make it more than one difference, and the latest regime of training,
    the one an extrapolation continues; ``slope_all`` uses every rung); ``change_last`` is
    the last step alone (last rung minus the one before, per doubling). ``closes_at`` is the
    horizon at which the measured gap at the last rung, moving at ``slope`` per doubling,
    reaches 0 (+inf when the slope does not move it towards 0). Intervals: 95 %, from
    resampling seeds (the same draw for every candidate and rung; the same draws as
    :func:`extrapolate` with the same ``random_state``). One row per candidate that shares
    seeds and its last rung with the reference; ``few_seeds`` as in :func:`few_seeds`."""
    values, cands, rungs, horizons, _ = _cube(df, metric)
    if reference not in cands:
        raise ValueError(f"the reference {reference!r} has no rows")
    rng = np.random.default_rng(random_state)
    idx = _boot_indices(values.shape[0], n_boot, rng)
    r = cands.index(reference)
    log_h = np.log2(np.asarray(horizons, dtype=float))
    cols = ["candidate", "reference", "n_seeds", "few_seeds", "horizon_first", "horizon_last", "gap_first",
            "gap_last", "gap_last_low", "gap_last_high", "trend_from", "slope", "slope_low", "slope_high",
            "slope_all", "slope_all_low", "slope_all_high", "change_last", "change_last_low", "change_last_high",
            "closes_at", "closes_at_low", "closes_at_high", "target", "closes_before_target"]
    rows = []
    for j, name in enumerate(cands):
        if j == r:
            continue
        both = ~np.isnan(values[:, j, :]) & ~np.isnan(values[:, r, :])
        ks = [k for k in range(len(rungs)) if both[:, k].any()]
        if len(ks) < 2:
            continue
        seeds = both[:, ks].all(axis=1)
        if not seeds.any():
            continue
        gaps = (values[:, j, :] - values[:, r, :])[:, ks]  # (seeds, rungs both reached)
        x = log_h[ks]
        tail = slice(max(0, len(ks) - last_rungs), len(ks))
        good = np.flatnonzero(seeds)

        def stat(pick):
            g = gaps[pick].mean(axis=0)
            slope = _slope(x[tail], g[tail])
            step = _slope(x[-2:], g[-2:])
            closes = g[-1] == 0 or slope * g[-1] < 0
            doublings = -g[-1] / slope if closes and slope != 0 else (0.0 if g[-1] == 0 else np.inf)
            doublings = doublings if np.isfinite(slope) else np.nan
            with np.errstate(over="ignore"):  # a slope near 0: closes "at" +inf
                closes_at = horizons[ks[-1]] * np.exp2(doublings)
            return g[-1], slope, _slope(x, g), step, float(closes_at)

        point = stat(good)
        draws = []
        for pick in idx:
            pick = pick[np.isin(pick, good)]
            draws.append(stat(pick) if pick.size else (np.nan,) * 5)
        draws = np.array(draws, dtype=float)
        (gl, gh), (sl, sh), (al, ah), (cl, ch) = (_interval(draws[:, i]) for i in range(4))
        xl, xh = _interval_inf(draws[:, 4])
        n = int(seeds.sum())
        rows.append({"candidate": name, "reference": reference, "n_seeds": n, "few_seeds": few_seeds(n),
                     "horizon_first": horizons[ks[0]], "horizon_last": horizons[ks[-1]],
                     "gap_first": float(gaps[good, 0].mean()), "gap_last": point[0], "gap_last_low": gl,
                     "gap_last_high": gh, "trend_from": horizons[ks[tail.start]], "slope": point[1], "slope_low": sl,
                     "slope_high": sh, "slope_all": point[2], "slope_all_low": al, "slope_all_high": ah,
                     "change_last": point[3], "change_last_low": cl, "change_last_high": ch, "closes_at": point[4],
                     "closes_at_low": xl, "closes_at_high": xh, "target": float(target),
                     "closes_before_target": bool(point[4] <= target)})
    return pd.DataFrame(rows, columns=cols)


def paired_gap_at_target(table: pd.DataFrame, boots: dict[str, np.ndarray], reference: str, column: str,
                         prefix: str) -> pd.DataFrame:
    """Each candidate's predicted gap to ``reference`` at the target (``table[column]``
    difference), with a 95 % interval from the paired bootstrap draws (``boots``: the
    same seed resamples for every candidate). Columns: candidate, ``{prefix}_gap_at_target``,
    ``_low``, ``_high``."""
    t = table.set_index("candidate")
    rows = []
    for name in t.index:
        if name == reference or reference not in t.index:
            continue
        d = boots[name] - boots[reference]
        lo, hi = _interval(d)
        gap = float(t.loc[name, column] - t.loc[reference, column])
        rows.append({"candidate": name, f"{prefix}_gap_at_target": gap,
                     f"{prefix}_gap_at_target_low": lo, f"{prefix}_gap_at_target_high": hi})
    return pd.DataFrame(rows, columns=["candidate", f"{prefix}_gap_at_target", f"{prefix}_gap_at_target_low",
                                       f"{prefix}_gap_at_target_high"])


def crossings(table: pd.DataFrame, boots: dict[str, np.ndarray]) -> pd.DataFrame:
    """Pairs whose order at the last horizon is predicted to flip before the target: ``a``
    better than ``b`` at the last common horizon but predicted worse at the target. With
    the horizon where the fitted curves cross and the share of bootstrap resamples in
    which the order at the target flips (how sure the prediction is). ``fits_agree`` is False
    where the two fitted curves already have the pair the other way round at the last
    horizon (the fits miss the measured order there, so the "crossing" lies inside the data:
    ``crossing_at`` is then NaN). ``defensible`` is False where either fit sits on a bound
    or misses the data at the longest horizons (``residual_tail``) by at least the pair's
    measured gap: such a pair supports no crossover claim. One row per pair."""
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
        defensible = all(_defensible(p_) for p_ in (pb, pw)) and \
            max(pb.get("residual_tail", 0.0), pw.get("residual_tail", 0.0)) < abs(pw["loss_last"] - pb["loss_last"])
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
                     "fits_agree": agree, "target": hi, "flip_share": share, "defensible": defensible})
    return pd.DataFrame(rows, columns=["better_now", "worse_now", "horizon_last", "crossing_at", "fits_agree",
                                       "target", "flip_share", "defensible"])


def _defensible(fit: pd.Series) -> bool:
    """A fit free of its bounds (:func:`bounds_hit`; judged from E alone when the table has
    no ``at_bound`` column)."""
    hit = fit.get("at_bound")
    if hit is None or (isinstance(hit, float) and math.isnan(hit)):
        hit = bounds_hit((fit["E"], fit["A"], fit["alpha"]), [fit["loss_last"]])
    return hit == ""


# --------------------------------------------------------------------------- a proxy against the truth


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
    from .stats import to_matrix
    from .topgroup import top_group

    p = proxy.pivot_table(index="seed", columns="candidate", values=metric, aggfunc="last")
    t = to_matrix(truth, metric).dropna(axis=0, how="any")
    names = sorted(set(p.columns) & set(t.columns))
    if len(names) < 2:
        raise ValueError(f"the proxy and the stand-alone rows share {len(names)} candidate(s); need two or more")
    p, t = p[names].dropna(axis=0, how="any"), t[names]
    pm, tm = p.mean().to_numpy(), t.mean().to_numpy()
    tau, rho = _tau_rho_small(pm, tm)
    rng = np.random.default_rng(random_state)
    draws, regrets = [], []
    for _ in range(n_boot):
        pi = rng.integers(0, len(p), size=len(p))
        ti = rng.integers(0, len(t), size=len(t))
        pb, tb = p.to_numpy()[pi].mean(axis=0), t.to_numpy()[ti].mean(axis=0)
        draws.append(_tau_rho_small(pb, tb))
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
        _interval(draws[:, 0]), _interval(draws[:, 1])
    out["regret_low"], out["regret_high"] = _interval(np.array(regrets))
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
        taus.append(_tau_rho(ma, mb)[0])
        ta, tb = set(np.argsort(ma, kind="stable")[:k]), set(np.argsort(mb, kind="stable")[:k])
        tops.append(len(ta & tb) / k)
        regrets += [mb[int(np.argmin(ma))] - mb.min(), ma[int(np.argmin(mb))] - ma.min()]
    taus = np.array(taus)
    lo, hi = _interval(taus)
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
