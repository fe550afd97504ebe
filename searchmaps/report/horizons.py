"""The report's horizon section, for a study trained on a ladder of horizons: does the
ranking hold as training gets longer, and where do the curves go?

:func:`horizon_analysis` computes the statistics; :func:`section` gives ``stability.csv`` (every
pair of horizons: Kendall's tau and Spearman's rho with bootstrap intervals over seeds,
top-group overlap), ``scaling.csv`` (each candidate's
fitted ``L(D) = E + A·D^-alpha``, whether it sits on a bound or misses the data by more
than the gap it extrapolates, its prediction at the target horizon with a bootstrap
prediction interval, and the shared-floor fit's), ``gap_trend.csv`` (with a baseline: each
map's gap to it, its measured trend per doubling of the horizon and where that trend
would close it) and, when the space carries published numbers, ``agreement.csv``
(Kendall's tau against them at every horizon, with a bootstrap interval over seeds and the
published values' own noise, p-values Holm-adjusted across horizons), two figures (rank
vs horizon; loss vs horizon with the fits and their extrapolation), the ranks table and
the sentences that say what they show. The last horizon is the confirmatory one; the
others are descriptive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import stats
from ..results import Role
from ..stats import DEFAULT_RULE
from .section import Section, code, html_table
from .trends import horizon_text as _h
from .trends import shared_floor_sentences, trend_sentences  # noqa: F401  (tests import them from here)
from .sentences import fmt_p


@dataclass(frozen=True, eq=False)
class HorizonAnalysis:
    unit: str  # "tokens" or "training FLOPs"
    horizons: list[float]
    stability: pd.DataFrame
    ranks: pd.DataFrame
    means: pd.DataFrame  # candidate, rung, horizon, n, mean, ci_low, ci_high (val_loss)
    scaling: pd.DataFrame
    crossings: pd.DataFrame
    target: float
    published: pd.DataFrame | None  # tau against a published ranking, per rung
    published_source: str
    reference: str | None = None  # the baseline of gap_trend.csv
    trend: pd.DataFrame | None = None  # each map's gap to the baseline and its trend (gap_trend.csv)
    planned: tuple[float, ...] = ()  # the ladder study.json pre-specified (it may reach further than the rows)


def horizon_analysis(frame: pd.DataFrame, info: dict, target: float | None = None, alpha: float = 0.05,
            n_boot: int = 1000, rule: str = DEFAULT_RULE, reference: str | None = None,
            published_sd: float | None = None) -> HorizonAnalysis | None:
    """The horizon statistics of a study's rows (a :func:`searchmaps.results.records_frame`);
    None for a study with a single horizon. ``target`` (default: the published numbers'
    horizon when study.json has one, else 10x the longest horizon) is where the fits are
    extrapolated to; ``rule`` is the top-group rule of the overlaps (the report's);
    ``reference`` the baseline whose gaps the fits and trends are judged by;
    ``published_sd`` the seed sd assumed in the published numbers (default: study.json's
    ``published.sd``, else :data:`searchmaps.stats.PUBLISHED_SD`)."""
    rows = ladder_rows(frame)
    if rows is None:
        return None
    unit = "training FLOPs" if (rows["horizon"] == "train_flops").any() else "tokens"
    horizons = [float(rows.loc[rows["rung"] == r, "horizon_target"].iloc[0]) for r in sorted(rows["rung"].unique())]
    published = info.get("published") or {}
    if target is None:
        target = float(published.get("tokens") or 0) if unit == "tokens" else 0.0
        target = target if target > horizons[-1] else 10 * horizons[-1]
    reference = reference if reference in set(rows["candidate"]) else None
    scaling, boots = stats.extrapolate(rows, target, n_boot=n_boot, reference=reference)
    shared, shared_boots = stats.shared_floor(rows, target, n_boot=n_boot)
    trend = None
    if reference is not None:
        trend = stats.gap_trend(rows, reference, target, n_boot=n_boot)
        for table, draws, column, prefix in ((scaling, boots, "prediction", "fit"),
                                             (shared, shared_boots, "shared_prediction", "shared")):
            trend = trend.merge(stats.paired_gap_at_target(table, draws, reference, column, prefix),
                                on="candidate", how="left")
    agreement = None
    if published.get("values"):
        sd = float(published_sd if published_sd is not None else published.get("sd", stats.PUBLISHED_SD))
        agreement = stats.agreement_with(rows, published["values"], n_boot=n_boot, reference_sd=sd)
    return HorizonAnalysis(
        unit=unit, horizons=horizons,
        stability=stats.rank_stability(rows, alpha=alpha, n_boot=n_boot, rule=rule),
        ranks=stats.rank_by_rung(rows, n_boot=n_boot), means=_means(rows),
        scaling=scaling.merge(shared, on="candidate", how="left"), crossings=stats.crossings(scaling, boots),
        target=float(target), published=agreement, published_source=str(published.get("source", "")),
        reference=reference, trend=trend, planned=tuple(float(h) for h in info.get("ladder") or ()))


def ladder_rows(frame: pd.DataFrame) -> pd.DataFrame | None:
    """The rows a ladder's statistics use (eval, ok, finite loss, one per candidate, seed and
    rung); None without two rungs."""
    rows = frame[(frame["role"] == Role.EVAL) & (frame["status"] == "ok")
                 & np.isfinite(frame["val_loss"].astype(float))]
    rows = rows.drop_duplicates(["candidate", "seed", "rung"], keep="last")
    return rows if rows["rung"].nunique() >= 2 else None


def _means(rows: pd.DataFrame) -> pd.DataFrame:
    from scipy import stats as st

    g = rows.groupby(["candidate", "rung"])
    out = g.agg(horizon=("horizon_target", "first"), tokens=("tokens", "mean"), n=("val_loss", "count"),
                mean=("val_loss", "mean"), sd=("val_loss", "std")).reset_index()
    half = st.t.ppf(0.975, (out["n"] - 1).clip(lower=1)) * out["sd"] / np.sqrt(out["n"])
    out["ci_low"], out["ci_high"] = out["mean"] - half, out["mean"] + half
    return out


def files(a: HorizonAnalysis) -> dict[str, str]:
    """``stability.csv`` and ``scaling.csv``, with a baseline ``gap_trend.csv``, with
    published numbers ``agreement.csv``: file name -> its text."""
    out = {"stability.csv": a.stability.to_csv(index=False), "scaling.csv": a.scaling.to_csv(index=False)}
    if a.trend is not None:
        out["gap_trend.csv"] = a.trend.to_csv(index=False)
    if a.published is not None:
        out["agreement.csv"] = a.published.assign(source=a.published_source).to_csv(index=False)
    return out


def section(a: HorizonAnalysis, shown: set[str]) -> Section:
    """The horizon section of ``a``: its sentences, the two figures (drawing ``shown``,
    the top group and the baseline, and every candidate when there are few), the ranks
    table and the files of :func:`files`."""
    return Section.of_parts(
        sentence_parts(a),
        figures=[("Rank vs horizon", rank_figure(a, shown),
                  "Each candidate's rank among those that reached a horizon (1 = best), with a 95 % bootstrap "
                  "interval over seeds; all pairs of horizons, with Kendall's τ and Spearman's ρ, are in "
                  "stability.csv."),
                 ("Loss vs horizon", scaling_figure(a, shown),
                  "Mean validation loss at each horizon with its 95 % CI; dotted: the fitted L(D) = E + A·D^-α, "
                  "drawn on to the target; diamond and bar: the fit's value there with a 95 % interval from refits "
                  "on resampled seeds (scaling.csv).")],
        tables=[("Ranks by horizon", table(a))], files=files(a))


# --------------------------------------------------------------------------- words




def _ci(lo: float, hi: float) -> str:
    return f"95 % CI {lo:+.2f} to {hi:+.2f}" if np.isfinite(lo) else "no interval"


def settle_rung(ranks: pd.DataFrame, candidate: str) -> int | None:
    """The first rung from which the candidate's rank no longer changes (point ranks)."""
    r = ranks[ranks["candidate"] == candidate].sort_values("rung")
    if r.empty:
        return None
    values, rungs = list(r["rank"]), list(r["rung"])
    k = len(values) - 1
    while k > 0 and values[k - 1] == values[-1]:
        k -= 1
    return int(rungs[k])


