"""The study report: which reuse maps really win, as one page that opens offline.

    python -m searchmaps.report results/<study> [--alpha 0.05] [--test ttest|signflip|wilcoxon]
                                                [--correction holm|fdr_bh] [--reference MAP|MAP|PE]

Reads ``runs.csv`` and ``study.json`` of a study folder, runs :func:`searchmaps.stats.analyze`
on the successful runs, and writes ``summary.csv`` (one row per candidate) and ``report.html``
(Pareto front, ranking, significance matrix, learning curves, the result in words and the
protocol) next to them; the Pareto figure is also attached to the Optuna study so
``optuna-dashboard`` shows it. Sections below: loading and tables (pandas only), sentences
(text only), figures (plotly only), page and Optuna attachment, command line.

Default test: the paired t-test. The exact sign-flip test is reported beside it as a second
opinion but cannot be primary at the seed counts users run: its smallest two-sided p is
2 / 2**n (0.25 with 3 seeds, 0.0625 with 5), so with 3-5 seeds it never reaches 0.05, let
alone Holm's alpha / m over all pairs.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .cli import Parser

METRIC = "val_ppl"
EXIT_USAGE = 2
GRAPH_ID = "searchmaps-pareto"  # fixed, so a second report replaces the figure in the dashboard
CORRECTIONS = ("holm", "fdr_bh")
_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


class ReportError(ValueError):
    """Input the report cannot use; the message names what to change."""


# --------------------------------------------------------------------------- loading and tables


def load_study(study_dir) -> tuple[pd.DataFrame, dict]:
    """``runs.csv`` as a DataFrame (``candidate`` filled in, ``error`` as text) and
    ``study.json`` as a dict (empty when absent)."""
    d = Path(study_dir)
    if not d.is_dir():
        raise ReportError(f"{d} is not a folder; pass a study folder results/<study> written by searchmaps.run")
    path = d / "runs.csv"
    if not path.is_file():
        raise ReportError(f"{path} does not exist; run searchmaps.run for this study first")
    try:
        runs = pd.read_csv(path, dtype={"map": str, "pe": str, "candidate": str, "error": str})
    except pd.errors.EmptyDataError:
        raise ReportError(f"{path} is empty; run searchmaps.run for this study first") from None
    missing = [c for c in ("seed", "status", METRIC, "flops_per_token") if c not in runs.columns]
    if missing:
        raise ReportError(f"{path} lacks column(s) {', '.join(missing)}; it was not written by searchmaps.run")
    if "candidate" not in runs.columns:
        runs["candidate"] = runs["map"].astype(str) + "|" + runs["pe"].astype(str)
    runs["candidate"] = runs["candidate"].astype(str)
    parts = runs["candidate"].str.split("|", n=1, expand=True).reindex(columns=[0, 1])
    runs["map"] = runs["map"].fillna(parts[0]) if "map" in runs.columns else parts[0]
    runs["pe"] = runs["pe"].fillna(parts[1]) if "pe" in runs.columns else parts[1]
    runs["error"] = runs["error"].fillna("").astype(str) if "error" in runs.columns else ""
    runs["status"] = runs["status"].astype(str)
    info: dict = {}
    if (d / "study.json").is_file():
        try:
            info = json.loads((d / "study.json").read_text())
        except ValueError as exc:
            raise ReportError(f"{d / 'study.json'} is not valid JSON ({exc}); restore it or delete it") from None
    return runs, info


def successful(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows the statistics use: status ok with a finite metric, one per (candidate, seed)
    (the last, should a row ever have been appended twice)."""
    ok = runs[(runs["status"] == "ok") & np.isfinite(pd.to_numeric(runs[METRIC], errors="coerce"))]
    return ok.drop_duplicates(["candidate", "seed"], keep="last").reset_index(drop=True)


def resolve_reference(reference: str | None, candidates) -> str | None:
    """``--reference`` as a candidate name: a full ``MAP|PE`` or a map that only one PE
    has; None picks the all-ones map (:func:`searchmaps.stats.reference_candidate`)."""
    cands = sorted(map(str, candidates))
    if reference is None:
        return stats.reference_candidate(cands)
    ref = reference.replace(" ", "")
    if ref in cands:
        return ref
    hits = [c for c in cands if c.split("|", 1)[0] == ref]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise ReportError(f"--reference {reference} matches {', '.join(hits)}; name one of them as MAP|PE")
    raise ReportError(f"--reference {reference} is not among the candidates with successful runs "
                      f"({', '.join(cands)}); name one of those")


