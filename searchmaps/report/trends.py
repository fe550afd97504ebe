"""The sentences of a ladder's measured gap trends (``gap_trend.csv``) and of the
shared-floor second opinion: how many maps' gaps to the baseline narrow or widen with an
interval clear of 0 (t intervals over the seeds' own slopes, docs/statistics.md), where a
trend would close a gap, and what one floor shared by every map puts at the target."""

from __future__ import annotations

import numpy as np
import pandas as pd


def horizon_text(x: float) -> str:
    """A horizon for a sentence: 300k, 4.8M, 500M, 2.2T."""
    if not np.isfinite(x):
        return "n/a"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _nats(x: float) -> str:
    return f"{x:+.3f}" if np.isfinite(x) else "n/a"


def trend_sentences(trend: pd.DataFrame, unit: str) -> list[str]:
    """Each map's measured gap trend to the baseline: how many narrow or widen with an
    interval clear of 0, the fastest closers with where the trend would close the gap, and
    how much the window matters."""
    t = trend[np.isfinite(trend["slope"])]
    if t.empty:
        return []
    ref = t["reference"].iloc[0]
    toward = np.sign(t["gap_last"]) * -1  # the sign of a slope that closes the gap
    narrow = t[(toward * t["slope_low"] > 0) & (toward * t["slope_high"] > 0)]
    widen = t[(toward * t["slope_low"] < 0) & (toward * t["slope_high"] < 0)]
    span = f"{horizon_text(t['trend_from'].iloc[0])}–{horizon_text(t['horizon_last'].iloc[0])}"
    out = [f"Measured, not fitted: the paired per-seed gap of each map to the baseline `{ref}`, regressed on log2 of "
           f"the {unit} over the last horizons ({span}), narrows with a 95 % interval clear of 0 for {len(narrow)} of "
           f"{len(t)} maps and widens for {len(widen)} (nats per doubling; gap_trend.csv)."]
    closing = narrow.sort_values("closes_at").head(3)
    if len(closing):
        far = lambda x: ("never" if not np.isfinite(x) else  # noqa: E731
                         "beyond 1000× the target" if x > 1000 * t["target"].iloc[0] else f"{horizon_text(x)} {unit}")
        out.append("At its measured rate the gap would close at " + "; ".join(
            f"{far(r.closes_at)} for `{r.candidate}` (gap {_nats(r.gap_last)} at {horizon_text(r.horizon_last)}, "
            f"{_nats(r.slope)} per doubling, 95 % CI {_nats(r.slope_low)} to {_nats(r.slope_high)}; closing at "
            f"{far(r.closes_at_low)} to {far(r.closes_at_high)}; the last doubling alone {_nats(r.change_last)}, "
            f"CI {_nats(r.change_last_low)} to {_nats(r.change_last_high)})"
            for r in closing.itertuples()) + f" (the target: {horizon_text(t['target'].iloc[0])}).")
    all_narrow = t[(toward * t["slope_all_low"] > 0) & (toward * t["slope_all_high"] > 0)]
    out.append(f"Over all horizons ({horizon_text(t['horizon_first'].iloc[0])}–{horizon_text(t['horizon_last'].iloc[0])}) the same "
               f"regression gives slopes {_nats(t['slope_all'].min())} to {_nats(t['slope_all'].max())} per doubling, "
               f"clear of 0 towards closing for {len(all_narrow)} map{'' if len(all_narrow) == 1 else 's'}: a trend is a description of its window, "
               f"and carrying it to the target assumes the window's rate holds.")
    return out


def shared_floor_sentences(scaling: pd.DataFrame, trend: pd.DataFrame, target: float, unit: str) -> list[str]:
    """The shared-floor fit as a second opinion, with no crossover claim when its floor is at a bound."""
    if "shared_E" not in scaling or not np.isfinite(scaling["shared_E"]).any():
        return []
    e = float(scaling["shared_E"].dropna().iloc[0])
    bound = str(scaling["shared_at_bound"].fillna("").iloc[0])
    # on the bound 0 the fitted E is the optimiser's leftover (1e-18 to 1e-12 nats), whose digits
    # move by percents from one machine's BLAS to another's: the page says the bound, not them
    shown = "0" if bound == "E=0" else f"{e:.3g}"
    head = (f"Second opinion, one floor E shared by every map (per-map A and α; scaling.csv, shared_*): E = {shown} "
            f"nats")
    if bound:
        return [head + f", on its bound ({bound}): the shared fit is as unbounded as the separate ones and supports no "
                       f"crossover claim either."]
    t = trend[np.isfinite(trend["shared_gap_at_target"])]
    ahead = t[t["shared_gap_at_target_high"] < 0]
    level = t[(t["shared_gap_at_target_low"] <= 0) & (t["shared_gap_at_target_high"] >= 0)]
    behind = t[t["shared_gap_at_target_low"] > 0]
    ref = trend["reference"].iloc[0]
    parts = [f"{len(behind)} map{'s' if len(behind) != 1 else ''} still behind the baseline `{ref}`"]
    for what, g in (("level with it (interval spans 0)", level), ("ahead of it", ahead)):
        if len(g):
            parts.append(f"{what}: " + ", ".join(
                f"`{r.candidate}` {_nats(r.shared_gap_at_target)} ({_nats(r.shared_gap_at_target_low)} to "
                f"{_nats(r.shared_gap_at_target_high)})" for r in g.head(4).itertuples()))
    return [head + f"; at {horizon_text(target)} {unit} it puts " + "; ".join(parts) + "."]
