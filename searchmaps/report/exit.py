"""The report's per-token exit section, for a study trained with ``--exit-eps``
(:mod:`searchmaps.train.exit`): validation loss against the mean applied layers per token,
one line per map over the threshold grid (each point the mean over the map's seeds), a
sentence on the depth each map keeps at the tolerance, and ``exit.csv``. Rows without an
exit evaluation add nothing (:func:`section` returns None)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .section import Section

LAYOUT = dict(template="plotly_white", font=dict(size=14), margin=dict(l=70, r=30, t=60, b=60))  # figures.py's


def exit_table(ok: pd.DataFrame) -> pd.DataFrame | None:
    """One row per (candidate, threshold) over ``ok``'s rows that carry an exit grid: seeds,
    and the means over them of depth, validation loss and inference FLOPs per token (checks
    counted); ``applied_layers`` the map's full depth. None when no row carries one."""
    rows = []
    for r in ok.itertuples(index=False):
        text = getattr(r, "exit_grid", "")
        if not isinstance(text, str) or not text:
            continue
        for p in json.loads(text):
            rows.append({"candidate": r.candidate, "map": r.map, "pe": r.pe, "seed": r.seed,
                         "applied_layers": r.applied_layers, **p})
    if not rows:
        return None
    long = pd.DataFrame(rows)
    out = long.groupby(["candidate", "eps"], sort=False).agg(
        map=("map", "first"), pe=("pe", "first"), applied_layers=("applied_layers", "first"),
        seeds=("seed", "nunique"), depth=("depth", "mean"), val_loss=("val_loss", "mean"),
        flops_per_token=("flops_per_token", "mean"), check_flops_per_token=("check_flops_per_token", "mean"))
    return out.reset_index().sort_values(["candidate", "eps"], kind="stable").reset_index(drop=True)


def figure(table: pd.DataFrame):
    """Validation loss against mean depth, one line per map over the thresholds."""
    import plotly.graph_objects as go

    several_pe = table["pe"].nunique() > 1
    fig = go.Figure()
    for cand, g in table.groupby("candidate", sort=True):
        g = g.sort_values("eps")
        name = f"{g['map'].iloc[0]} ({g['pe'].iloc[0]})" if several_pe else str(g["map"].iloc[0])
        fig.add_trace(go.Scatter(
            x=g["depth"], y=g["val_loss"], mode="lines+markers", name=name,
            customdata=np.column_stack([g["eps"], g["flops_per_token"], g["seeds"]]),
            hovertemplate=(f"<b>{name}</b><br>eps %{{customdata[0]:.3g}}<br>depth %{{x:.3f}} layers/token"
                           "<br>val loss %{y:.4f}<br>FLOPs/token %{customdata[1]:,.0f}<br>seeds %{customdata[2]}"
                           "<extra></extra>")))
    fig.update_layout(**LAYOUT, title="Per-token exit: validation loss against depth",
                      xaxis_title="mean applied layers per token (under exit)",
                      yaxis_title="validation loss (nats/token)", height=500)
    return fig


def sentences(ok: pd.DataFrame, tolerance: float | None = None) -> list[str]:
    """Per map, the mean depth it keeps at the picked threshold against its full depth
    (``tolerance``: the study's --exit-tolerance, for the sentence)."""
    rows = ok[np.isfinite(ok["exit_depth"].astype(float))]
    if rows.empty:
        return []
    g = rows.groupby("candidate").agg(depth=("exit_depth", "mean"), full=("applied_layers", "first"),
                                      seeds=("seed", "nunique"))
    g["saved"] = 1 - g["depth"] / g["full"]
    g = g.sort_values("saved", ascending=False)
    within = (f"within {float(tolerance):.2%} of full depth's loss" if tolerance is not None
              else "within the exit tolerance of full depth's loss")
    parts = [f"`{c}` {r.depth:.2f} of {int(r.full)} layers ({r.saved:.0%} fewer)" for c, r in g.iterrows()]
    return [f"Under per-token convergence exit at the largest threshold whose loss stays {within}, mean depth per "
            f"token (mean over seeds): " + "; ".join(parts) + "."]


def section(ok: pd.DataFrame, tolerance: float | None = None) -> Section | None:
    """The exit section of the statistics rows ``ok``; None when they carry no exit evaluation."""
    if "exit_grid" not in ok:
        return None
    table = exit_table(ok)
    if table is None:
        return None
    caption = ("Each line is one map over the --exit-eps thresholds (left: larger thresholds, fewer layers); each "
               "point the mean over its seeds of the validation loss and the mean applied layers per token under "
               "exit; the rightmost point is full depth (threshold 0). Hover for the threshold and the inference "
               "FLOPs per token (the exit checks' heads counted). Per map and threshold: exit.csv.")
    return Section(sentences=sentences(ok, tolerance), heading="Per-token exit",
                   figures=[("Per-token exit: loss against depth", figure(table), caption)],
                   files={"exit.csv": table.to_csv(index=False)})