def pareto_optimal(x, y) -> np.ndarray:
    """True where no other point is at least as good in both x and y and better in one
    (both minimised). Identical points do not dominate each other; NaN is never optimal."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    good = np.isfinite(x) & np.isfinite(y)
    out = good.copy()
    for i in np.flatnonzero(good):
        dominated = good & (x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))
        out[i] = not dominated.any()
    return out


def _paired_diff(mat: pd.DataFrame, a: str, b: str) -> float:
    """Mean of a - b over the seeds both have: the difference the paired p-value tests."""
    d = (mat[a] - mat[b]).dropna()
    return float(d.mean()) if len(d) else float("nan")


def build_summary(runs: pd.DataFrame, ok: pd.DataFrame, res: dict, second: pd.DataFrame | None,
                  second_name: str) -> pd.DataFrame:
    """One row per candidate, best first; candidates without a successful run come last
    with NaN statistics. ``second`` is the pairwise p matrix of the second-opinion test."""
    s = res["summary"].copy()
    mat = stats.to_matrix(ok, METRIC)
    best, ref, pw = res["best"], res["reference"], res["pairwise"]
    s["val_loss_mean"] = s["candidate"].map(ok.groupby("candidate")["val_loss"].mean()) \
        if "val_loss" in ok.columns else np.nan
    for name, against in (("best", best), ("reference", ref)):
        s[f"diff_to_{name}"] = [np.nan if against is None else 0.0 if c == against else _paired_diff(mat, c, against)
                                for c in s["candidate"]]
        for col, p in ((f"p_vs_{name}", pw), (f"p_vs_{name}_{second_name}", second)):
            s[col] = [np.nan if against is None or p is None or c == against else float(p.loc[c, against])
                      for c in s["candidate"]]
    s["in_top_group"] = s["candidate"].isin(res["top_group"])
    failed_only = sorted(set(runs["candidate"]) - set(s["candidate"]))
    s = pd.concat([s, pd.DataFrame({"candidate": failed_only, "n_seeds": 0, "in_top_group": False})],
                  ignore_index=True) if failed_only else s
    first = runs.groupby("candidate").first()
    for col in ("map", "pe", "flops_per_token", "kv_bytes_per_token", "applied_layers"):
        s[col] = s["candidate"].map(first[col]) if col in first.columns else np.nan
    s["pareto_optimal"] = pareto_optimal(s["flops_per_token"], s["mean"])
    failed = runs[runs["status"] == "failed"].drop_duplicates(["candidate", "seed"])
    s["n_failed"] = s["candidate"].map(failed.groupby("candidate").size()).fillna(0).astype(int)
    s["n_seeds"] = s["n_seeds"].astype(int)
    cols = ["candidate", "map", "pe", "flops_per_token", "kv_bytes_per_token", "applied_layers", "n_seeds",
            "mean", "std", "sem", "ci_low", "ci_high", "val_loss_mean", "diff_to_best", "p_vs_best",
            f"p_vs_best_{second_name}", "diff_to_reference", "p_vs_reference", f"p_vs_reference_{second_name}",
            "in_top_group", "pareto_optimal", "n_failed"]
    return s[cols]


def first_errors(runs: pd.DataFrame) -> dict[str, str]:
    """The first error message of each candidate with failed runs."""
    bad = runs[(runs["status"] == "failed") & (runs["error"] != "")]
    return {str(c): str(g["error"].iloc[0]) for c, g in bad.groupby("candidate")}


def curve_table(ok: pd.DataFrame) -> pd.DataFrame:
    """The ``curve`` JSON of every run as long rows: candidate, seed, tokens, val_loss."""
    rows = []
    if "curve" in ok.columns:
        for cand, seed, text in ok[["candidate", "seed", "curve"]].itertuples(index=False):
            try:
                points = json.loads(text) if isinstance(text, str) else []
            except ValueError:  # a hand-edited or cut cell: that run just has no curve
                points = []
            rows += [(cand, seed, p["tokens"], p["val_loss"]) for p in points if "tokens" in p and "val_loss" in p]
    return pd.DataFrame(rows, columns=["candidate", "seed", "tokens", "val_loss"])


# --------------------------------------------------------------------------- sentences


def fmt_p(p: float) -> str:
    return "n/a" if not np.isfinite(p) else "< 0.001" if p < 0.001 else f"{p:.2g}"


def _p_eq(p: float) -> str:
    s = fmt_p(p)
    return f"p {s}" if s.startswith("<") else f"p = {s}"


def fmt_mean_ci(mean: float, lo: float, hi: float) -> str:
    """``13.80 ± 0.10``: the half-width of the 95 % CI to two significant digits."""
    half = (hi - lo) / 2
    if not np.isfinite(half) or half <= 0:
        return f"{mean:.4g} (one seed)" if np.isfinite(mean) else "n/a"
    d = min(4, max(0, 1 - math.floor(math.log10(half))))
    return f"{mean:.{d}f} ± {half:.{d}f}"


def _ppl(row) -> str:
    if np.isfinite(row["ci_high"] - row["ci_low"]):
        return f"{fmt_mean_ci(row['mean'], row['ci_low'], row['ci_high'])} validation perplexity, mean ± 95 % CI"
    return f"{row['mean']:.4g} validation perplexity, a single seed: no interval"


def _names(cands: list[str], limit: int = 5) -> str:
    q = [f"`{c}`" for c in cands]
    if len(q) > limit:
        return f"{', '.join(q[:limit - 1])} and {len(q) - limit + 1} others"
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} and {q[-1]}"


def _p_list(ps, limit: int = 5) -> str:
    ps = [float(p) for p in ps]
    if len(ps) > limit:
        return f"p from {fmt_p(min(ps))} to {fmt_p(max(ps))}"
    if len(ps) > 1 and all(p < 0.001 for p in ps):
        return "p < 0.001"
    return "p = " + ", ".join(fmt_p(p) for p in ps) if len(ps) > 1 else _p_eq(ps[0])


def _p_bound(ps) -> str:
    """One bound for a group of significant p-values: ``p < 0.01`` style."""
    ps = [float(p) for p in ps]
    if len(ps) == 1:
        return _p_eq(ps[0])
    top = max(ps)
    for bound in (0.001, 0.01):
        if top < bound:
            return f"p < {bound:g}"
    return f"p ≤ {fmt_p(top)}"


def _verb(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def result_sentences(summary: pd.DataFrame, best: str, reference: str | None, alpha: float,
                     errors: dict[str, str] | None = None, family_size: int | None = None) -> list[str]:
    """The result in plain sentences, from a :func:`build_summary` table (best first).
    Candidate names are in backticks."""
    errors = errors or {}
    ok = summary[summary["n_seeds"] > 0].set_index("candidate")
    b = ok.loc[best]
    out = []
    if len(ok) == 1:
        out.append(f"Only `{best}` has successful runs ({_ppl(b)}); there is nothing to compare it with.")
    else:
        out.append(f"`{best}` is best ({_ppl(b)}).")
        others = ok.drop(index=best)
        top, worse = others[others["in_top_group"]], others[~others["in_top_group"]]
        if family_size == 0:
            out.append("No two candidates share two or more seeds, so no difference can be tested: "
                       "the order by mean is descriptive only.")
        elif worse.empty:
            out.append(f"No other candidate is significantly worse ({_p_list(top['p_vs_best'])}): "
                       f"{'both are' if len(ok) == 2 else f'all {len(ok)} are'} in the top group, "
                       f"so these seeds cannot separate them.")
        elif top.empty:
            out.append(f"Every other candidate is significantly worse ({_p_bound(worse['p_vs_best'])}).")
        else:
            out.append(f"{_names(list(top.index))} {_verb(len(top), 'is', 'are')} not significantly worse "
                       f"({_p_list(top['p_vs_best'])}); {_names(list(worse.index), 3)} "
                       f"{_verb(len(worse), 'is', 'are')} significantly worse ({_p_bound(worse['p_vs_best'])}).")
        if family_size != 0:
            out += _reference_sentences(ok, best, reference, alpha)
    for cand, row in summary[summary["n_failed"] > 0].set_index("candidate").iterrows():
        why = errors.get(cand, "no error message").replace("`", "'")
        why = why if len(why) <= 160 else why[:157] + "..."
        n, bad = int(row["n_seeds"]), int(row["n_failed"])
        if n == 0:
            out.append(f"`{cand}` failed on {_verb(bad, 'its only seed', f'all {bad} seeds')} ({why}) "
                       f"and is not ranked.")
        else:
            out.append(f"`{cand}` failed on {bad} of {bad + n} seeds ({why}); its statistics use only the "
                       f"{n} that finished, and a map that diverges is not one to recommend.")
    return out


def _reference_sentences(ok: pd.DataFrame, best: str, reference: str | None, alpha: float) -> list[str]:
    if reference is None:
        return ["There is no all-ones baseline among the candidates (name one with --reference), "
                "so nothing is compared with a baseline."]
    if reference == best:
        return [f"The best candidate is the baseline `{reference}` itself: no map with reuse beats it here."]
    group = [c for c in ok.index if ok.loc[c, "in_top_group"] and c != reference]
    sig = (ok["p_vs_reference"] <= alpha)
    beat = [c for c in group if sig[c] and ok.loc[c, "diff_to_reference"] < 0]
    same = [c for c in group if c not in beat]
    parts, base = [], f"the baseline `{reference}`"
    if beat:
        ps = ok.loc[beat, "p_vs_reference"]
        if len(beat) == len(group) and len(group) > 1:
            who = "both" if len(group) == 2 else f"all {_WORDS.get(len(group), len(group))}"
            parts.append(f"{who} beat {base} ({_p_bound(ps)})")
        else:
            parts.append(f"{_names(beat)} {_verb(len(beat), 'beats', 'beat')} {base} ({_p_list(ps)})")
    if same:
        it = "it" if beat else base
        parts.append(f"{_names(same)} {_verb(len(same), 'does', 'do')} not differ significantly from {it} "
                     f"({_p_list(ok.loc[same, 'p_vs_reference'])})")
    text = "; ".join(parts)
    out = [text[0].upper() + text[1:] + "."]
    if ok.loc[reference, "in_top_group"]:
        out.append(f"The baseline is itself in the top group ({_p_eq(ok.loc[reference, 'p_vs_best'])} vs the best).")
    worse = [c for c in ok.index if c != reference and sig[c] and ok.loc[c, "diff_to_reference"] > 0]
    if worse:
        out.append(f"{_names(worse, 4)} {_verb(len(worse), 'is', 'are')} significantly worse than the baseline "
                   f"({_p_bound(ok.loc[worse, 'p_vs_reference'])}).")
    return out


def protocol_sentences(info: dict, runs: pd.DataFrame, ok: pd.DataFrame, res: dict, second_name: str,
                       correction: str) -> list[str]:
    """How the numbers were made: horizon, seeds, data, model, test, correction, omnibus, power."""
    out = []
    horizon = info.get("horizon") or (str(runs["horizon"].iloc[0]) if "horizon" in runs.columns else "tokens")
    tokens = ok["tokens"] if "tokens" in ok.columns else pd.Series(dtype=float)
    if horizon == "train_flops":
        tf = info.get("train_flops") or (ok["train_flops"].median() if "train_flops" in ok.columns else float("nan"))
        seen = f" (from {tokens.min():,.0f} to {tokens.max():,.0f} tokens)" if len(tokens) else ""
        out.append(f"FLOP-matched: every run spent the same {tf:.3g} training FLOPs, so maps that apply more "
                   f"layers saw fewer tokens{seen}.")
    else:
        n = info.get("tokens") or (tokens.max() if len(tokens) else float("nan"))
        out.append(f"Token-matched: every run trained on the same {n:,.0f} tokens, so maps that apply more "
                   f"layers also spent more training compute.")
    if info.get("budget_flops"):
        out.append(f"Candidates: maps at or under the budget of {info['budget_flops']:,.0f} forward FLOPs per "
                   f"token ({info.get('space', 'space')} space, sampler {info.get('sampler', '?')}).")
    n_seeds = res["summary"]["n_seeds"]
    seeds = f"{n_seeds.iloc[0]}" if n_seeds.nunique() == 1 else f"{n_seeds.min()} to {n_seeds.max()}"
    planned = info.get("seeds")
    seeds += f" (planned {planned})" if planned and (n_seeds != planned).any() else ""
    out.append(f"Seeds: {seeds} per candidate; seed s of every candidate uses the same data order and "
               f"initial draw, so comparisons are paired on seed.")
    if info.get("data"):
        out.append(f"Data: {info['data']} (fingerprint {info.get('data_fingerprint') or 'not recorded'}).")
    m = info.get("model") or {}
    if m:
        params = ok["n_params"] if "n_params" in ok.columns else pd.Series(dtype=float)
        size = (f"; {params.min():,.0f} parameters" if params.nunique() == 1 else
                f"; {params.min():,.0f} to {params.max():,.0f} parameters") if len(params) else ""
        out.append(f"Model: {m.get('n_layers')} layers, d_model {m.get('d_model')}, {m.get('n_heads')} heads, "
                   f"FFN {m.get('ffn_hidden')}, sequence {m.get('seq_len')}, vocabulary {m.get('vocab_size')}{size}.")
    names = {"ttest": "paired t-test", "signflip": "exact paired sign-flip test",
             "wilcoxon": "Wilcoxon signed-rank test"}
    fix = {"holm": "Holm", "fdr_bh": "Benjamini-Hochberg (false discovery rate)"}[correction]
    out.append(f"Test: {names[res['method']]} on validation perplexity per seed, two-sided, with the "
               f"{names[second_name]} beside it as a second opinion; {fix} correction over all "
               f"{res['family_size']} candidate pairs, α = {res['alpha']:g}. The top group is the best candidate "
               f"and every candidate not significantly worse than it.")
    mde = res["mde"]
    n, m, min_p = mde["n_seeds"], mde["n_comparisons"], mde["signflip_min_p"]
    if n and res["method"] in ("ttest", "signflip"):
        # Holm's first step needs p <= alpha/m; Benjamini-Hochberg, at best, p <= alpha
        limit = res["alpha"] / m if correction == "holm" else res["alpha"]
        need = (f"p ≤ α/m = {limit:.2g} to pass Holm's first step over m = {m} pairs" if correction == "holm"
                else f"p ≤ α = {limit:g} even in Benjamini-Hochberg's best case")
        can = "it could not reject anything" if min_p > limit else "it can reject only the clearest differences"
        then = ("The paired t-test is therefore the primary test; the sign-flip p-values are a second opinion."
                if res["method"] == "ttest" else
                "The chosen sign-flip test therefore cannot find any difference with these seeds: use --test ttest "
                "or add seeds." if min_p > limit else "")
        out.append(f"Why the t-test: with {n} paired seeds the exact sign-flip test's smallest two-sided p is "
                   f"2/2^{n} = {min_p:.3g}, and a pair needs {need}, so {can} (with Holm it needs at least "
                   f"{mde['signflip_min_seeds']} seeds; with 3-5 seeds it cannot even reach p < 0.05). {then}".strip())
    fr = res["friedman"]
    if fr:
        verdict = ("the candidates differ" if fr["p_value"] <= res["alpha"]
                   else "no evidence that the candidates differ")
        out.append(f"Friedman omnibus test over the {fr['n_seeds']} seeds all {fr['n_candidates']} candidates "
                   f"share: χ² = {fr['statistic']:.3g}, {_p_eq(fr['p_value'])} ({verdict}).")
    else:
        out.append("Friedman omnibus test: not available (it needs at least 3 candidates and 2 seeds they all "
                   "share).")
    if np.isfinite(mde["mde"]):
        by = mde["by_seeds"].set_index("n_seeds")["mde"]
        more = [f"{k} seeds: {by[k]:.3g}" for k in sorted({n + 2, 2 * n, 2 * n + 4}) if k in by.index and k > n]
        out.append(f"Minimum detectable difference: with {n} seeds (sd of paired differences {mde['sd_diff']:.3g}), "
                   f"a paired t-test at α/m over m = {m} pairs finds a true difference of {mde['mde']:.3g} "
                   f"perplexity with {mde['power']:.0%} power ({'; '.join(more)}).")
        gaps = res["summary"]["mean"] - res["summary"]["mean"].min()
        gap = gaps[res["summary"]["candidate"].isin(res["top_group"])].max()
        if len(res["top_group"]) > 1 and gap < mde["mde"]:
            out.append(f"The gaps inside the top group (up to {gap:.3g}) are below it: add seeds to separate them.")
    else:
        out.append("Minimum detectable difference: not computable (it needs two candidates sharing at least two "
                   "seeds).")
    return out


# --------------------------------------------------------------------------- figures

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
            [f"{d:+.3g} ({_p_eq(p)})" if np.isfinite(p) else "best"
             for d, p in rows[["diff_to_best", "p_vs_best"]].to_numpy()],
            [f"{d:+.3g} ({_p_eq(p)})" if np.isfinite(p) else ("reference" if c == reference else "n/a")
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


# --------------------------------------------------------------------------- page and Optuna


def inline(text: str) -> str:
    """Sentence text to HTML: escaped, `backticks` as <code>."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text, quote=False))


