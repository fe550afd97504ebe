"""The ranking section's figures (plotly only): the Pareto front as far as the seeds separate it
(:func:`separated_front`), the significance matrix and the learning curves, each from the
tables of :mod:`searchmaps.report.summary`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import objectives as objs
from .sentences import fmt_mean_ci, fmt_p, p_eq

_TOP, _OTHER, _FRONT = "#d62728", "#7f7f7f", "#1f77b4"
_LAYOUT = dict(template="plotly_white", font=dict(size=14), margin=dict(l=70, r=30, t=60, b=60))


def _labels(summary: pd.DataFrame) -> pd.Series:
    """Map labels; with several PEs (or memory-sharing settings) those are added, else the
    same map would appear twice."""
    parts = [c for c in ("pe", "kv_share") if c in summary and summary[c].nunique() > 1]
    if parts:
        return summary["map"].astype(str) + " (" + summary[parts].astype(str).agg(", ".join, axis=1) + ")"
    return summary["map"].astype(str)


def separable(objectives) -> tuple | None:
    """(the tested quality, the cost) when the seeds can separate a front of these
    objectives: two of them, one a minimised quality the paired tests speak for
    (:attr:`~searchmaps.objectives.Objective.tested`), one a minimised cost of the
    candidate; else None (the report then shows the front on means)."""
    if len(objectives) != 2:
        return None
    quality = [o for o in objectives if o.tested and o.per_seed and o.sign == 1]
    cost = [o for o in objectives if not o.per_seed and o.sign == 1]
    return (quality[0], cost[0]) if quality and cost else None


def pareto_axes(objectives) -> list[tuple]:
    """The Pareto figures of a study's objectives, as (y, x) pairs: the first objective
    against each other one (the default: perplexity against forward FLOPs per token)."""
    return [(objectives[0], x) for x in objectives[1:]]


def separated_front(summary: pd.DataFrame, pairwise: pd.DataFrame | None, alpha: float,
                    cost: str = "flops_per_token") -> pd.Series:
    """The Pareto front as far as the seeds can tell, one bool per row of ``summary``: a
    staircase that starts at the best map of the cheapest FLOPs and steps to the cheapest
    map significantly better than the last step (the best mean where several at one FLOPs
    are), never to a map a map as cheap beats significantly. Each step buys a difference
    the statistics detect; nothing dearer than the last step is significantly better than
    it. ``pairwise`` is the corrected p matrix of the top-group rule's family; "better" is
    a lower ``val_loss_mean`` at corrected p ≤ ``alpha``. The front on means alone
    (``pareto_optimal``) would call a dearer map optimal on a gap at p = 1. Maps without
    results, or without a p, are never on it. ``cost``: the summary column of the cost
    objective the staircase climbs (forward FLOPs per token unless the study says another)."""
    s = summary[summary["n_seeds"] > 0].sort_values([cost, "val_loss_mean"], kind="stable")
    have = list(s["candidate"] if pairwise is None else s["candidate"][s["candidate"].isin(pairwise.index)])
    if pairwise is None or not have:  # one candidate with results: nothing to separate it from
        return summary["candidate"].isin(have[:1])
    loss, flops = s.set_index("candidate")["val_loss_mean"], s.set_index("candidate")[cost]

    def better(a: str, b: str) -> bool:
        return bool(pairwise.loc[a, b] <= alpha and loss[a] < loss[b])

    steps = [have[0]]
    for m in have[1:]:
        if (flops[m] > flops[steps[-1]] and better(m, steps[-1])
                and not any(better(c, m) for c in have if c != m and flops[c] <= flops[m])):
            steps.append(m)
    return summary["candidate"].isin(steps)


def _header(flops: float, budget: float | None, width_px: float, fmt: str = ",.0f") -> str:
    """A band's header (FLOPs, or another objective's value written with ``fmt``): the
    longest of the exact value with the budget share, the exact value, or millions (3
    digits; for a non-integer format 3 digits) that fits ``width_px`` at about 6.5 px a
    character."""
    texts = [f"{flops:{fmt}} ({flops / budget:.1%} of budget)"] if budget else []
    texts += [f"{flops:{fmt}}", f"{flops / 1e6:.3g}M" if fmt == ",.0f" else f"{flops:.3g}"]
    return next((t for t in texts if 6.5 * len(t) <= width_px), texts[-1])


def _positions(s: pd.DataFrame, budget: float | None, column: str = "flops_per_token", sign: int = 1
               ) -> tuple[np.ndarray, list[tuple], float | None]:
    """x of each row of ``s`` (sorted by ``column``, best first, then mean): one slot per
    map, a gap between groups of equal value; the groups as (first x, last x, value); the
    budget line's x, between the last map within the budget and the first beyond it (None
    without one)."""
    x, groups, pos = np.zeros(len(s)), [], 0.0
    grouped = s.groupby(s[column] * sign, sort=True).indices.items()
    for flops, idx in grouped:
        flops = flops * sign
        x[idx] = pos + np.arange(len(idx))
        groups.append((pos, pos + len(idx) - 1, float(flops)))
        pos += len(idx) + 0.6
    line = None
    if budget:
        inside = x[s[column].to_numpy() <= budget]
        line = (inside.max() + 0.8) if len(inside) else -0.8
    return x, groups, line


def pareto_figure(summary: pd.DataFrame, budget: float | None, reference: str | None, title: str,
                  alpha: float = 0.05, y=None, x=None):
    """x: maps grouped by objective ``x`` (default forward FLOPs/token; best group left,
    each group a shaded band headed by its value, best first within it; one tick label per
    map), y: objective ``y`` (default mean perplexity with 95 % CI bars; another objective:
    its summary column, without bars); the top group as red stars; the front the seeds
    separate (``summary["pareto_separated"]``, see :func:`separated_front`; without it
    the front on means of these two objectives) as blue rings on a step line; the budget (forward
    FLOPs, so only on that axis) as a dashed line after the last map within it. Maps with
    equal x share one x-band instead of being jittered, so no map is drawn past the budget
    line it is within."""
    import plotly.graph_objects as go

    y = y or objs.get("val_ppl")
    x = x or objs.get("flops_per_token")
    budget = budget if x.name == "flops_per_token" else None
    xc, yc = x.column, y.column
    s = summary[summary["n_seeds"] > 0].assign(_xs=lambda d: x.sign * d[xc], _ys=lambda d: y.sign * d[yc])
    s = s.sort_values(["_xs", "_ys"], kind="stable").reset_index(drop=True)
    s["label"] = _labels(s)
    s["x"], groups, budget_x = _positions(s, budget, xc, x.sign)
    separated = "pareto_separated" in s
    s["front"] = s["pareto_separated"] if separated else objs.pareto_optimal(s["_xs"], s["_ys"])
    has_ci = yc == "mean"  # the summary's CI is perplexity's
    hover = ("<b>%{customdata[0]}</b> (PE %{customdata[1]})<br>%{customdata[2]} seeds<br>"
             f"{y.short} %{{customdata[3]}}<br>{x.short} %{{customdata[6]}}<br>vs best: %{{customdata[4]}}<br>"
             "vs reference: %{customdata[5]}<extra></extra>")
    fig = go.Figure()
    for name, rows, color, symbol, size in (("top group", s[s["in_top_group"]], _TOP, "star", 17),
                                            ("significantly worse", s[~s["in_top_group"]], _OTHER, "circle", 10)):
        if rows.empty:
            continue
        custom = np.column_stack([
            rows["map"], rows["pe"], rows["n_seeds"],
            [fmt_mean_ci(*v) for v in rows[["mean", "ci_low", "ci_high"]].to_numpy()] if has_ci
            else [y.format(v) for v in rows[yc]],
            [f"{d:+.3g} ({p_eq(p)})" if np.isfinite(p) else "best"
             for d, p in rows[["diff_to_best", "p_vs_best"]].to_numpy()],
            [f"{d:+.3g} ({p_eq(p)})" if np.isfinite(p) else ("reference" if c == reference else "n/a")
             for c, d, p in rows[["candidate", "diff_to_reference", "p_vs_reference"]].to_numpy()],
            [x.format(v) for v in rows[xc]]])
        bars = (dict(type="data", symmetric=False, array=(rows["ci_high"] - rows["mean"]).fillna(0),
                     arrayminus=(rows["mean"] - rows["ci_low"]).fillna(0), color=color, thickness=1.5, width=5)
                if has_ci else None)
        fig.add_trace(go.Scatter(
            x=rows["x"], y=rows[yc], mode="markers", name=name, customdata=custom,
            hovertemplate=hover, marker=dict(color=color, symbol=symbol, size=size, line=dict(width=1, color="white")),
            error_y=bars))
    front = s[s["front"]]
    fig.add_trace(go.Scatter(
        x=front["x"], y=front[yc], mode="lines+markers",
        name=f"Pareto front (what the seeds separate at α = {alpha:g})" if separated else "Pareto front (on means)",
        line=dict(shape="hv", dash="dot", color=_FRONT, width=1.5), hoverinfo="skip",
        marker=dict(symbol="circle-open", size=24, color=_FRONT, line=dict(width=2))))
    xmax = max(s["x"].max(), budget_x if budget_x is not None else -1)
    slot_px = 1100 / (xmax + 1.6)  # a map's share of the plot's width at the report's 1,280 px
    for x0, x1, value in groups:
        fig.add_shape(type="rect", xref="x", yref="paper", x0=x0 - 0.45, x1=x1 + 0.45, y0=0, y1=1, layer="below",
                      line=dict(width=0), fillcolor="#f0f0f0")
        fig.add_annotation(x=(x0 + x1) / 2, y=1, xref="x", yref="paper", yanchor="top", showarrow=False,
                           text=_header(value, budget, (x1 - x0 + 0.9) * slot_px, x.fmt),
                           font=dict(size=11, color="#444"), name="flops group")
    if reference is not None and reference in set(s["candidate"]):
        r = s[s["candidate"] == reference].iloc[0]
        fig.add_annotation(x=r["x"], y=r[yc], text="baseline", showarrow=True, arrowhead=0,
                           ax=-40, ay=-30, font=dict(size=12, color="#444"))
    if budget_x is not None:
        fig.add_vline(x=budget_x, line=dict(dash="dash", color="#555", width=1.5), layer="below",
                      annotation_text=f"budget {budget:,.0f}", annotation_position="bottom left",
                      annotation_textangle=-90)
    fig.update_layout(**_LAYOUT, title=title, height=600, hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"))
    fig.update_layout(margin=dict(b=100))
    fig.update_xaxes(title=f"maps grouped by {x.label} (band header), best first within a group",
                     tickmode="array", tickvals=s["x"], ticktext=s["label"], tickangle=-45 if len(s) > 8 else 0,
                     range=[-0.8, xmax + 0.8], showgrid=False, zeroline=False)
    fig.update_yaxes(title=f"{y.label} (mean, 95 % CI)" if has_ci else f"{y.label} (mean over seeds)" if y.per_seed
                     else f"{y.label} ({y.unit})")
    if y.sign < 0:  # higher is better: drawn upside down, so better is still lower
        fig.update_yaxes(autorange="reversed")
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


CURVE_COLUMNS = 4  # panels per row of the learning curves


def curves_figure(curves: pd.DataFrame, summary: pd.DataFrame, reference: str | None):
    """Small multiples: one panel per candidate (ranking order, titled with its label, ★ for
    the top group), its mean validation loss vs tokens with a ± 1 sd band across seeds, and
    in every panel the best map's mean as a thin dashed line to read the gap against
    (and the baseline's, dotted grey). Shared axes; a panel's own curve is red for the top
    group and blue otherwise, so no two curves in a panel share a colour and the legend has
    four entries at most whatever the number of maps; every column's lowest panel has its
    token ticks."""
    import plotly.colors as pc
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    order = [c for c in summary["candidate"] if c in set(curves["candidate"])]
    top = set(summary.loc[summary["in_top_group"], "candidate"])
    labels = dict(zip(summary["candidate"], _labels(summary)))
    mean = {c: g.groupby("tokens")["val_loss"].agg(["mean", "std"]).reset_index()
            for c, g in curves.groupby("candidate")}
    cols = min(CURVE_COLUMNS, len(order))
    rows = -(-len(order) // cols)
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes="all", shared_yaxes="all", horizontal_spacing=0.03,
                        vertical_spacing=min(0.12, 0.3 / rows),
                        subplot_titles=[("★ " if c in top else "") + labels[c] for c in order])
    best = order[0]
    guides = [(best, "best map (mean)", "#222222", "dash")]
    if reference is not None and reference in mean and reference != best:
        guides.append((reference, "baseline (mean)", "#999999", "dot"))
    legend = set()
    for i, cand in enumerate(order):
        row, col = i // cols + 1, i % cols + 1
        g = mean[cand]
        color = _TOP if cand in top else _FRONT
        name = "top group map (mean ± 1 sd)" if cand in top else "other map (mean ± 1 sd)"
        band = g.dropna()
        if len(band):
            r, gr, b = pc.hex_to_rgb(color)
            fig.add_trace(go.Scatter(
                x=[*band["tokens"], *band["tokens"][::-1]],
                y=[*(band["mean"] + band["std"]), *(band["mean"] - band["std"])[::-1]], mode="lines",
                fill="toself", fillcolor=f"rgba({r},{gr},{b},0.18)", line=dict(width=0), hoverinfo="skip",
                showlegend=False), row=row, col=col)
        for other, text, gcolor, dash in guides:
            if other != cand:
                o = mean[other]
                fig.add_trace(go.Scatter(x=o["tokens"], y=o["mean"], mode="lines", name=text, legendgroup=text,
                                         showlegend=text not in legend, hoverinfo="skip",
                                         line=dict(color=gcolor, width=1.2, dash=dash)), row=row, col=col)
                legend.add(text)
        fig.add_trace(go.Scatter(x=g["tokens"], y=g["mean"], mode="lines+markers", name=name, legendgroup=name,
                                 showlegend=name not in legend, line=dict(color=color, width=2.5),
                                 marker=dict(size=4),
                                 hovertemplate=f"{labels[cand]}<br>%{{x:,}} tokens<br>"
                                               "val loss %{y:.4f}<extra></extra>"),
                      row=row, col=col)
        legend.add(name)
    height, top_margin = 190 + 210 * rows, 130
    paper = height - top_margin - _LAYOUT["margin"]["b"]
    fig.update_layout(**_LAYOUT, height=height,
                      title=dict(text="Learning curves: validation loss (mean ± 1 sd across seeds), one panel per map",
                                 y=1 - 12 / height, yanchor="top"),
                      legend=dict(orientation="h", yanchor="bottom", y=1 + 34 / paper, x=0, xanchor="left"))
    fig.update_layout(margin=dict(t=top_margin))
    fig.update_annotations(font=dict(size=13))
    fig.update_xaxes(tickformat="~s")
    for col in range(1, cols + 1):
        last = rows if (rows - 1) * cols + col <= len(order) else rows - 1
        fig.update_xaxes(title="training tokens", showticklabels=True, row=last, col=col)
    fig.update_yaxes(title="val loss (nats)", col=1)
    return fig