def _nats(x: float) -> str:
    return f"{x:+.3f}" if np.isfinite(x) else "n/a"


def family_sentence(a: HorizonAnalysis) -> str:
    """Which horizon is confirmatory (the pre-specified last rung, or the last one reached when
    the study stopped short of it) and which are descriptive."""
    last = "the ladder's pre-specified last rung"
    if a.planned and a.planned[-1] > a.horizons[-1] * (1 + 1e-6):
        last = (f"the last rung the rows reach; the ladder planned {len(a.planned)} up to {_h(a.planned[-1])}, so "
                f"this is the study as far as it ran, not its pre-specified end")
    return (f"Confirmatory: the last horizon, {_h(a.horizons[-1])} {a.unit}, {last} — "
            f"the top group, the tests and any planned comparisons (their own family) above are made there. The ranks, "
            f"top groups and τ at the {len(a.horizons) - 1} shorter horizons below are descriptive, and a p-value "
            f"repeated at every horizon is Holm-adjusted across the {len(a.horizons)}.")


def seeds_sentence(a: HorizonAnalysis) -> str:
    """How far the section's bootstrap intervals can be trusted at the study's seed count: the
    coverage measured for each of them (:func:`searchmaps.stats.measured_coverage`), said when
    any shown falls below :data:`HOLDS`; with fewer seeds than were measured, the coverage of a
    mean's bootstrap."""
    n = int(a.stability["n_seeds"].min()) if len(a.stability) else 0
    if n < 2:
        return ""
    head = (f"Every interval of the rank stability, the extrapolation and the comparison with a published ranking "
            f"resamples {n} seeds (the gap trends' are t intervals over the seeds' own values, docs/statistics.md)")
    measured = stats.measured_coverage(n)
    if measured is None:
        if not stats.few_seeds(n):
            return ""
        return (f"{head}: from so few a percentile bootstrap is too narrow (for a mean it covers about "
                f"{100 * stats.bootstrap_coverage(n):.0f} %, not 95 %), so read them as lower bounds on the "
                f"uncertainty (few_seeds in the csv files).")
    m, cov = measured
    shown = {"τ between horizons": cov["tau first-last"]}
    if a.published is not None and len(a.published):
        shown["τ against the published ranking"] = cov["tau vs table"]
    shown["a fitted curve's value at the target"] = cov["prediction"]
    shown["the shared floor's"] = cov["prediction (shared floor)"]
    shown["a fitted gap to the baseline there"] = cov["gap at target"]
    if min(shown.values()) >= HOLDS:
        return ""
    at = f"{m} seeds" if m == n else f"{m} seeds, the most measured up to {n}"
    listed = ", ".join(f"{q} {100 * c:.0f} %" for q, c in shown.items())
    return (f"{head}. On synthetic studies copying the scale study's rows, at {at}, these nominal 95 % intervals "
            f"covered: {listed} ({stats.COVERAGE_SOURCE}); read those below 95 % as lower bounds on the "
            f"uncertainty (few_seeds in the csv files).")


