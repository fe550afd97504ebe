"""The report's supernet section: every feasible map's score with the shared weights
(``supernet.csv``), its Pareto front over the whole space, and — where the study also has
stand-alone rows for some of those maps — how far the supernet's ranking can be trusted
(``supernet_validation.csv``, a scatter of the two, one sentence): :func:`section`.
A supernet study with no stand-alone rows of its own gets a page of just this
(:func:`write_page`, called by ``python -m searchmaps.supernet``: report.html and report.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .. import stats
from ..results import ResultsError, atomic_write_text
from ..stats import DEFAULT_RULE
from . import evaluation
from .markdown import from_html, render_markdown
from .page import render_page
from .section import Section, code, html_table
from .summary import pareto_optimal


def load(study_dir) -> pd.DataFrame | None:
    """``supernet.csv`` of a study folder (None without one); one row per (map, seed)."""
    path = Path(study_dir) / "supernet.csv"
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path, dtype={"map": str, "pe": str})
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ResultsError(f"{path}: not a supernet.csv ({str(exc).splitlines()[0][:80]})") from None
    missing = {"map", "pe", "seed", "val_loss", "flops_per_token"} - set(df.columns)
    if missing:
        raise ResultsError(f"{path}: no {', '.join(sorted(missing))} column; not written by searchmaps.supernet")
    df["candidate"] = labels(df)
    return df


def labels(scores: pd.DataFrame) -> pd.Series:
    """The candidate label of each ``supernet.csv`` row (``map|pe``, ``|kv_share`` added
    where the supernet shared memory), as a study's rows label theirs."""
    out = scores["map"] + "|" + scores["pe"]
    if "kv_share" in scores:
        out = out + scores["kv_share"].fillna("none").map(lambda k: "" if k == "none" else f"|{k}")
    return out


def means(scores: pd.DataFrame) -> pd.DataFrame:
    """Per map: mean supernet loss over the supernet seeds (and its 95 % t-interval),
    perplexity, FLOPs and KV bytes per token, Pareto membership."""
    from scipy import stats as st

    g = scores.groupby("candidate")
    out = g.agg(map=("map", "first"), pe=("pe", "first"), seeds=("seed", "nunique"), loss=("val_loss", "mean"),
                sd=("val_loss", "std"), flops_per_token=("flops_per_token", "first"),
                kv_bytes_per_token=("kv_bytes_per_token", "first")).reset_index()
    half = st.t.ppf(0.975, (out["seeds"] - 1).clip(lower=1)) * out["sd"].fillna(0) / np.sqrt(out["seeds"])
    out["loss_low"], out["loss_high"] = out["loss"] - half, out["loss"] + half
    out["ppl"] = np.exp(out["loss"])
    out["pareto_optimal"] = pareto_optimal(out["flops_per_token"], out["ppl"])
    return out.sort_values("loss", kind="stable").reset_index(drop=True)


