"""The report's equal-compute section, for a study trained on a ladder: the maps compared at
equal training FLOPs as well as at the equal tokens (or FLOPs) of its horizons.

:func:`section` gives ``equal_flops.csv`` (:func:`searchmaps.stats.equal_flops`: every
budget, every map read there, its mean loss with a t interval over seeds, the top group
there and the paired gap to the baseline), the sentences that answer the question under
the other reading, a table and a figure of loss against training FLOPs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..stats import DEFAULT_RULE
from .horizons import ladder_rows
from .lead import flops_lead, missing_at_top, top_budget_clause
from .section import Section, code, html_table


def _f(x: float) -> str:
    return f"{x:.3g}".replace("e+", "e")


def _names(cands, limit: int = 4) -> str:
    cands = list(cands)
    shown = ", ".join(f"`{c}`" for c in cands[:limit])
    return shown + (f" and {len(cands) - limit} more" if len(cands) > limit else "")


def sentences(table: pd.DataFrame, reference: str | None, unit: str, n_maps: int,
              missing: dict[str, str] | None = None) -> list[str]:
    """At most four sentences: what the search compared, the answer at the largest budget
    every map reaches, how often the baseline leads across the budgets and, where the
    study's top budget is larger, the top group there with the maps missing there and why."""
    if table.empty:
        return ["At equal training FLOPs no budget is reached by two maps on two seeds or more, so this ladder "
                "cannot compare them at equal compute."]
    seen = "equal tokens" if unit == "tokens" else "equal training FLOPs"
    out = [f"The ranking above compares the maps at {seen}, as this search trained them; read from every seed's "
           f"ladder at equal training FLOPs (linear in log-FLOPs between its rungs, equal_flops.csv):"]
    full, reached = stats.largest_common_budget(table)
    at = table[table["train_flops_budget"] == full]
    top = at[at["top_group"]]["candidate"].tolist()
    best = at[at["best"]]["candidate"].iloc[0]
    every = "every map reaches" if reached == n_maps else f"the most maps reach ({reached} of {n_maps})"
    tail = (f"all {len(at)} are in the top group, so the seeds cannot separate them there" if len(top) == len(at)
            else f"the top group is {_names(top)} ({len(top)} of {len(at)})")
    out[-1] += f" at {_f(full)} FLOPs, the largest budget {every}, `{best}` has the lowest mean loss and {tail}."
    if reference is not None and reference in set(at["candidate"]):
        others = at[at["candidate"] != reference]
        ahead = int((others["gap_low"] > 0).sum())
        behind = int((others["gap_high"] < 0).sum())
        leads = table[table["best"]].groupby("train_flops_budget")["candidate"].first()
        has = table[table["candidate"] == reference]["train_flops_budget"].unique()
        wins = int((leads.reindex(has) == reference).sum())
        out.append(f"There the baseline `{reference}` is ahead of {ahead} and behind {behind} of the other "
                   f"{len(others)} maps (the pair's 95 % interval of the paired gap excludes 0, not corrected for the "
                   f"{len(others)} comparisons); it has the lowest mean at {wins} of the {len(has)} budgets it is read "
                   f"at ({_f(min(has))} to {_f(max(has))} FLOPs).")
    clause = top_budget_clause(table, missing)
    if clause:
        top = table[table["train_flops_budget"] == table["train_flops_budget"].max()]
        text = clause[0].upper() + clause[1:]
        if reference is not None and reference in set(top["candidate"]):
            others = top[top["candidate"] != reference]
            text += (f"; there the baseline `{reference}` is ahead of {int((others['gap_low'] > 0).sum())} and behind "
                     f"{int((others['gap_high'] < 0).sum())} of the other {len(others)} (gaps "
                     f"{others['gap'].min():+.4f} to {others['gap'].max():+.4f} nats; each pair's 95 % interval, "
                     f"uncorrected, where the top group's rule corrects for every pair)")
        out.append(text + ".")
    return out


