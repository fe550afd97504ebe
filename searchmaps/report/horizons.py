"""The report's horizon section, for a study trained on a ladder of horizons: does the
ranking hold as training gets longer, and where do the curves go?

Writes ``stability.csv`` (every pair of horizons: Kendall's tau and Spearman's rho with
bootstrap intervals over seeds, top-group overlap), ``scaling.csv`` (each candidate's
fitted ``L(D) = E + A·D^-alpha`` and its prediction at the target horizon with a bootstrap
prediction interval) and, when the space carries published numbers, ``agreement.csv``
(Kendall's tau against them at every horizon, with a bootstrap interval over seeds), and gives the page two figures (rank vs horizon; loss vs horizon with
the fits and their extrapolation) and the sentences that say what they show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import stability
from ..results import atomic_write_text
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


def analyse(frame: pd.DataFrame, info: dict, target: float | None = None, alpha: float = 0.05,
            n_boot: int = 1000, rule: str = "moderated") -> HorizonAnalysis | None:
    """The horizon statistics of a study's rows (a :func:`searchmaps.results.records_frame`);
    None for a study with a single horizon. ``target`` (default: the published numbers'
    horizon when study.json has one, else 10x the longest horizon) is where the fits are
    extrapolated to; ``rule`` is the top-group rule of the overlaps (the report's)."""
    rows = frame[(frame["role"] == "eval") & (frame["status"] == "ok") & np.isfinite(frame["val_loss"].astype(float))]
    rows = rows.drop_duplicates(["candidate", "seed", "rung"], keep="last")
    if rows["rung"].nunique() < 2:
        return None
    unit = "training FLOPs" if (rows["horizon"] == "train_flops").any() else "tokens"
    horizons = [float(rows.loc[rows["rung"] == r, "horizon_target"].iloc[0]) for r in sorted(rows["rung"].unique())]
    published = info.get("published") or {}
    if target is None:
        target = float(published.get("tokens") or 0) if unit == "tokens" else 0.0
        target = target if target > horizons[-1] else 10 * horizons[-1]
    scaling, boots = stability.extrapolate(rows, target, n_boot=n_boot)
    agreement = stability.agreement_with(rows, published["values"], n_boot=n_boot) if published.get("values") else None
    return HorizonAnalysis(
        unit=unit, horizons=horizons,
        stability=stability.rank_stability(rows, alpha=alpha, n_boot=n_boot, rule=rule),
        ranks=stability.rank_by_rung(rows, n_boot=n_boot), means=_means(rows),
        scaling=scaling, crossings=stability.crossings(scaling, boots), target=float(target),
        published=agreement, published_source=str(published.get("source", "")))


def _means(rows: pd.DataFrame) -> pd.DataFrame:
    from scipy import stats as st

    g = rows.groupby(["candidate", "rung"])
    out = g.agg(horizon=("horizon_target", "first"), tokens=("tokens", "mean"), n=("val_loss", "count"),
                mean=("val_loss", "mean"), sd=("val_loss", "std")).reset_index()
    half = st.t.ppf(0.975, (out["n"] - 1).clip(lower=1)) * out["sd"] / np.sqrt(out["n"])
    out["ci_low"], out["ci_high"] = out["mean"] - half, out["mean"] + half
    return out


def write_tables(a: HorizonAnalysis, study_dir) -> None:
    atomic_write_text(study_dir / "stability.csv", a.stability.to_csv(index=False))
    atomic_write_text(study_dir / "scaling.csv", a.scaling.to_csv(index=False))
    if a.published is not None:
        table = a.published.assign(source=a.published_source)
        atomic_write_text(study_dir / "agreement.csv", table.to_csv(index=False))


# --------------------------------------------------------------------------- words


def _h(x: float) -> str:
    """A horizon for a sentence: 300k, 4.8M, 500M, 2.2T."""
    if not np.isfinite(x):
        return "n/a"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


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


def sentences(a: HorizonAnalysis) -> list[str]:
    """Whether the ranking between horizons is stable, which pairs are predicted to cross
    before the target, and how the ranking compares with a published one."""
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
            f"{r.kendall_tau:.2f} ({_h(r.horizon_a)}→{_h(r.horizon_b)})" for r in consecutive.itertuples()) + ".")
    if isinstance(first_last["top_group_a"], str):
        out.append(f"The top groups at the shortest and the longest horizon share {int(first_last['top_overlap'])} of "
                   f"{int(first_last['top_union'])} candidates.")
    if not a.crossings.empty:
        likely = a.crossings.sort_values("flip_share", ascending=False)
        parts = [f"`{r.worse_now}` passing `{r.better_now}` ("
                 + (f"fitted curves cross near {_h(r.crossing_at)}" if r.fits_agree else
                    f"the fitted curves already swap them at {_h(r.horizon_last)}, where the measured means do "
                    f"not: a misfit inside the data more than a prediction")
                 + f"; the order at the target flips in {r.flip_share:.0%} of seed resamples)"
                 for r in likely.head(4).itertuples()]
        more = f" and {len(likely) - 4} more pairs (scaling.csv)" if len(likely) > 4 else ""
        out.append(f"Extrapolating each candidate's fitted L(D) = E + A·D^-α to {_h(a.target)} {a.unit} predicts "
                   + "; ".join(parts) + more + ". Such extrapolations are far beyond the data; the intervals in "
                   "scaling.csv say how far to trust them.")
    else:
        out.append(f"Extrapolating each candidate's fitted L(D) = E + A·D^-α to {_h(a.target)} {a.unit} predicts no "
                   f"change of order among candidates that reached the last horizon.")
    floor = floor_sentence(a.scaling, a.horizons)
    if floor:
        out.append(floor)
    if a.published is not None and a.published["kendall_tau"].notna().any():
        out.append(f"Against {a.published_source or 'the published ranking'}: Kendall's τ is " + ", ".join(
            f"{r.kendall_tau:+.2f} at {_h(r.horizon)} ({_ci(r.kendall_tau_low, r.kendall_tau_high)} over seeds, "
            f"p = {fmt_p(r.p_value)}, {int(r.n_candidates)} maps)"
            for r in a.published.itertuples() if np.isfinite(r.kendall_tau)) + ".")
    return out


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
    import html

    piv = a.ranks.pivot(index="candidate", columns="rung", values="rank")
    last = piv.columns.max()
    piv = piv.sort_values(last)
    head = ["candidate"] + [f"rank at {_h(h)}" for h in a.horizons] + ["settles at", f"predicted loss at {_h(a.target)}"]
    fit = a.scaling.set_index("candidate")
    rows = []
    for cand, ranks in piv.iterrows():
        settle = settle_rung(a.ranks, cand)
        p = fit.loc[cand] if cand in fit.index else None
        pred = (f"{p['prediction']:.3f} ({p['prediction_low']:.3f} to {p['prediction_high']:.3f})"
                if p is not None and np.isfinite(p["prediction"]) else "–")
        cells = [f"<code>{html.escape(cand)}</code>"] + [("–" if math.isnan(v) else f"{v:g}") for v in ranks] + \
                [_h(a.horizons[settle]) if settle is not None else "–", pred]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "\n".join(rows) + "</tbody></table>")


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
                x=grid, y=[stability.predict((p["E"], p["A"], p["alpha"]), d) for d in grid], mode="lines",
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