HOLDS = 0.93  # a nominal 95 % interval whose measured coverage is below this is said not to hold it


def sentence_parts(a: HorizonAnalysis) -> list[tuple[str, list[str]]]:
    """The result's subsections of the ladder: "Horizons" (which horizon is confirmatory, the
    maps that never reached it, how far the intervals can be trusted), "Rank stability"
    (whether the ranking between horizons is stable), "Extrapolation (fitted curves)",
    "Shared floor (second opinion)" and "Gap trends (measured)" (what the fits and the
    measured gap trends say about the target) and "Against <the published ranking>"."""
    head = [family_sentence(a)]
    short = missing_sentence(a.means)
    if short:
        head.append(short)
    said = seeds_sentence(a)
    if said:
        head.append(said)
    out = []
    st = a.stability
    first_last = st[(st["rung_a"] == st["rung_a"].min()) & (st["rung_b"] == st["rung_b"].max())].iloc[0]
    tau, lo, hi = first_last["kendall_tau"], first_last["kendall_tau_low"], first_last["kendall_tau_high"]
    verdict = ("the ranking at the shortest horizon already predicts the longest one" if lo > 0.5 else
               "the ranking at the shortest horizon agrees only loosely with the longest one" if lo > 0 else
               "the ranking at the shortest horizon does not predict the longest one")
    out.append(f"Across the {len(a.horizons)} horizons ({_h(a.horizons[0])} to {_h(a.horizons[-1])} {a.unit}), "
               f"Kendall's τ between the shortest and the longest is {tau:.2f} ({_ci(lo, hi)}, "
               f"{int(first_last['n_candidates'])} candidates, bootstrap over {int(first_last['n_seeds'])} seeds): "
               f"{verdict}.")
    consecutive = st[st["rung_b"] == st["rung_a"] + 1]
    if len(consecutive) > 1:
        out.append("Between consecutive horizons τ is " + ", ".join(
            f"{r.kendall_tau:.2f} ({_h(r.horizon_a)}→{_h(r.horizon_b)}; {_ci(r.kendall_tau_low, r.kendall_tau_high)})"
            for r in consecutive.itertuples()) + ".")
    if isinstance(first_last["top_group_a"], str):
        out.append(f"The top groups at the shortest (descriptive) and the longest horizon share "
                   f"{int(first_last['top_overlap'])} of {int(first_last['top_union'])} candidates.")
    fits = crossing_sentences(a.scaling, a.crossings, a.target, a.unit)
    for said in (floor_sentence(a.scaling, a.horizons), misfit_sentence(a.scaling, a.reference)):
        if said:
            fits.append(said)
    trends, shared = [], []
    if a.trend is not None and len(a.trend):
        shared = shared_floor_sentences(a.scaling, a.trend, a.target, a.unit)
        trends = trend_sentences(a.trend, a.unit)
    parts = [("Horizons", head), ("Rank stability", out), ("Extrapolation (fitted curves)", fits),
             ("Shared floor (second opinion)", shared), ("Gap trends (measured)", trends)]
    if a.published is not None and a.published["kendall_tau"].notna().any():
        name = (a.published_source or "").split(" (")[0] or "the published ranking"
        parts.append((f"Against {name}", [published_sentence(a.published, a.published_source,
                                                              a.planned[-1] if a.planned else None)]))
    return parts


