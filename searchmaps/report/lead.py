"""The result's lead: at most three sentences that answer the user's question — which map is
best at a given compute, and is the difference real — under both readings, and say which
one the search optimised. Equal tokens (or equal FLOPs for a FLOP-matched search) is what
the search trained and ranked; equal training FLOPs is read from a ladder's rungs
(:mod:`~searchmaps.report.compute`), or said to be out of reach of one horizon. Every number
here is also below it (a subsection, a table or the protocol), where it is explained."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats


def h(x: float) -> str:
    """A horizon in words: 300k, 12.8M (as the horizon section writes it)."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _f(x: float) -> str:
    return f"{x:.3g}".replace("e+", "e")


def unreached(means: pd.DataFrame) -> dict[str, str]:
    """Of a ladder's per-rung means (candidate, rung, horizon), the candidates with rows on
    the ladder but none at its last horizon -> the horizon each stopped at (``6.4M``)."""
    last = means["rung"].max()
    reached = means.groupby("candidate")["rung"].max()
    at = means.set_index(["candidate", "rung"])["horizon"]
    return {c: h(at[(c, r)]) for c, r in reached[reached < last].sort_index().items()}


def _unranked(unranked: dict[str, str] | None, last: str) -> str:
    if not unranked:
        return ""
    names = ", ".join(f"`{c}`" for c in unranked)
    return f" ({names} did not reach {last} and {'is' if len(unranked) == 1 else 'are'} not ranked)"


def search_reading(ok: pd.DataFrame) -> tuple[bool, str]:
    """Whether the search compared its maps at equal training FLOPs (else tokens), and at how
    much: ``(False, "12,800,000 tokens each")``."""
    flop_matched = bool((ok["horizon"] == "train_flops").any()) if "horizon" in ok else False
    if flop_matched:  # written as the protocol writes it, so the number is found there
        target = ok["horizon_target"].dropna() if "horizon_target" in ok else pd.Series(dtype=float)
        flops = float(target.iloc[0]) if len(target) and ok["rung"].max() > 0 else float(ok["train_flops"].median())
        return True, f"{flops:.3g} training FLOPs each"
    return False, f"{float(ok['tokens'].median()):,.0f} tokens each"


def ranking_lead(summary: pd.DataFrame, best: str, reference: str | None, ok: pd.DataFrame, alpha: float,
                 unranked: dict[str, str] | None = None, last: str = "") -> str:
    """The answer at the reading the search optimised: the best map by mean, the top group's
    size and where the baseline stands (in it or not; how many maps beat it significantly)."""
    flop_matched, amount = search_reading(ok)
    reading = "equal training FLOPs" if flop_matched else "equal tokens"
    rows = summary[summary["n_seeds"] > 0].set_index("candidate")
    n = len(rows)
    top = [c for c in rows.index if rows.loc[c, "in_top_group"]]
    head = f"At {reading} ({amount}, the reading this search trained and ranked the maps by), "
    if n == 1:
        return head + f"only `{best}` has successful runs{_unranked(unranked, last)}."
    if len(top) == 1:
        text = f"`{best}` is best and alone in the top group of the {n} ranked maps"
    elif len(top) == n:
        text = (f"`{best}` has the lowest mean loss but all {n} ranked maps are in the top group, so these seeds "
                f"cannot name a best map")
    else:
        text = f"`{best}` has the lowest mean loss and the top group holds {len(top)} of the {n} ranked maps"
    text += _unranked(unranked, last)
    if reference is None or reference not in rows.index:
        return head + text + "; there is no all-ones baseline to compare with."
    if reference == best:
        return head + text + f"; the best is the baseline `{reference}` itself."
    r = rows["p_vs_reference"].astype(float)
    beat = [c for c in rows.index if c != reference and r[c] <= alpha and rows.loc[c, "diff_to_reference"] < 0]
    where = "is in the top group" if reference in top else "is not in the top group"
    beats = ("no map is significantly better than it" if not beat else
             f"{len(beat)} map{'s are' if len(beat) > 1 else ' is'} significantly better than it")
    return head + text + f"; the baseline `{reference}` {where}, and {beats}."


def missing_at_top(rows: pd.DataFrame, table: pd.DataFrame) -> dict[str, str]:
    """Of a ladder's rows (candidate, seed, rung, tokens, train_flops) and its
    :func:`searchmaps.stats.equal_flops` table, the maps not read at the table's top budget ->
    why, in words: where their rows stop (before the ladder's last horizon, or at it)."""
    if table.empty:
        return {}
    top = float(table["train_flops_budget"].max())
    read = set(table[table["train_flops_budget"] == top]["candidate"])
    last = rows["rung"].max()
    out = {}
    for cand, g in rows.groupby("candidate", sort=True):
        if cand in read:
            continue
        end = g[g["rung"] == g["rung"].max()]
        tokens, flops = float(end["tokens"].median()), float(end["train_flops"].median())
        seeds = int((g.groupby("seed")["train_flops"].max() >= top * (1 - 1e-9)).sum())
        if seeds >= 2:
            out[cand] = f"only {seeds} of its seeds reach it"
        elif g["rung"].max() < last:
            out[cand] = f"its rows stop at {h(tokens)} tokens ({_f(flops)} FLOPs), before the ladder's last horizon"
        else:
            out[cand] = f"its last horizon, {h(tokens)} tokens, spends {_f(flops)} FLOPs"
    return out