def table_html(table: pd.DataFrame, reference: str | None) -> str:
    """Each map's mean loss at every budget (★: the top group there) and, at the largest
    budget every map reaches, its gap to the baseline."""
    budgets = sorted(table["train_flops_budget"].unique())
    full, _ = stats.largest_common_budget(table)
    at = table[table["train_flops_budget"] == full].set_index("candidate")
    order = list(at.sort_values("mean").index) + sorted(set(table["candidate"]) - set(at.index))
    cell = table.set_index(["candidate", "train_flops_budget"])
    head = ["candidate"] + [f"loss at {_f(b)} FLOPs" for b in budgets]
    if reference is not None:
        head.append(f"Δ vs `{reference}` at {_f(full)} (95 % CI, nats)")
    rows = []
    for cand in order:
        row = [code(cand)]
        for b in budgets:
            if (cand, b) in cell.index:
                r = cell.loc[(cand, b)]
                row.append(f"{r['mean']:.4f}" + (" ★" if r["top_group"] else ""))
            else:
                row.append("–")
        if reference is not None:
            g = at.loc[cand] if cand in at.index else None
            row.append("–" if g is None or not np.isfinite(g["gap"]) else
                       "0 (itself)" if cand == reference else
                       f"{g['gap']:+.4f} ({g['gap_low']:+.4f} to {g['gap_high']:+.4f})")
        rows.append(row)
    return html_table(head, rows)


def figure(rows: pd.DataFrame, table: pd.DataFrame, shown: set[str]):
    """Mean loss at each rung against its training FLOPs (95 % CI), one line per map."""
    import plotly.colors as pc
    import plotly.graph_objects as go
    from scipy import stats as st

    palette = pc.qualitative.Plotly + pc.qualitative.Dark24
    g = rows.groupby(["candidate", "rung"])
    m = g.agg(flops=("train_flops", "median"), n=("val_loss", "count"), mean=("val_loss", "mean"),
              sd=("val_loss", "std")).reset_index()
    m["half"] = st.t.ppf(0.975, (m["n"] - 1).clip(lower=1)) * m["sd"].fillna(0) / np.sqrt(m["n"])
    last = m[m["rung"] == m["rung"].max()].sort_values("mean")["candidate"].tolist()
    cands = last + [c for c in sorted(m["candidate"].unique()) if c not in last]
    fig = go.Figure()
    for i, cand in enumerate(cands):
        r = m[m["candidate"] == cand].sort_values("flops")
        fig.add_trace(go.Scatter(
            x=r["flops"], y=r["mean"], mode="lines+markers", name=cand,
            visible=True if cand in shown or len(cands) <= 8 else "legendonly",
            line=dict(color=palette[i % len(palette)]),
            error_y=dict(type="data", array=r["half"], thickness=1),
            hovertemplate=f"{cand}<br>%{{x:,.3g}} training FLOPs<br>val loss %{{y:.4f}}<extra></extra>"))
    for b in sorted(table["train_flops_budget"].unique()):
        fig.add_vline(x=b, line=dict(dash="dot", color="#bbb", width=1))
    fig.update_layout(template="plotly_white", font=dict(size=14), height=540, margin=dict(l=70, r=30, t=60, b=60),
                      title="Validation loss vs training FLOPs (each rung: mean ± 95 % CI; dotted: the budgets read)")
    fig.update_xaxes(type="log", title="training FLOPs")
    fig.update_yaxes(title="validation loss (nats/token)")
    return fig


def section(frame: pd.DataFrame, reference: str | None, alpha: float = 0.05, rule: str = DEFAULT_RULE,
            shown: set[str] = frozenset()) -> Section | None:
    """The equal-compute section of a ladder study's rows (a
    :func:`searchmaps.results.records_frame`); None without a ladder."""
    rows = ladder_rows(frame)
    if rows is None:
        return None
    unit = "training FLOPs" if (rows["horizon"] == "train_flops").any() else "tokens"
    reference = reference if reference in set(rows["candidate"]) else None
    table = stats.equal_flops(rows, reference=reference, alpha=alpha, rule=rule)
    n_maps = rows["candidate"].nunique()
    missing = missing_at_top(rows, table)
    return Section(
        sentences=sentences(table, reference, unit, n_maps, missing), heading="Equal training FLOPs",
        lead=[flops_lead(table, reference, n_maps, missing)],
        figures=[("Loss vs training FLOPs", figure(rows, table, shown),
                  "Each map's mean validation loss at every rung of its ladder, placed at the training FLOPs it had "
                  "spent there, with a 95 % CI over seeds. Read across at a dotted line: the maps at equal "
                  "compute (equal_flops.csv reads each seed between its rungs, linear in log-FLOPs).")],
        tables=[("At equal training FLOPs", table_html(table, reference))] if not table.empty else [],
        files={"equal_flops.csv": table.to_csv(index=False)})
