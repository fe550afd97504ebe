"""Findings across a set of study folders, generated from their files (issue 33: findings that
cannot drift from the rows); ``results/quote_findings.py`` puts them, over the committed studies
(:func:`searchmaps.report.committed.folders`), in the README's "What the committed studies
found" block, so its staleness test covers them. Each function takes the study folders and
reads the file it needs from those that hold it: a study of your own in ``results/`` is not
among the committed ones.

- :func:`equal_tokens`: from every ``summary.csv``, in how many studies a map is
  significantly better than the baseline at the reading each search trained (``p_vs_reference``).
- :func:`equal_flops`: from every ``equal_flops.csv``, at the largest budget every map reaches,
  in how many ladders the baseline has the lowest mean loss, and in how many its paired 95 %
  interval (uncorrected) excludes 0 against every other map.
- :func:`inference`: the inference-cost study's table (exit at each seed's picked threshold,
  without memory sharing; the paired change with ``first:64``; the KV bytes saved) and what it
  shows, from that study's ``runs.csv`` (``results/ilr-table1-inference``).
- :func:`supernets`: from every ``supernet_validation.csv``, the supernet's τ against
  stand-alone training beside ranking by applied layers alone (``depth_tau``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from searchmaps.stats.compute import BUDGET, read_equal_flops

ALPHA = 0.05


def _holding(folders: Sequence[Path], file: str) -> list[Path]:
    """The folders of ``folders`` holding ``file``, in their order."""
    return [Path(f) for f in folders if (Path(f) / file).is_file()]


def _names(names: list[str]) -> str:
    q = [f"`{n}`" for n in names]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} and {q[-1]}"


def equal_tokens(folders: Sequence[Path]) -> str:
    """One sentence: the studies where a map beats the baseline significantly at the reading
    the search trained (its summary.csv's ``p_vs_reference`` at α = 0.05, a lower loss). A study
    with one seed a map tests nothing and is not counted."""
    studied, beaten, flops = [], [], []
    for folder in _holding(folders, "summary.csv"):
        info = folder / "study.json"
        if info.is_file() and json.loads(info.read_text()).get("horizon") == "train_flops":
            flops.append(folder.name)
        s = pd.read_csv(folder / "summary.csv")
        if "p_vs_reference" not in s or not s["p_vs_reference"].notna().any():
            continue  # no baseline among its maps
        if "n_seeds" in s and not (s["n_seeds"] >= 2).any():
            continue  # one seed a map (a learning-rate check's evaluation): nothing could be significant
        studied.append(folder.name)
        better = s[(s["p_vs_reference"] <= ALPHA) & (s["diff_to_reference"] < 0)]
        if len(better):
            beaten.append(f"{folder.name}: " + ", ".join(better["candidate"]))
    matched = f", or equal training FLOPs for {_names(flops)}" if flops else ""
    head = (f"**At the reading each search trained** (equal tokens{matched}; `p_vs_reference` of every "
            f"`summary.csv` with a baseline, α = {ALPHA:g}): ")
    if not beaten:
        return head + f"no map is significantly better than the baseline in any of the {len(studied)} studies."
    return head + (f"a map is significantly better than the baseline in {len(beaten)} of the {len(studied)} "
                   f"studies ({'; '.join(beaten)}).")


def equal_flops(folders: Sequence[Path]) -> str:
    """One sentence over the equal_flops.csv of every ladder among ``folders``."""
    lowest, clear, ladders, beyond = [], [], [], []
    for folder in _holding(folders, "equal_flops.csv"):
        t = read_equal_flops(folder / "equal_flops.csv")
        if t.empty:
            continue
        counts = t.groupby(BUDGET)["candidate"].nunique()
        full = counts[counts == counts.max()].index.max()
        at = t[t[BUDGET] == full]
        ladders.append(folder.name)
        peak = t[t[BUDGET] == t[BUDGET].max()]
        if peak[BUDGET].iloc[0] != full:  # the study's top budget, where a map is missing
            group = peak[peak["top_group"]]["candidate"]
            top = f"{peak[BUDGET].iloc[0]:.3g}".replace("e+", "e")
            beyond.append(f"`{folder.name}` at its top budget, {top} FLOPs, {len(group)} of {len(peak)} maps in the "
                          f"top group")
        ref = at[(at["gap"] == 0) & (at["gap_low"] == 0) & (at["gap_high"] == 0)]["candidate"]
        if len(ref) != 1:
            continue
        ref = ref.iloc[0]
        if at.loc[at["best"], "candidate"].iloc[0] == ref:
            lowest.append(folder.name)
        others = at[at["candidate"] != ref]
        if len(others) and (others["gap_low"] > 0).all():
            clear.append(folder.name)
    return (f"**At equal training FLOPs** (each ladder read between its rungs, `equal_flops.csv`, at the largest "
            f"budget every map reaches): the baseline has the lowest mean loss in {len(lowest)} of the "
            f"{len(ladders)} committed ladder studies, and its paired 95 % interval (uncorrected) excludes 0 against "
            f"every other map in {len(clear)} of them ({_names(clear)})"
            + (f"; where a study read more maps below its top budget than at it: " + "; ".join(beyond) if beyond else "")
            + ".")


def _ci(x) -> tuple[float, float, float]:
    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if len(x) < 2 or float(x.std(ddof=1)) == 0:
        return m, float("nan"), float("nan")
    h = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - h, m + h


def _fmt(t: tuple[float, float, float], spec: str, unit: str = "") -> str:
    lo, hi = (f"{x:{spec}}" for x in t[1:]) if math.isfinite(t[1]) else ("", "")
    if lo == hi:  # no interval, or one narrower than the digits shown
        return f"{t[0]:{spec}}{unit}"
    return f"{t[0]:{spec}}{unit} ({lo} to {hi})"


def _holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given."""
    order = np.argsort(p)
    out, run = np.empty(len(p)), 0.0
    for k, i in enumerate(order):
        run = max(run, min(1.0, (len(p) - k) * p[i]))
        out[i] = run
    return out.tolist()


def inference(folder: Path) -> list[str]:
    """The inference study's table and one paragraph of what its rows show, as Markdown lines."""
    d = pd.read_csv(folder / "runs.csv")
    d = d[d["status"] == "ok"].assign(kv=lambda x: x["kv_share"].fillna("none"))
    shared = sorted(s for s in d["kv"].unique() if s != "none")[0]
    rows, change, p = [], {}, {}
    for m in dict.fromkeys(d["map"]):
        base = d[(d["map"] == m) & (d["kv"] == "none")].set_index("seed")
        other = d[(d["map"] == m) & (d["kv"] == shared)].set_index("seed")
        seeds = base.index.intersection(other.index)
        diff = other.loc[seeds, "val_loss"] - base.loc[seeds, "val_loss"]
        if (diff == 0).all():  # nothing repeats: the shared cache is the same model
            continue
        full = int(base["applied_layers"].iloc[0])
        pct = _ci(100 * np.expm1(diff))
        change[m] = pct
        p[m] = float(stats.ttest_1samp(diff, 0).pvalue)  # on the loss, the scale of every test
        kv = 1 - other["kv_bytes_per_token"].iloc[0] / base["kv_bytes_per_token"].iloc[0]
        rows.append(f"| `{m}` | {_fmt(_ci(100 * (1 - base['exit_depth'] / full)), '.0f', ' %')} | "
                    f"{_fmt(_ci(base['exit_flops_per_token'] / base['flops_per_token']), '.2f')} | "
                    f"{_fmt(pct, '+.1f', ' %')} | {100 * kv:.1f} % |")
    holm = dict(zip(p, _holm(list(p.values()))))
    lower = sorted((m for m, t in change.items() if t[2] < 0), key=lambda m: change[m][0])
    level = [m for m, t in change.items() if t[1] <= 0 <= t[2]]
    higher = [m for m, t in change.items() if t[1] > 0]
    said = (f"Paired by seed, `{shared}` lowers the validation perplexity of {len(lower)} of these {len(change)} maps "
            f"(95 % interval below 0, uncorrected; by gain, with the paired t's p on the loss Holm-corrected over the {len(change)}: "
            + ", ".join(f"`{m}` {change[m][0]:+.1f} % (p {holm[m]:.2g})" for m in lower) + ")")
    if level:
        said += (f"; for {_names(level)} the interval spans 0 (up to " +
                 " and ".join(f"{change[m][2]:+.1f} %" for m in level) + "), a cost not ruled out")
    said += (f"; it raises it for {_names(higher)}." if higher else "; no map's interval lies above 0.")
    head = ["| map | layers saved under exit at each seed's picked threshold (no sharing) | inference FLOPs vs "
            f"full | `{shared}`: perplexity change | KV bytes saved |", "|---|---|---|---|---|"]
    return head + rows + ["", said]


def supernets(folders: Sequence[Path]) -> str:
    """One sentence over the supernet_validation.csv of every folder of ``folders``: its τ against stand-alone training
    beside ranking by applied layers alone."""
    v = pd.concat([pd.read_csv(f / "supernet_validation.csv").assign(folder=f.name)
                   for f in _holding(folders, "supernet_validation.csv")], ignore_index=True)
    below = v[v["kendall_tau"] < v["depth_tau"]]
    reach = v[v["kendall_tau_high"] >= v["depth_tau"]]
    best = v.loc[v["kendall_tau"].idxmax()]
    return (f"**Supernets** (`supernet_validation.csv` of {len(v)} committed validations): the supernet's Kendall's τ "
            f"against stand-alone training ({v['kendall_tau'].min():+.2f} to {v['kendall_tau'].max():+.2f}) is "
            f"below ranking by applied layers alone (`depth_tau`, {v['depth_tau'].min():.2f} to "
            f"{v['depth_tau'].max():.2f}) in {len(below)} of them, and its 95 % interval reaches the depth ranking's "
            f"τ in {len(reach)} (the highest τ: `{best['folder']}`, {best['kendall_tau']:.2f}, 95 % CI "
            f"{best['kendall_tau_low']:.2f} to {best['kendall_tau_high']:.2f}, against {best['depth_tau']:.2f} by "
            f"depth).")