def top_budget_clause(table: pd.DataFrame, missing: dict[str, str] | None) -> str:
    """Where the study's top budget is not the largest budget every map reaches: the top group
    there, and each map missing there with why (``""`` where the two budgets are one)."""
    if table.empty:
        return ""
    full, _ = stats.largest_common_budget(table)
    top = float(table["train_flops_budget"].max())
    if top == full:
        return ""
    at = table[table["train_flops_budget"] == top]
    group = at[at["top_group"]].sort_values("mean")["candidate"].tolist()
    gone = "; ".join(f"`{c}` is missing there: {why}" for c, why in (missing or {}).items())
    names = ", ".join(f"`{c}`" for c in group)
    return (f"at the study's top budget, {_f(top)} FLOPs ({len(at)} maps read there"
            + (f"; {gone}" if gone else "") + f"), the top group holds {len(group)} of {len(at)}: {names}")


def flops_lead(table: pd.DataFrame, reference: str | None, n_maps: int,
               missing: dict[str, str] | None = None) -> str:
    """The answer at equal training FLOPs from a ladder's :func:`searchmaps.stats.equal_flops`
    table: at the largest budget every map reaches, the best map, the top group and the
    baseline's paired gaps to the others; where the study's top budget is larger (a map
    missing there), the top group there too and why each missing map is missing
    (``missing``, from :func:`missing_at_top`)."""
    if table.empty:
        return ("At equal training FLOPs this ladder cannot compare the maps: no budget is reached by two maps on "
                "two seeds or more.")
    full, reached = stats.largest_common_budget(table)
    at = table[table["train_flops_budget"] == full]
    best = at[at["best"]]["candidate"].iloc[0]
    top = at[at["top_group"]]["candidate"].tolist()
    every = "every map reaches" if reached == n_maps else f"the most maps reach, {reached} of {n_maps}"
    head = f"At equal training FLOPs (read from the ladder at {_f(full)}, the largest budget {every}), "
    who = f"the baseline `{best}`" if best == reference else f"`{best}`"
    group = ("and is alone in the top group" if len(top) == 1 else
             f"but all {len(at)} are in the top group" if len(top) == len(at) else
             f"and the top group holds {len(top)} of {len(at)}")
    text = head + f"{who} has the lowest mean loss {group}"
    clause = top_budget_clause(table, missing)
    tail = f"; {clause}." if clause else "."
    if reference is None or reference not in set(at["candidate"]):
        return text + tail
    others = at[(at["candidate"] != reference) & np.isfinite(at["gap"])]
    if others.empty:
        return text + tail
    ahead, behind = int((others["gap_low"] > 0).sum()), int((others["gap_high"] < 0).sum())
    gaps = f"{others['gap'].min():+.4f} to {others['gap'].max():+.4f} nats"
    if best != reference:
        text += f"; the baseline `{reference}`"
    else:
        text += "; it"
    if ahead == len(others):
        return text + (f" is ahead of all {len(others)} other maps by {gaps} (each pair's 95 % interval of the "
                       f"paired gap above 0, uncorrected)") + tail
    return text + (f" is ahead of {ahead} and behind {behind} of the other {len(others)} maps (95 % intervals of "
                   f"the paired gaps, uncorrected; gaps {gaps}, positive: the map behind the baseline)") + tail


def one_horizon_lead(ok: pd.DataFrame) -> str:
    """The equal-FLOPs reading of a study without a ladder: the same as at equal tokens when
    every map spends the same FLOPs per token, else out of reach of one horizon; for a
    FLOP-matched search, what equal tokens would need."""
    flop_matched, _ = search_reading(ok)
    if flop_matched:
        t = ok["tokens"].astype(float)
        return (f"At equal tokens this study cannot say: at equal training FLOPs its maps saw {t.min():,.0f} to "
                f"{t.max():,.0f} tokens.")
    f = ok["flops_per_token"].astype(float)
    if f.max() == f.min():
        return f"At equal training FLOPs the answer is the same: every map spends {f.max():,.0f} FLOPs per token."
    return (f"At equal training FLOPs this study cannot say: it has one horizon and its maps spend {f.min():,.0f} to "
            f"{f.max():,.0f} FLOPs per token (a --ladder reads them at equal compute).")
