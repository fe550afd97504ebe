"""Maps compared at equal training compute, read from a ladder's rungs.

A ladder trains every map to the same horizons (tokens, usually), so its rungs compare maps
at equal tokens; a map that applies more layers has then spent more FLOPs. The user's other
question is which map is best for the same compute. Each rung of each seed is a finished
training (a ladder's branches end their schedules there), so a seed's loss at a training-FLOP
budget ``B`` is read from its rungs: linear in ``log(FLOPs)`` between the two rungs around
``B``, never beyond the first or the last (a map that has not reached ``B``, or started past
it, is left out there). The seeds stay paired: every map's seed ``s`` is read at the same
budgets, so the tests and the top group at each budget are the usual paired ones.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .analysis import analyze
from .topgroup import DEFAULT_RULE

RELATIVE_TOLERANCE = 1e-9  # a rung within this of a budget is read as exactly on it (float FLOP counts)
# the column of an equal_flops table (and equal_flops.csv) holding the budget of training FLOPs
# each row is read at; before issue 45 it was "budget_flops", a name study.json gives the search's
# budget of forward FLOPs per token
BUDGET = "train_flops_budget"
OLD_BUDGET = "budget_flops"


def loss_at_flops(rows: pd.DataFrame, budgets, metric: str = "val_loss") -> pd.DataFrame:
    """Each (candidate, seed)'s ``metric`` at each training-FLOP budget it brackets, from
    ``rows`` (one per candidate, seed and rung, with ``train_flops`` and ``tokens``):
    columns budget, candidate, seed, tokens (read the same way), ``metric``. A seed whose
    rungs do not spend more FLOPs one after another (or has one rung) is not read."""
    out = []
    for (cand, seed), g in rows.groupby(["candidate", "seed"], sort=True):
        g = g.sort_values("rung")
        f = np.log(g["train_flops"].to_numpy(float))
        if len(f) < 2 or not np.all(np.diff(f) > 0):  # rungs that did not spend more: no reading of compute
            continue
        y = g[metric].to_numpy(float)
        t = np.log(g["tokens"].to_numpy(float))
        for b in budgets:
            lb = np.log(float(b))
            if lb < f[0] - RELATIVE_TOLERANCE or lb > f[-1] + RELATIVE_TOLERANCE:
                continue
            lb = min(max(lb, f[0]), f[-1])
            out.append({"budget": float(b), "candidate": cand, "seed": seed,
                        "tokens": float(np.exp(np.interp(lb, f, t))), metric: float(np.interp(lb, f, y))})
    return pd.DataFrame(out, columns=["budget", "candidate", "seed", "tokens", metric])


def budgets_of(rows: pd.DataFrame, reference: str | None) -> list[float]:
    """The budgets to read: the training FLOPs of the baseline's rungs (the gap to it is the
    question), else of the candidate that spends the fewest FLOPs per token."""
    if reference is None or reference not in set(rows["candidate"]):
        reference = rows.groupby("candidate")["train_flops"].min().idxmin()
    mine = rows[rows["candidate"] == reference]
    return sorted(set(mine.groupby("rung")["train_flops"].median().astype(float).tolist()))


def largest_common_budget(table: pd.DataFrame) -> tuple[float, int]:
    """The largest budget of an :func:`equal_flops` table read for the most candidates, and
    how many that is: where the maps are compared at equal compute."""
    counts = table.groupby(BUDGET)["candidate"].nunique()
    return float(counts[counts == counts.max()].index.max()), int(counts.max())


def read_equal_flops(path) -> pd.DataFrame:
    """An ``equal_flops.csv`` as :func:`equal_flops` made it, one written before the budget's
    column was renamed (``budget_flops``) included: that column read as :data:`BUDGET`."""
    table = pd.read_csv(path)
    if OLD_BUDGET in table.columns and BUDGET not in table.columns:
        table = table.rename(columns={OLD_BUDGET: BUDGET})
    return table


def equal_flops(rows: pd.DataFrame, reference: str | None = None, metric: str = "val_loss", alpha: float = 0.05,
                rule: str = DEFAULT_RULE, budgets=None) -> pd.DataFrame:
    """One row per (budget, candidate) for the budgets (default :func:`budgets_of`; column
    :data:`BUDGET`, training FLOPs) where two
    candidates or more have a reading on two seeds or more: seeds, tokens (mean), mean,
    ``ci_low``/``ci_high`` (t interval over seeds), ``top_group`` (``rule`` at ``alpha`` over
    the candidates read there), ``best``, and with a baseline read there its paired
    ``gap`` to it with ``gap_low``/``gap_high`` (t interval over shared seeds; positive:
    worse than the baseline)."""
    from scipy import stats as st

    budgets = budgets_of(rows, reference) if budgets is None else list(budgets)
    read = loss_at_flops(rows, budgets, metric)
    out = []
    for b, at in read.groupby("budget", sort=True):
        counts = at.groupby("candidate")["seed"].nunique()
        at = at[at["candidate"].isin(counts[counts >= 2].index)]
        if at["candidate"].nunique() < 2:
            continue
        res = analyze(at[["candidate", "seed", metric]], metric=metric, alpha=alpha, rule=rule)
        mat = at.pivot(index="seed", columns="candidate", values=metric)
        ref = reference if reference in mat.columns else None
        for cand in sorted(mat.columns, key=lambda c: mat[c].mean()):
            x = mat[cand].dropna()
            n = len(x)
            half = st.t.ppf(1 - alpha / 2, n - 1) * x.std(ddof=1) / np.sqrt(n)
            row = {BUDGET: b, "candidate": cand, "seeds": n,
                   "tokens": float(at.loc[at["candidate"] == cand, "tokens"].mean()),
                   "mean": float(x.mean()), "ci_low": float(x.mean() - half), "ci_high": float(x.mean() + half),
                   "top_group": cand in res.top_group, "best": cand == res.best,
                   "gap": np.nan, "gap_low": np.nan, "gap_high": np.nan}
            if ref is not None:
                d = (mat[cand] - mat[ref]).dropna()
                if cand == ref:
                    row.update(gap=0.0, gap_low=0.0, gap_high=0.0)
                elif len(d) >= 2:
                    h = st.t.ppf(1 - alpha / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
                    row.update(gap=float(d.mean()), gap_low=float(d.mean() - h), gap_high=float(d.mean() + h))
            out.append(row)
    return pd.DataFrame(out, columns=[BUDGET, "candidate", "seeds", "tokens", "mean", "ci_low", "ci_high",
                                      "top_group", "best", "gap", "gap_low", "gap_high"])