def missing_sentence(means: pd.DataFrame) -> str:
    """The candidates with rows on the ladder but none at its last horizon: the top group and
    the counts there leave them out, and the page must say so."""
    last = means["rung"].max()
    reached = means.groupby("candidate")["rung"].max()
    short = reached[reached < last].sort_index()
    if short.empty:
        return ""
    h = means.set_index(["candidate", "rung"])["horizon"]
    names = ", ".join(f"`{c}` (to {_h(h[(c, r)])})" for c, r in short.items())
    one = len(short) == 1
    return (f"{names} {'has' if one else 'have'} no row at the last horizon, so the ranking, the top group and the "
            f"counts there leave {'it' if one else 'them'} out.")


FAR = 4.0  # an extrapolation past this multiple of the last horizon is never called a prediction (issue 44)


def crossing_sentences(scaling: pd.DataFrame, crossings: pd.DataFrame, target: float, unit: str) -> list[str]:
    """What the per-candidate fits say about order changes before ``target``: a crossover
    is claimed only for pairs whose fits are both free of their bounds and close enough
    to the data (``crossings["defensible"]``); for the rest the sentence says the fits
    cannot tell, never that the order changes or holds."""
    last = scaling["horizon_last"].max()
    reach = target / last if last > 0 else float("inf")
    far = reach > FAR
    rungs = int(scaling["n_rungs"].max()) if "n_rungs" in scaling and scaling["n_rungs"].notna().any() else 0
    head = (f"Carried {reach:.0f}× beyond the last horizon ({_h(last)}) to {_h(target)} {unit}, each candidate's "
            f"fitted L(D) = E + A·D^-α (3 parameters on {rungs} horizons)" if far else
            f"Extrapolating each candidate's fitted L(D) = E + A·D^-α to {_h(target)} {unit}")
    ok = crossings[crossings["defensible"]] if "defensible" in crossings else crossings
    weak = crossings[~crossings["defensible"]] if "defensible" in crossings else crossings.iloc[:0]
    fitted = scaling[np.isfinite(scaling["E"]) & (scaling["horizon_last"] == last)]
    unsound = int((~fitted["defensible"]).sum()) if "defensible" in fitted else 0
    out = []
    if not ok.empty:
        likely = ok.sort_values("flip_share", ascending=False)
        parts = [f"`{r.worse_now}` passing `{r.better_now}` ("
                 + (f"fitted curves cross near {_h(r.crossing_at)}" if r.fits_agree else
                    f"the fitted curves already swap them at {_h(r.horizon_last)}, where the measured means do "
                    f"not: a misfit inside the data more than a prediction")
                 + f"; the order at the target flips in {r.flip_share:.0%} of seed resamples)"
                 for r in likely.head(4).itertuples()]
        more = f" and {len(likely) - 4} more pair{'s' if len(likely) > 5 else ''}" if len(likely) > 4 else ""
        if far:
            out.append(f"{head} has " + "; ".join(parts) + more + f". That is where the fits lead, not a "
                       f"prediction: nothing past {_h(last)} is measured, and the intervals in scaling.csv resample "
                       f"seeds and leave out the error of the curve's form.")
        else:
            out.append(f"{head} predicts " + "; ".join(parts) + more + ". The intervals in scaling.csv resample "
                       "seeds and leave out the error of the curve's form.")
    if not weak.empty:
        out.append(f"The fitted curves of {len(weak)} pair{'s' if len(weak) > 1 else ''} change order before "
                   f"{_h(target)}, but in each pair a fit sits on a bound or misses the data at the longest horizons "
                   f"by at least the pair's gap: no crossover is claimed from them.")
    if ok.empty and weak.empty:
        if unsound:
            out.append(f"{head} keeps today's order, but {unsound} of {len(fitted)} fits sit on a bound or miss the "
                       f"data by at least their gap to the baseline, so that is no evidence the order holds either.")
        else:
            out.append(f"{head} {'keeps' if far else 'predicts no change of'} the order among candidates that "
                       f"reached the last horizon{': where the fits lead, not a prediction' if far else ''}.")
    return out