def ranking_table(summary: pd.DataFrame, second_name: str) -> str:
    head = ["#", "candidate", "FLOPs/token", "KV bytes/token", "seeds", "val ppl (mean ± 95 % CI)",
            "Δ vs best (corrected p)", "Δ vs reference (corrected p)", "top group", "Pareto"]
    rows = []
    for i, r in enumerate(summary.itertuples(index=False), 1):
        def delta(d, p, p2):
            if not np.isfinite(d):
                return "–"
            if not np.isfinite(p):
                return "0 (itself)"
            return f"{d:+.3g} ({_p_eq(p)})<br><small>{second_name}: {_p_eq(p2)}</small>"
        r = r._asdict()
        seeds = f"{r['n_seeds']}" + (f" <span class=bad>({r['n_failed']} failed)</span>" if r["n_failed"] else "")
        cells = [str(i), f"<code>{html.escape(r['candidate'])}</code>", f"{r['flops_per_token']:,.0f}",
                 f"{r['kv_bytes_per_token']:,.0f}" if np.isfinite(r["kv_bytes_per_token"]) else "–", seeds,
                 fmt_mean_ci(r["mean"], r["ci_low"], r["ci_high"]) if r["n_seeds"] else "failed",
                 delta(r["diff_to_best"], r["p_vs_best"], r[f"p_vs_best_{second_name}"]),
                 delta(r["diff_to_reference"], r["p_vs_reference"], r[f"p_vs_reference_{second_name}"]),
                 "★" if r["in_top_group"] else "", "✓" if r["pareto_optimal"] else ""]
        cls = ' class="top"' if r["in_top_group"] else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "\n".join(rows) + "</tbody></table>")