def validate(scores: pd.DataFrame, runs: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> dict | None:
    """:func:`searchmaps.stats.proxy_agreement` of the supernet scores against the
    study's successful stand-alone rows (last horizon); None with fewer than two shared maps."""
    shared = set(scores["candidate"]) & set(runs["candidate"])
    if len(shared) < 2:
        return None
    out = stats.proxy_agreement(scores, runs, "val_loss", rule, alpha)
    if "applied_layers" in scores.columns:
        out["depth_tau"] = depth_tau(scores, runs)
    return out


def depth_tau(scores: pd.DataFrame, runs: pd.DataFrame) -> float:
    """The baseline a supernet must beat: Kendall's τ-b between the shared maps' applied
    layers (fewer ranked better, ties kept) and their stand-alone mean losses."""
    from scipy import stats as st

    depth = scores.groupby("candidate")["applied_layers"].first()
    truth = runs.groupby("candidate")["val_loss"].mean()
    names = sorted(set(depth.index) & set(truth.index))
    return float(st.kendalltau(depth[names].to_numpy(), truth[names].to_numpy()).statistic)


def trust_level(a: dict) -> str:
    """``stand-in`` when τ reaches 80 % of the ceiling with its lower bound above 0.5 (the
    goal of issue 25; without a ceiling, the lower bound alone above 0.6), ``prescreen`` when
    the lower bound is above 0, else ``none``."""
    tau, lo = a["kendall_tau"], a["kendall_tau_low"]
    ceiling = a.get("ceiling_tau", float("nan"))
    if math.isfinite(ceiling):
        good = lo > 0.5 and tau >= 0.8 * ceiling - 1e-9  # 0.8 * 0.75 is 0.6000000000000001
    else:
        good = lo > 0.6
    return "stand-in" if good else "prescreen" if lo > 0 else "none"


def trust_sentence(a: dict) -> str:
    """How far the supernet can be trusted in this study, in one sentence: its τ beside the
    ceiling (the τ between two halves of the stand-alone seeds), top-k overlap and regret."""
    tau, lo, hi = a["kendall_tau"], a["kendall_tau_low"], a["kendall_tau_high"]
    level = {"stand-in": "its ranking can stand in for stand-alone training here",
             "prescreen": "it can prescreen (drop the clearly bad maps) but not rank the good ones",
             "none": "its ranking cannot be trusted here: choose maps by stand-alone training"}[trust_level(a)]
    regret = f"{a['regret']:.3g} nats" + (f" ({a['regret_ppl']:.3g} perplexity)" if "regret_ppl" in a else "")
    if math.isfinite(a.get("regret_low", float("nan"))):
        regret += f", 95 % CI {a['regret_low']:.3g} to {a['regret_high']:.3g} nats"
    pick = "the stand-alone best itself" if a["pick"] == a["truth_best"] else f"`{a['pick']}`"
    k = len(a["top_group"].split(";"))
    ceiling = a.get("ceiling_tau", float("nan"))
    has_ceiling = math.isfinite(ceiling)
    if has_ceiling:
        half = int(a["ceiling_half_seeds"])
        share = f"{tau / ceiling:.0%} of the ceiling {ceiling:.2f}" if ceiling > 0 else f"the ceiling being {ceiling:.2f}"
        head = (f"τ = {tau:.2f} (95 % CI {lo:.2f} to {hi:.2f}), {share} — the τ between two halves of the "
                f"stand-alone seeds ({half} against {half}, mean of {int(a['ceiling_splits'])} splits, "
                f"{a['ceiling_tau_low']:.2f} to {a['ceiling_tau_high']:.2f}"
                + (f"; a perfect ranking against all {int(a['truth_seeds'])} seeds: about {a['ceiling_tau_full']:.2f}"
                   if math.isfinite(a.get("ceiling_tau_full", float("nan"))) and "truth_seeds" in a else "")
                + f"); Spearman's ρ = {a['spearman_rho']:.2f}")
        if math.isfinite(a.get("depth_tau", float("nan"))):
            head += f"; ranking by applied layers alone: τ = {a['depth_tau']:.2f}"
        top = f" (two halves of the seeds: {a['ceiling_top_agreement']:.0%})"
        regret += f"; two halves of the seeds: {a['ceiling_regret']:.3g} nats"
    else:
        head = f"τ = {tau:.2f} (95 % CI {lo:.2f} to {hi:.2f}; Spearman's ρ = {a['spearman_rho']:.2f})"
        top = ""
    return (f"Against stand-alone training of the same {a['n_candidates']} maps, the supernet's ranking has Kendall's "
            f"{head}; its top {k} hold {a['top_agreement']:.0%} of the stand-alone top group{top}; its pick is {pick} "
            f"(regret {regret}): {level}.")


def pareto_figure(m: pd.DataFrame, budget: float | None = None, title: str = "Supernet: every feasible map"):
    """All maps' supernet perplexity against forward FLOPs per token, the front labelled."""
    import plotly.graph_objects as go

    fig = go.Figure()
    rest = m[~m["pareto_optimal"]]
    fig.add_trace(go.Scatter(x=rest["flops_per_token"], y=rest["ppl"], mode="markers", name="maps",
                             marker=dict(size=5, color="#9a9a9a", opacity=0.6), text=rest["candidate"],
                             hovertemplate="%{text}<br>%{x:,} FLOPs/token<br>ppl %{y:.3f}<extra></extra>"))
    front = m[m["pareto_optimal"]].sort_values("flops_per_token")
    fig.add_trace(go.Scatter(x=front["flops_per_token"], y=front["ppl"], mode="lines+markers+text",
                             name="Pareto front", text=front["map"], textposition="top right",
                             line=dict(shape="hv", dash="dot", color="#1f77b4"), marker=dict(size=9, color="#1f77b4"),
                             hovertemplate="%{text}<br>%{x:,} FLOPs/token<br>ppl %{y:.3f}<extra></extra>"))
    if budget:
        fig.add_vline(x=budget, line=dict(dash="dash", color="#555", width=1))
    fig.update_layout(template="plotly_white", font=dict(size=14), height=520, margin=dict(l=70, r=30, t=60, b=60),
                      title=f"{title} ({len(m)} maps, mean over {int(m['seeds'].max())} supernet seeds)")
    fig.update_xaxes(title="forward FLOPs per token", tickformat=",")
    fig.update_yaxes(title="validation perplexity with the shared weights")
    return fig


def scatter_figure(m: pd.DataFrame, runs: pd.DataFrame):
    """Supernet score (x) against stand-alone validation loss (y), 95 % intervals on both."""
    import plotly.graph_objects as go
    from scipy import stats as st

    g = runs.groupby("candidate")["val_loss"].agg(["mean", "std", "count"])
    g["half"] = st.t.ppf(0.975, (g["count"] - 1).clip(lower=1)) * g["std"].fillna(0) / np.sqrt(g["count"])
    both = m.set_index("candidate").join(g, how="inner")
    fig = go.Figure(go.Scatter(
        x=both["loss"], y=both["mean"], mode="markers+text", text=both["map"], textposition="top center",
        marker=dict(size=9, color="#d62728"),
        error_x=dict(type="data", symmetric=False, array=both["loss_high"] - both["loss"],
                     arrayminus=both["loss"] - both["loss_low"], thickness=1),
        error_y=dict(type="data", array=both["half"], thickness=1),
        hovertemplate="%{text}<br>supernet %{x:.4f}<br>stand-alone %{y:.4f}<extra></extra>"))
    fig.update_layout(template="plotly_white", font=dict(size=14), height=520, margin=dict(l=70, r=30, t=60, b=60),
                      title="Supernet score vs stand-alone training (validation loss, 95 % intervals)")
    fig.update_xaxes(title="supernet validation loss (nats/token)")
    fig.update_yaxes(title="stand-alone validation loss (nats/token)")
    return fig


def table(m: pd.DataFrame, info: dict) -> str:
    """What the supernet was (a prescreen, from ``info``) and the ten maps it ranks best, as HTML."""
    n_maps = len(m)
    top = m.head(10)
    prescreen = info.get("prescreen") or {}
    head = ""
    if prescreen:
        head = (f"<p>Prescreen: a supernet trained over all {n_maps} feasible maps ({prescreen.get('sampling')} "
                f"sampling{', in-place distillation' if prescreen.get('distill') else ''}, "
                f"{prescreen.get('seeds')} seed(s)) kept the {prescreen.get('keep')} it scored best"
                f"{' plus the baseline' if prescreen.get('baseline') else ''}; the rest of this report is about those.</p>")
    rows = [[str(i + 1), code(r.map), f"{r.ppl:.3f}", f"{r.flops_per_token:,.0f}", "✓" if r.pareto_optimal else ""]
            for i, r in enumerate(top.itertuples())]
    return (head + html_table(["#", "map", "supernet ppl", "FLOPs/token", "Pareto"], rows)
            + f"<p class=caption>The ten maps the supernet scores best of {n_maps}; every map is in supernet.csv.</p>")


def method_sentences(scores: pd.DataFrame, info: dict | None = None) -> list[str]:
    """How the supernet was trained and scored beyond its sampling — in-place distillation,
    per-map fine-tunes (their cost added to the training's), a fitted learning rate (the
    tuning's cost from ``info``, the folder's ``supernet.json``) — from ``supernet.csv``'s
    method columns; nothing for a supernet without them."""
    out = []
    if "distill" in scores and scores["distill"].fillna(False).astype(bool).any():
        teacher = scores["teacher"].dropna().astype(str)
        out.append(f"In-place distillation: every step trained the deepest map `{teacher.iloc[0] if len(teacher) else '?'}` "
                   f"on the labels and the step's other maps on its predicted distribution (KL), in one update.")
    if "finetune_flops" in scores and scores["finetune_flops"].fillna(0).gt(0).any():
        per_seed = scores.groupby("seed").agg(train=("supernet_train_flops", "first"), ft=("finetune_flops", "sum"),
                                              ft_s=("finetune_s", "sum"), tokens=("finetune_tokens", "max"))
        out.append(f"Each map was fine-tuned {int(per_seed['tokens'].max()):,} tokens from the shared weights before it "
                   f"was scored: {per_seed['ft'].mean():.3g} FLOPs and {per_seed['ft_s'].mean():.0f} s per seed over "
                   f"all maps; with the training's, {(per_seed['train'] + per_seed['ft']).mean():.3g} FLOPs per seed.")
    if "lr_grid" in scores and scores["lr_grid"].notna().any():
        grid = str(scores["lr_grid"].dropna().iloc[0])
        cost = (info or {}).get("tuning_flops")
        out.append(f"Learning rate {scores['lr'].iloc[0]:g}, fitted for the supernet over {grid} on tuning seeds (the "
                   f"lowest mean score over the maps)" + (f"; the tuning cost {float(cost):.3g} FLOPs in all." if cost
                                                          else "."))
    return out


def validation_file(agreement: dict, sampling: str) -> dict[str, str]:
    """``supernet_validation.csv``: one row, the sampling and :func:`validate`'s numbers."""
    return {"supernet_validation.csv": pd.DataFrame([{"sampling": sampling, **agreement}]).to_csv(index=False)}


def section(scores: pd.DataFrame, ok: pd.DataFrame, rule: str, alpha: float, info: dict) -> Section:
    """The supernet section of a study with ``supernet.csv`` (``scores``, :func:`load`):
    the front over the whole space, the ten best maps and, where ``ok`` (the stand-alone
    rows the statistics use) shares two maps or more with it, the scatter, the trust
    sentence and ``supernet_validation.csv``."""
    m = means(scores)
    agreement = validate(scores, ok, rule, alpha)
    out = Section(heading="Supernet", figures=[("Supernet over the whole space", pareto_figure(m, budget_of(info)),
                            "Every feasible map scored with the supernet's shared weights (mean over its seeds; "
                            "supernet.csv); the blue step line is the front of perplexity against FLOPs.")])
    if agreement is not None:
        out.files.update(validation_file(agreement, str(scores["sampling"].iloc[0])))
        out.figures.append(("Supernet vs stand-alone training", scatter_figure(m, ok),
                            "Each map the study also trained stand-alone: its supernet score against its "
                            "stand-alone validation loss (supernet_validation.csv has τ, ρ, top-group agreement "
                            "and regret)."))
        out.sentences.append(trust_sentence(agreement))
    out.sentences.extend(method_sentences(scores))
    out.tables.append(("Supernet", table(m, info)))
    return out


def budget_of(info: dict) -> float | None:
    b = info.get("budget_flops")
    return float(b) if b and math.isfinite(float(b)) else None


def write_page(study_dir, scores: pd.DataFrame, truth: pd.DataFrame | None = None, against: str | None = None,
               rule: str = DEFAULT_RULE, alpha: float = 0.05, budget: float | None = None,
               extra: dict | None = None) -> Path:
    """``report.html`` and ``report.md`` of a supernet study folder (no stand-alone rows of its own): the
    Pareto front over the whole space and, with ``truth`` (the stand-alone rows of the
    study ``against``), the scatter, the trust sentence and ``supernet_validation.csv``
    (``extra``: columns added to it, e.g. the landmarks of ``--landmarks``, which the page
    states)."""
    study_dir = Path(study_dir)
    m = means(scores)
    agreement = validate(scores, truth, rule, alpha) if truth is not None else None
    figures = [("Supernet over the whole space", pareto_figure(m, budget),
                "Every feasible map scored with the supernet's shared weights (mean over its seeds; supernet.csv); "
                "the blue step line is the front of perplexity against FLOPs.")]
    sampling = str(scores["sampling"].iloc[0])
    result = [f"The supernet ({sampling} sampling, {scores['seed'].nunique()} seed(s)) scores `{m['map'].iloc[0]}` "
              f"best of {len(m)} maps ({m['ppl'].iloc[0]:.3f} perplexity with the shared weights)."]
    files = {}
    if agreement is not None:
        agreement.update(extra or {})
        files = validation_file(agreement, sampling)
        figures.append(("Supernet vs stand-alone training", scatter_figure(m, truth),
                        f"Each map also trained stand-alone in `{against}`: its supernet score against its "
                        f"stand-alone validation loss (supernet_validation.csv has τ, ρ, top-group agreement and "
                        f"regret)."))
        result.append(trust_sentence(agreement))
    elif truth is not None:
        result.append(f"`{against}` shares fewer than two maps with the supernet: no validation.")
    per_seed = scores.groupby("seed").first()
    protocol = [f"Space `{scores['space'].iloc[0]}`: {len(m)} feasible maps"
                + (f" within {budget:.3g} FLOPs/token" if budget else "") + ".",
                f"One supernet per seed ({', '.join(str(s) for s in per_seed.index)}), {sampling} sampling: "
                f"{int(per_seed['supernet_steps'].iloc[0])} steps, {int(per_seed['supernet_tokens'].iloc[0]):,} "
                f"tokens and {per_seed['supernet_train_flops'].mean():.3g} training FLOPs each; training took "
                f"{per_seed['supernet_wall_s'].mean():.0f} s and scoring every map "
                f"{per_seed['score_s'].mean():.0f} s per seed (mean).",
                "Each step of a supernet runs one map (with in-place distillation, the teacher and its students); "
                "every map's score is its mean validation loss with the shared weights on the fixed validation "
                "windows."]
    meta = study_dir / "supernet.json"
    protocol += method_sentences(scores, json.loads(meta.read_text()) if meta.is_file() else None)
    if "supernet_groups" in scores.columns:  # --split depth
        budget_word = {"shared": "the one supernet's budget shared among them",
                       "full": "each the whole budget"}.get(str(scores["split_budget"].iloc[0]), "")
        protocol.append(f"Split by depth: each seed is {int(scores['supernet_groups'].iloc[0])} sub-supernets, one per "
                        f"number of applied layers, {budget_word}; each map is scored by its group's, and the steps, "
                        f"tokens, FLOPs and seconds above are the seed's totals over its groups.")
    if (extra or {}).get("landmarks"):
        protocol.append(f"Scores corrected by {extra['landmarks']} stand-alone landmark(s) "
                        f"({extra['landmark_maps'].replace(';', ', ')}): {extra['landmark_a']:+.4f} "
                        f"{extra['landmark_b']:+.4f} x applied layers (nats), fitted to their stand-alone losses; "
                        f"the validation leaves the landmarks out.")
    if agreement is not None:
        protocol.append(f"Stand-alone truth: the successful last-horizon rows of `{against}` "
                        f"({agreement['truth_seeds']} seeds); its top group by the {rule} rule at α = {alpha}; "
                        f"intervals: 95 % bootstrap over supernet and stand-alone seeds. The ceiling: the τ "
                        f"between the mean losses of two disjoint halves of the stand-alone seeds, over every split "
                        f"(or {stats.N_BOOT} random ones), with the spread over splits.")
    title = f"Supernet: {study_dir.name}"
    sections = [Section(lead=result[:1], sentences=result[1:], heading="Against stand-alone training",
                        figures=figures, top_tables=[("Ranking", table(m, {}))])]
    config = (json.loads(meta.read_text()).get("config") or {}) if meta.is_file() else {}
    scored = evaluation.config_sentence(config, "map, seed and supernet")
    if scored:
        sections.append(Section(sentences=[scored], heading="Evaluation"))
    footer = ('<p class=caption>Every map and seed: <a href="supernet.csv">supernet.csv</a>'
              + ('; the validation: <a href="supernet_validation.csv">supernet_validation.csv</a>'
                 if agreement is not None else "") + ".</p>")
    page = render_page(title, sections, protocol, footer=footer)
    for name, text in files.items():
        atomic_write_text(study_dir / name, text)
    atomic_write_text(study_dir / "report.md",
                      render_markdown(title, sections, protocol, files=from_html(footer),
                                      rebuild="`python -m searchmaps.supernet` with the study's flags rebuilds it"))
    out = study_dir / "report.html"
    atomic_write_text(out, page)
    return out