def misfit_sentence(scaling: pd.DataFrame, reference: str | None) -> str:
    """How far the fits miss the data at the longest horizons, against the gaps to the
    baseline they would extrapolate."""
    fitted = scaling[np.isfinite(scaling["E"]) & np.isfinite(scaling["residual_tail"])]
    if fitted.empty or reference is None:
        return ""
    gaps = fitted[fitted["gap_to_reference"].notna()]
    over = gaps[gaps["residual_exceeds_gap"].astype(bool)]
    if over.empty:
        return ""
    lo, hi = fitted["residual_tail"].min(), fitted["residual_tail"].max()
    return (f"At the two longest horizons the fits miss the measured means by {lo:.3f} to {hi:.3f} nats; the gaps to "
            f"the baseline `{reference}` there are {gaps['gap_to_reference'].abs().min():.3f} to "
            f"{gaps['gap_to_reference'].abs().max():.3f}. For {len(over)} of {len(gaps)} maps the miss (theirs or the "
            f"baseline's) is at least the gap, so their fits cannot say where that gap goes (scaling.csv: "
            f"residual_tail, residual_exceeds_gap).")


def published_sentence(published: pd.DataFrame, source: str, planned_last: float | None = None) -> str:
    """τ against a published single-seed ranking at each horizon, its interval with the
    published values' assumed noise, and Holm-adjusted p-values. The last rung is called
    confirmatory only where it is the ladder's pre-specified last one (``planned_last``,
    study.json's ladder); a study that stopped short says which rung was (issue 44)."""
    sd = float(published["reference_sd"].iloc[0]) if "reference_sd" in published else 0.0
    rows = [r for r in published.itertuples() if np.isfinite(r.kendall_tau)]
    short = planned_last is not None and len(rows) and planned_last > float(rows[-1].horizon) * (1 + 1e-6)
    label = (f"; the last rung reached, not the pre-specified confirmatory one, {_h(planned_last)}" if short
             else "; confirmatory")
    return (f"Against {source or 'the published ranking'}: Kendall's τ is " + ", ".join(
        f"{r.kendall_tau:+.2f} at {_h(r.horizon)} ({_ci(r.kendall_tau_low, r.kendall_tau_high)}, "
        f"{'Holm-adjusted ' if len(rows) > 1 else ''}p = {fmt_p(r.p_holm)}, {int(r.n_candidates)} maps"
        + (label if getattr(r, "confirmatory", False) else "") + ")" for r in rows)
        + f". The intervals resample this study's seeds and add to every published value the seed noise of a "
          f"single-seed number, assumed N(0, {sd:g}) in its own unit (agreement.csv, reference_sd; without it, "
          f"kendall_tau_low_seeds/high_seeds)" + (f"; the p-values are Holm-adjusted across the {len(rows)} horizons "
                                                   f"(raw in p_value)." if len(rows) > 1 else "."))