def failures_table(runs: pd.DataFrame) -> str:
    """Runs that did not finish, one row per candidate and reason (a diverging map fails
    the same way on every seed; one line per seed would bury the protocol)."""
    bad = runs[runs["status"] != "ok"]
    if bad.empty:
        return ""
    groups = bad.groupby(["candidate", "status", "error"], sort=False)["seed"].apply(lambda x: sorted(x.tolist()))
    rows = "".join(f"<tr><td><code>{html.escape(str(c))}</code></td><td>{', '.join(map(str, seeds))}</td>"
                   f"<td>{html.escape(st)}</td><td>{html.escape(str(err))}</td></tr>"
                   for (c, st, err), seeds in groups.items())
    return ("<h2>Runs that did not finish</h2><table><thead><tr><th>candidate</th><th>seeds</th><th>status</th>"
            f"<th>error</th></tr></thead><tbody>{rows}</tbody></table>")


_CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1280px;margin:auto;padding:24px 32px;background:#fff}
h1{font-size:26px}h2{margin-top:36px;font-size:20px}p.result{font-size:17px;line-height:1.5}
ul.protocol li{margin:4px 0;line-height:1.45}code{background:#f0f0f0;padding:0 3px}
table{border-collapse:collapse;font-size:14px;width:100%}
th,td{border-bottom:1px solid #ddd;padding:5px 8px;text-align:left}th{background:#f4f4f4}
tr.top td{background:#fff4f4}.bad{color:#b00}.caption{color:#555;font-size:14px}"""


def render_page(title: str, result: list[str], figures: list[tuple[str, object, str]], table: str,
                protocol: list[str], failures: str) -> str:
    """The whole page; plotly.js is embedded once, with the first figure, so the file
    opens without a network."""
    blocks = []
    for i, (heading, fig, caption) in enumerate(figures):
        div = fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"fig{i}",
                          default_height=f"{fig.layout.height or 500}px", config={"displaylogo": False})
        blocks.append(f"<h2>{html.escape(heading)}</h2><p class=caption>{inline(caption)}</p>{div}")
        if i == 0:
            blocks.append(f"<h2>Ranking</h2>{table}")
    body = (f"<h1>{html.escape(title)}</h1><h2>Result</h2><p class=result>{' '.join(inline(s) for s in result)}</p>"
            + "\n".join(blocks) + failures
            + "<h2>Protocol</h2><ul class=protocol>" + "".join(f"<li>{inline(s)}</li>" for s in protocol) + "</ul>"
            + '<p class=caption>Per-candidate numbers: <a href="summary.csv">summary.csv</a>; '
            + "every run: runs.csv.</p>")
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><main>{body}</main></body></html>\n")


def attach_figure(info: dict, study_dir: Path, fig) -> bool:
    """Save ``fig`` in the Optuna study for optuna-dashboard; a warning, never an error,
    when the study cannot be reached (the report matters more than the dashboard)."""
    name, storage = info.get("study"), info.get("storage")
    local = Path(study_dir) / "optuna.db"
    if storage and storage.startswith("sqlite:///") and not Path(storage[len("sqlite:///"):]).is_file():
        # a moved or copied study folder: its own optuna.db, never a new empty database
        storage = f"sqlite:///{local.resolve()}" if local.is_file() else None
    if not name or not storage:
        print(f"searchmaps.report: warning: no Optuna study to attach the figure to ({study_dir}/study.json "
              f"names none or its database is gone)", file=sys.stderr)
        return False
    try:
        import optuna
        import optuna_dashboard

        study = optuna.load_study(study_name=name, storage=storage)
        optuna_dashboard.save_plotly_graph_object(study, fig, graph_object_id=GRAPH_ID)
    except Exception as exc:  # unreachable server, locked or old database, missing package
        msg = str(exc).splitlines()[0][:200] if str(exc) else ""
        print(f"searchmaps.report: warning: could not attach the Pareto figure to study {name!r} "
              f"({type(exc).__name__}: {msg}); the report is written anyway", file=sys.stderr)
        return False
    return True


def parse_planned(specs, candidates) -> list[tuple[str, str]]:
    """``A:B`` strings (maps or MAP|PE names; ``all:B`` = every other candidate vs B) as
    pairs of candidate names."""
    pairs = []
    for spec in specs or []:
        a, sep, b = str(spec).replace(" ", "").partition(":")
        if not sep or not a or not b:
            raise ReportError(f"--planned takes A:B (e.g. 4,2,1,1:2,2,2,2 or all:1,1,1,1), got {spec!r}")
        b = _resolve_name(b, candidates)
        left = [c for c in sorted(map(str, candidates)) if c != b] if a == "all" else [_resolve_name(a, candidates)]
        pairs += [(x, b) for x in left if (x, b) not in pairs]
    return pairs


def _resolve_name(name: str, candidates) -> str:
    try:
        return resolve_reference(name, candidates)
    except ReportError as exc:
        raise ReportError(str(exc).replace("--reference", "--planned")) from None


def planned_table(planned: pd.DataFrame, method: str, correction: str, alpha: float) -> str:
    """The planned comparisons as a table and one sentence each."""
    head = ["candidate", "vs", "seeds", "Δ val ppl (95 % CI)", f"p ({method})", "p (signflip)",
            f"p corrected ({correction}, {len(planned)} planned)", f"significant at α = {alpha:g}"]
    rows = []
    for r in planned.itertuples(index=False):
        better = "better" if r.mean_diff < 0 else "worse"
        verdict = f"yes: {better}" if r.significant else "no"
        cells = [f"<code>{html.escape(r.candidate)}</code>", f"<code>{html.escape(r.against)}</code>",
                 str(r.n_pairs), f"{r.mean_diff:+.3g} ({r.diff_ci_low:+.3g} to {r.diff_ci_high:+.3g})",
                 fmt_p(r.p_value), fmt_p(r.p_signflip), fmt_p(r.p_adjusted), verdict]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "\n".join(rows) + "</tbody></table>")


def write_report(study_dir, alpha: float = 0.05, method: str = "ttest", correction: str = "holm",
                 reference: str | None = None, attach: bool = True, planned=None) -> Path:
    """Write ``summary.csv`` and ``report.html`` into ``study_dir`` (and attach the Pareto
    figure to the Optuna study); returns the path of ``report.html``. Raises
    :class:`ReportError` on unusable input or settings."""
    if not 0 < alpha < 1:
        raise ReportError(f"--alpha must be between 0 and 1, got {alpha}")
    if method not in stats.METHODS:
        raise ReportError(f"--test must be one of {', '.join(stats.METHODS)}, got {method!r}")
    if correction not in CORRECTIONS:
        raise ReportError(f"--correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    study_dir = Path(study_dir)
    runs, info = load_study(study_dir)
    ok = successful(runs)
    if ok.empty:
        errs = first_errors(runs)
        first = f"; first error: {next(iter(errs.values()))[:150]}" if errs else ""
        raise ReportError(f"{study_dir / 'runs.csv'} has no successful runs ({len(runs)} rows{first}); "
                          f"fix the cause and run the search again")
    ref = resolve_reference(reference, ok["candidate"].unique())
    res = stats.analyze(ok, metric=METRIC, reference=ref, alpha=alpha, method=method, correction=correction)
    second_name = "signflip" if method == "ttest" else "ttest"
    second = stats.pairwise_pvalues(ok, METRIC, method=second_name, correction=correction) \
        if ok["candidate"].nunique() > 1 else None
    summary = build_summary(runs, ok, res, second, second_name)
    summary.to_csv(study_dir / "summary.csv", index=False)
    # planned comparisons: given here, or pre-registered with the search (study.json)
    pairs = parse_planned(planned if planned is not None else info.get("planned"), ok["candidate"].unique())
    planned_df = stats.planned_comparisons(ok, pairs, METRIC, method=method, correction=correction, alpha=alpha) \
        if pairs else None
    if planned_df is not None:
        planned_df.to_csv(study_dir / "planned.csv", index=False)

    name = info.get("study") or study_dir.name
    result = result_sentences(summary, res["best"], res["reference"], alpha, first_errors(runs), res["family_size"])
    protocol = protocol_sentences(info, runs, ok, res, second_name, correction)
    pareto = pareto_figure(summary, info.get("budget_flops"), res["reference"],
                           f"{name}: validation perplexity vs forward FLOPs per token")
    figures = [("Pareto front", pareto,
                "Lower and further left is better. Red stars: the top group (not significantly worse than the best); "
                "blue rings joined by the dotted step line: Pareto-optimal maps; dashed line: the FLOP budget. "
                "Error bars are each candidate's own CI; the tests are paired on seed, so differences can be "
                "significant where bars overlap. Maps with equal FLOPs are spread slightly sideways; hover for "
                "exact FLOPs, seeds and p-values.")]
    order = [c for c in summary["candidate"] if c in set(ok["candidate"])]
    if len(order) > 1:
        figures.append(("Significance matrix", significance_figure(res["pairwise"], order, alpha),
                        f"Corrected p-value of every pair ({res['method']}, {correction} over all pairs; the "
                        f"{second_name} p-values are in summary.csv); "
                        f"dark cells differ at α = {alpha:g}. Rows and columns are ordered best first."))
    curves = curve_table(ok)
    if not curves.empty:
        figures.append(("Learning curves", curves_figure(curves, summary, res["reference"]),
                        "Validation loss during training, mean over seeds; the top group and the baseline are "
                        "drawn solid with a ± 1 sd band, the rest dotted. Click a legend entry to hide or show it."))
    table = ranking_table(summary, second_name)
    if planned_df is not None:
        table += (f"<h2>Planned comparisons</h2><p class=caption>Hypotheses named before the results "
                  f"(--planned), each a paired test, corrected over these {len(planned_df)} only; "
                  f"Δ is the first minus the second (negative: the first has lower perplexity).</p>"
                  + planned_table(planned_df, method, correction, alpha))
    page = render_page(f"Reuse-map search: {name}", result, figures, table, protocol, failures_table(runs))
    out = study_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    if attach:
        attach_figure(info, study_dir, pareto)
    return out


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="searchmaps.report", description="Write summary.csv and report.html for a study folder.")
    p.add_argument("study_dir", help="results/<study>, as written by searchmaps.run")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    p.add_argument("--test", choices=stats.METHODS, default="ttest",
                   help="paired test (default ttest; the other of ttest/signflip is shown beside it)")
    p.add_argument("--correction", choices=CORRECTIONS, default="holm", help="over all candidate pairs (default holm)")
    p.add_argument("--reference", default=None, help="baseline MAP or MAP|PE (default: the all-ones map)")
    p.add_argument("--no-attach", action="store_true", help="do not attach the figure to the Optuna study")
    p.add_argument("--planned", nargs="+", default=None, metavar="A:B",
                   help="pre-specified comparisons, e.g. 4,2,1,1:2,2,2,2 all:1,1,1,1, corrected over these only "
                        "(default: those given to searchmaps.run --planned)")
    args = p.parse_args(argv)
    try:
        path = write_report(args.study_dir, alpha=args.alpha, method=args.test, correction=args.correction,
                            reference=args.reference, attach=not args.no_attach, planned=args.planned)
    except ReportError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
