"""The report's figures (plotly only): the Pareto front, the significance matrix and the
learning curves, each from the tables of :mod:`searchmaps.report.summary`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .sentences import fmt_mean_ci, fmt_p, p_eq

_TOP, _OTHER, _FRONT = "#d62728", "#7f7f7f", "#1f77b4"
_LAYOUT = dict(template="plotly_white", font=dict(size=14), margin=dict(l=70, r=30, t=60, b=60))


def _labels(summary: pd.DataFrame) -> pd.Series:
    """Map labels; with several PEs the PE is added, else the same map would appear twice."""
    if summary["pe"].nunique() > 1:
        return summary["map"].astype(str) + " (" + summary["pe"].astype(str) + ")"
    return summary["map"].astype(str)


def _dodge(x: pd.Series, y: pd.Series, gap: float) -> np.ndarray:
    """Spread points that share an x sideways, ``gap`` apart and ordered by y, so their
    error bars do not hide one another (many maps apply the same number of layers; hover
    still shows the true FLOPs)."""
    out = x.to_numpy(dtype=float).copy()
    pos = {label: i for i, label in enumerate(x.index)}
    for _, idx in x.groupby(x).groups.items():
        for i, label in enumerate(y.loc[idx].sort_values(kind="stable").index):
            out[pos[label]] += (i - (len(idx) - 1) / 2) * gap
    return out


def pareto_figure(summary: pd.DataFrame, budget: float | None, reference: str | None, title: str):
    """x: forward FLOPs/token, y: mean perplexity with 95 % CI bars; top group as red
    stars, the Pareto front as a labelled step line, the budget as a dashed line."""
    import plotly.graph_objects as go

    s = summary[summary["n_seeds"] > 0].copy()
    s["label"] = _labels(s)
    xs = [v for v in [*s["flops_per_token"], budget] if v is not None and np.isfinite(v)]
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.08 or 0.1 * hi
    per_x = int(s.groupby("flops_per_token").size().max())
    s["x"] = _dodge(s["flops_per_token"], s["mean"], (hi - lo + pad) * min(0.018, 0.06 / per_x))
    hover = ("<b>%{customdata[0]}</b> (PE %{customdata[1]})<br>%{customdata[2]} seeds<br>"
             "val ppl %{customdata[3]}<br>FLOPs/token %{customdata[6]}<br>vs best: %{customdata[4]}<br>"
             "vs reference: %{customdata[5]}<extra></extra>")
    fig = go.Figure()
    for name, rows, color, symbol, size in (("top group", s[s["in_top_group"]], _TOP, "star", 17),
                                            ("significantly worse", s[~s["in_top_group"]], _OTHER, "circle", 10)):
        if rows.empty:
            continue
        custom = np.column_stack([
            rows["map"], rows["pe"], rows["n_seeds"],
            [fmt_mean_ci(*v) for v in rows[["mean", "ci_low", "ci_high"]].to_numpy()],
            [f"{d:+.3g} ({p_eq(p)})" if np.isfinite(p) else "best"
             for d, p in rows[["diff_to_best", "p_vs_best"]].to_numpy()],
            [f"{d:+.3g} ({p_eq(p)})" if np.isfinite(p) else ("reference" if c == reference else "n/a")
             for c, d, p in rows[["candidate", "diff_to_reference", "p_vs_reference"]].to_numpy()],
            [f"{v:,.0f}" for v in rows["flops_per_token"]]])
        fig.add_trace(go.Scatter(
            x=rows["x"], y=rows["mean"], mode="markers", name=name, customdata=custom,
            hovertemplate=hover, marker=dict(color=color, symbol=symbol, size=size, line=dict(width=1, color="white")),
            error_y=dict(type="data", symmetric=False, array=(rows["ci_high"] - rows["mean"]).fillna(0),
                         arrayminus=(rows["mean"] - rows["ci_low"]).fillna(0), color=color, thickness=1.5, width=5)))
    front = s[s["pareto_optimal"]].sort_values(["x", "mean"])
    fig.add_trace(go.Scatter(
        x=front["x"], y=front["mean"], mode="lines+markers+text", name="Pareto front",
        text=front["label"], textposition="bottom right", textfont=dict(size=14, color=_FRONT), cliponaxis=False,
        line=dict(shape="hv", dash="dot", color=_FRONT, width=1.5), hoverinfo="skip",
        marker=dict(symbol="circle-open", size=24, color=_FRONT, line=dict(width=2))))
    if reference is not None and reference in set(s["candidate"]):
        r = s[s["candidate"] == reference].iloc[0]
        fig.add_annotation(x=r["x"], y=r["mean"], text="baseline", showarrow=True, arrowhead=0,
                           ax=-45, ay=-30, font=dict(size=12, color="#444"))
    if budget:
        fig.add_vline(x=budget, line=dict(dash="dash", color="#555", width=1.5), layer="below",
                      annotation_text=f"budget {budget:,.0f}", annotation_position="top left")
    fig.update_layout(**_LAYOUT, title=title, height=560, hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"))
    fig.update_xaxes(title="forward FLOPs per token", range=[lo - pad, hi + 2.5 * pad], tickformat=",")
    fig.update_yaxes(title="validation perplexity (mean, 95 % CI)")
    return fig


def significance_figure(pairwise: pd.DataFrame, order: list[str], alpha: float):
    """Corrected pairwise p-values: significant cells (p ≤ α) blue, the rest pale."""
    import plotly.graph_objects as go

    p = pairwise.loc[order, order]
    text = [[("" if a == b else fmt_p(p.loc[a, b])) for b in order] for a in order]
    scale = [[0.0, "#08306b"], [alpha, "#4292c6"], [min(1.0, alpha + 1e-9), "#d9d9d9"], [1.0, "#f7f7f7"]]
    fig = go.Figure(go.Heatmap(z=p.to_numpy(), x=order, y=order, text=text,
                               texttemplate="%{text}" if len(order) <= 20 else None, colorscale=scale,
                               zmin=0, zmax=1, xgap=1, ygap=1, colorbar=dict(title="corrected p"),
                               hovertemplate="%{y} vs %{x}<br>corrected p = %{z:.3g}<extra></extra>"))
    n = len(order)
    fig.update_layout(**_LAYOUT, height=min(1200, 260 + 34 * n), title=f"Corrected pairwise p-values (α = {alpha:g})")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", tickangle=-30)
    return fig


def curves_figure(curves: pd.DataFrame, summary: pd.DataFrame, reference: str | None):
    """Mean validation loss vs tokens per candidate, ± 1 sd across seeds as a band; with
    many candidates only the top group and the baseline start visible (click the legend)."""
    import plotly.colors as pc
    import plotly.graph_objects as go

    palette = pc.qualitative.Plotly + pc.qualitative.Dark24
    shown = set(summary.loc[summary["in_top_group"], "candidate"]) | {reference}
    fig = go.Figure()
    order = [c for c in summary["candidate"] if c in set(curves["candidate"])]
    for i, cand in enumerate(order):
        g = curves[curves["candidate"] == cand].groupby("tokens")["val_loss"].agg(["mean", "std"]).reset_index()
        color = palette[i % len(palette)]
        visible = True if len(order) <= 8 or cand in shown else "legendonly"
        strong = cand in shown  # bands only for the top group and baseline: eight overlapping bands are a blur
        if strong and g["std"].notna().any():
            r, gr, b = pc.hex_to_rgb(color)
            band = g.dropna()
            fig.add_trace(go.Scatter(
                x=[*band["tokens"], *band["tokens"][::-1]],
                y=[*(band["mean"] + band["std"]), *(band["mean"] - band["std"])[::-1]],
                fill="toself", fillcolor=f"rgba({r},{gr},{b},0.15)", line=dict(width=0), hoverinfo="skip",
                legendgroup=cand, showlegend=False, visible=visible))
        fig.add_trace(go.Scatter(x=g["tokens"], y=g["mean"], mode="lines+markers", name=cand, legendgroup=cand,
                                 line=dict(color=color, width=2.5 if strong else 1.2, dash=None if strong else "dot"),
                                 marker=dict(size=5 if strong else 3), visible=visible,
                                 hovertemplate=f"{cand}<br>%{{x:,}} tokens<br>val loss %{{y:.4f}}<extra></extra>"))
    fig.update_layout(**_LAYOUT, height=520, title="Learning curves: validation loss (mean ± 1 sd across seeds)")
    fig.update_xaxes(title="training tokens", tickformat=",")
    fig.update_yaxes(title="validation loss (nats/token)")
    return fig