def floor_sentence(scaling: pd.DataFrame, horizons: list[float]) -> str:
    """A warning when fitted floors ``E`` sit at their bound 0: the horizons show no
    saturation, the fit is a pure power law, and its extrapolation goes on falling."""
    fitted = scaling[np.isfinite(scaling["E"])]
    at_zero = fitted[fitted["E"] <= 1e-6 * fitted["loss_last"]]
    if at_zero.empty:
        return ""
    return (f"For {len(at_zero)} of {len(fitted)} candidates the fitted floor E is at its bound 0: over "
            f"{_h(horizons[0])} to {_h(horizons[-1])} the losses show no sign of levelling off, so the fit is a "
            f"pure power law and its predictions at the target keep falling with no floor — read them as a "
            f"trend, not a loss you will reach.")


def table(a: HorizonAnalysis) -> str:
    """Each candidate's rank at every horizon and where it settles, as HTML."""
    piv = a.ranks.pivot(index="candidate", columns="rung", values="rank")
    last = piv.columns.max()
    piv = piv.sort_values(last)
    head = ["candidate"] + [f"rank at {_h(h)}" for h in a.horizons] + ["settles at", f"fitted loss at {_h(a.target)}"]
    fit = a.scaling.set_index("candidate")
    rows = []
    for cand, ranks in piv.iterrows():
        settle = settle_rung(a.ranks, cand)
        p = fit.loc[cand] if cand in fit.index else None
        pred = (f"{p['prediction']:.3f} ({p['prediction_low']:.3f} to {p['prediction_high']:.3f})"
                + (f" — fit on a bound ({p['at_bound']})" if p.get("at_bound") else "")
                if p is not None and np.isfinite(p["prediction"]) else "–")
        rows.append([code(cand)] + [("–" if math.isnan(v) else f"{v:g}") for v in ranks]
                    + [_h(a.horizons[settle]) if settle is not None else "–", pred])
    return html_table(head, rows)


# --------------------------------------------------------------------------- figures


def rank_figure(a: HorizonAnalysis, shown: set[str]):
    """One line per candidate: its rank (1 = best) at each horizon, with the bootstrap interval."""
    import plotly.colors as pc
    import plotly.graph_objects as go

    palette = pc.qualitative.Plotly + pc.qualitative.Dark24
    fig = go.Figure()
    order = a.ranks[a.ranks["rung"] == a.ranks["rung"].max()].sort_values("rank")["candidate"].tolist()
    order += [c for c in a.ranks["candidate"].unique() if c not in order]
    for i, cand in enumerate(order):
        r = a.ranks[a.ranks["candidate"] == cand].sort_values("rung")
        fig.add_trace(go.Scatter(
            x=r["horizon"], y=r["rank"], mode="lines+markers", name=cand,
            visible=True if cand in shown or len(order) <= 8 else "legendonly",
            line=dict(color=palette[i % len(palette)]),
            error_y=dict(type="data", symmetric=False, array=r["rank_high"] - r["rank"],
                         arrayminus=r["rank"] - r["rank_low"], thickness=1),
            hovertemplate=f"{cand}<br>%{{x:,.3g}} {a.unit}<br>rank %{{y}}<extra></extra>"))
    fig.update_layout(template="plotly_white", font=dict(size=14), height=520, margin=dict(l=70, r=30, t=60, b=60),
                      title="Rank vs horizon (1 = lowest validation loss; bars: 95 % bootstrap interval over seeds)")
    fig.update_xaxes(type="log", title=f"horizon ({a.unit})")
    fig.update_yaxes(autorange="reversed", title="rank", dtick=1)
    return fig


def scaling_figure(a: HorizonAnalysis, shown: set[str]):
    """Mean validation loss at each horizon (95 % CI) with the fitted power law, drawn on to
    the target, where the bootstrap prediction interval is a bar."""
    import plotly.colors as pc
    import plotly.graph_objects as go

    palette = pc.qualitative.Plotly + pc.qualitative.Dark24
    fig = go.Figure()
    fit = a.scaling.set_index("candidate")
    cands = sorted(a.means["candidate"].unique(), key=lambda c: fit.loc[c, "loss_last"] if c in fit.index else 0)
    grid = np.geomspace(a.horizons[0], a.target, 80)
    for i, cand in enumerate(cands):
        color = palette[i % len(palette)]
        visible = True if cand in shown or len(cands) <= 8 else "legendonly"
        m = a.means[a.means["candidate"] == cand].sort_values("rung")
        fig.add_trace(go.Scatter(
            x=m["horizon"], y=m["mean"], mode="markers", name=cand, legendgroup=cand, visible=visible,
            marker=dict(color=color, size=8),
            error_y=dict(type="data", symmetric=False, array=m["ci_high"] - m["mean"],
                         arrayminus=m["mean"] - m["ci_low"], thickness=1),
            hovertemplate=f"{cand}<br>%{{x:,.3g}} {a.unit}<br>val loss %{{y:.4f}}<extra></extra>"))
        if cand in fit.index and np.isfinite(fit.loc[cand, "prediction"]):
            p = fit.loc[cand]
            fig.add_trace(go.Scatter(
                x=grid, y=[stats.predict((p["E"], p["A"], p["alpha"]), d) for d in grid], mode="lines",
                legendgroup=cand, showlegend=False, visible=visible, line=dict(color=color, dash="dot", width=1.5),
                hoverinfo="skip"))
            fig.add_trace(go.Scatter(
                x=[a.target], y=[p["prediction"]], mode="markers", legendgroup=cand, showlegend=False,
                visible=visible, marker=dict(color=color, symbol="diamond", size=9),
                error_y=dict(type="data", symmetric=False, array=[p["prediction_high"] - p["prediction"]],
                             arrayminus=[p["prediction"] - p["prediction_low"]], thickness=1.5),
                hovertemplate=(f"{cand} at {_h(a.target)}: %{{y:.4f}} predicted ({p['prediction_low']:.4f} to "
                               f"{p['prediction_high']:.4f})<br>E = {p['E']:.3f}, α = {p['alpha']:.3f}<extra></extra>")))
    fig.add_vline(x=a.target, line=dict(dash="dash", color="#555", width=1))
    # on a log axis an annotation's x is log10 of the value (a shape's is the value itself)
    fig.add_annotation(x=math.log10(a.target), y=1, xref="x", yref="paper", text=f"target {_h(a.target)}",
                       showarrow=False, xanchor="right", yanchor="bottom", font=dict(size=12, color="#444"))
    fig.update_layout(template="plotly_white", font=dict(size=14), height=560, margin=dict(l=70, r=30, t=60, b=60),
                      title="Validation loss vs horizon: mean ± 95 % CI, fitted L(D) = E + A·D^-α and its extrapolation")
    fig.update_xaxes(type="log", title=f"horizon ({a.unit})")
    fig.update_yaxes(title="validation loss (nats/token)")
    return fig
