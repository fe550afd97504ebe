"""The report's main section: the ranking at the study's last horizon.

Its sentences (the result, the seed-noise check, maps a race dropped and the report
readmits), its figures (Pareto front, significance matrix, learning curves), the ranking
table and ``summary.csv``, the one place that file is made. :func:`failures` is the
section of runs that did not finish, shown after every other section's tables.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from .. import stats
from .. import objectives as objs
from .figures import curves_figure, pareto_axes, pareto_figure, significance_figure
from .section import Section, code, html_table
from .sentences import family_label, fmt_mean_ci, noise_sentence, p_eq, readmitted_sentence, result_sentences
from .summary import METRIC, curve_table, first_errors


def ranking_table(summary: pd.DataFrame, second_name: str, objectives=(), alpha: float = 0.05) -> str:
    """One row per candidate of ``summary`` (:func:`~searchmaps.report.summary.build_summary`),
    best first, the top group highlighted, as HTML; a column for each of the study's
    ``objectives`` the table does not show anyway, before the top group. The differences
    are in validation loss (nats, the tests' scale); the ``second_name`` test's p-value is
    shown only where it disagrees with the first at ``alpha`` (all of them: summary.csv)."""
    shown = {"mean", "flops_per_token", "kv_bytes_per_token"}
    extra = [o for o in objectives if o.column not in shown and o.column in summary]
    head = ["#", "candidate", "FLOPs/token", "KV bytes/token", "seeds", "val ppl (mean ± 95 % CI)",
            "Δ loss vs best, nats (corrected p)", "Δ loss vs reference, nats (corrected p)", *(o.short for o in extra), "top group",
            "Pareto front"]

    def delta(d, p, p2):
        if not np.isfinite(d):
            return "–"
        if not np.isfinite(p):
            return "0 (itself)"
        out = f"{d:+.3g} ({html.escape(p_eq(p))})"
        if np.isfinite(p2) and (p <= alpha) != (p2 <= alpha):  # the two tests disagree: show it
            out += f"<br><small>{second_name} disagrees: {html.escape(p_eq(p2))}</small>"
        return out

    def front(r) -> str:  # the front the seeds separate; one on means alone says so
        if r.get("pareto_separated", r["pareto_optimal"]):
            return "✓"
        return "<small>on means only</small>" if r["pareto_optimal"] else ""

    rows, classes = [], []
    for i, r in enumerate(summary.to_dict("records"), 1):
        seeds = f"{r['n_seeds']}" + (f" <span class=bad>({r['n_failed']} failed)</span>" if r["n_failed"] else "")
        rows.append([str(i), code(r["candidate"]), f"{r['flops_per_token']:,.0f}",
                     f"{r['kv_bytes_per_token']:,.0f}" if np.isfinite(r["kv_bytes_per_token"]) else "–", seeds,
                     fmt_mean_ci(r["mean"], r["ci_low"], r["ci_high"]) if r["n_seeds"] else "failed",
                     delta(r["diff_to_best"], r["p_vs_best"], r[f"p_vs_best_{second_name}"]),
                     delta(r["diff_to_reference"], r["p_vs_reference"], r[f"p_vs_reference_{second_name}"]),
                     *(o.format(float(r[o.column])) for o in extra), "★" if r["in_top_group"] else "", front(r)])
        classes.append("top" if r["in_top_group"] else "")
    return html_table(head, rows, classes)


def section(summary: pd.DataFrame, runs: pd.DataFrame, ok: pd.DataFrame, res: stats.Analysis, second_name: str,
            alpha: float, rule: str, info: dict, title: str, unranked: dict[str, str] | None = None,
            last: str = "", lead: list[str] = ()) -> Section:
    """The ranking section of ``summary`` (complete: with ``pareto_separated`` where the
    study's objectives have a front the seeds separate and, for a tuned study, ``lr``),
    which it also gives as ``summary.csv``. ``runs`` are the last horizon's rows, ``ok``
    the ones the statistics use, ``res`` their :func:`searchmaps.stats.topgroup.analyze`; the
    Pareto figures plot the study's objectives (study.json's, :mod:`searchmaps.objectives`),
    the first against each other one; ``title`` is the first figure's. ``unranked``
    (candidate -> the horizon it stopped at) are a ladder's maps that never reached its
    last rung ``last``; ``lead`` is the section's share of the result's lead
    (:mod:`~searchmaps.report.lead`). Its sentences fall under "Top group" and "Seed noise"."""
    objectives = objs.of_study(info)
    several = ok["candidate"].nunique() > 1
    detail = res.rule_detail
    said = result_sentences(summary, res.best, res.reference, alpha, first_errors(runs), res.family_size,
                            detail, ok.groupby("candidate")[METRIC].std(ddof=1).to_dict(), unranked, last)
    noise = noise_sentence(stats.noise_check(stats.to_matrix(ok, METRIC), rule, alpha)) if several else None
    readmitted = readmitted_sentence(summary, bool(info.get("racing")))
    said += [readmitted] if readmitted else []
    figures = []
    for i, (y, x) in enumerate(pareto_axes(objectives)):
        fig = pareto_figure(summary, info.get("budget_flops"), res.reference,
                            title if i == 0 else f"{title.split(':')[0]}: {y.label} vs {x.label}", alpha, y=y, x=x)
        if (y.name, x.name) != objs.DEFAULT or "pareto_separated" not in summary:
            better = "lower" if y.sign > 0 else "higher (drawn upside down)"
            figures.append(("Pareto front" if i == 0 else f"Pareto front: {y.short} vs {x.short}", fig,
                            f"y: {y.label} ({y.unit}), {better} is better; x: maps grouped by {x.label} ({x.unit}), "
                            f"best group left, each band headed by its value, best first within it. Red stars: the "
                            f"top group (not significantly worse than the best in validation loss). Blue rings on the "
                            f"dotted step line: the Pareto front of these two objectives"
                            + (" as far as the seeds can tell (corrected p ≤ "
                               f"{alpha:g} in {family_label(res)})" if "pareto_separated" in summary
                               else " on means (the seeds' tests speak for validation loss only)")
                            + "; summary.csv's pareto_optimal column is the front over all the study's objectives "
                              f"({', '.join(o.name for o in objectives)}). Hover for exact values."))
            continue
        figures.append(("Pareto front", fig,
                "Lower and further left is better. Maps with equal FLOPs share a shaded band headed by their "
                "FLOPs/token, best first; bands run from cheapest to dearest (evenly spaced, not to scale). Red "
                "stars: the top group (not significantly worse than the best). Blue rings on the dotted step line: "
                "the Pareto front as far as the seeds can tell: it starts at the best map of the cheapest FLOPs and "
                "steps to the cheapest map significantly better than the last step (corrected p ≤ "
                f"{alpha:g} in {family_label(res)}), so a dearer map with a lower mean the tests cannot tell apart is "
                "not called optimal (the front on means alone is the pareto_optimal column of summary.csv). Dashed "
                "line: the FLOP budget. Error bars are each "
                "candidate's own CI; the tests are paired on seed, so differences can be significant where bars "
                "overlap. Hover for exact FLOPs, seeds and p-values."))
    order = [c for c in summary["candidate"] if c in set(ok["candidate"])]
    if several:
        figures.append(("Significance matrix", significance_figure(res.pairwise, order, alpha),
                        f"p-value of every pair in {family_label(res)} (the {second_name} test's, for the best and "
                        f"the baseline, are in summary.csv); dark cells differ at α = {alpha:g}. Rows and columns are "
                        f"ordered best first."))
    curves = curve_table(ok)
    if not curves.empty:
        figures.append(("Learning curves", curves_figure(curves, summary, res.reference),
                        "Validation loss during training, one panel per map in ranking order (★: the top group), "
                        "its mean over seeds with a ± 1 sd band; in every panel the best map's mean (dashed) and the "
                        "baseline's (dotted grey) to read the gap against. Axes are shared."))
    table = ranking_table(summary, second_name, objectives, alpha)
    return Section.of_parts([("Top group", said), ("Seed noise", [noise] if noise else [])], lead=list(lead),
                            figures=figures, top_tables=[("Ranking", table)],
                            files={"summary.csv": summary.to_csv(index=False)})


def failures(runs: pd.DataFrame) -> Section:
    """Runs that did not finish, one row per candidate and reason (a diverging map fails
    the same way on every seed; one line per seed would bury the protocol); empty when
    every run finished."""
    bad = runs[runs["status"] != "ok"]
    if bad.empty:
        return Section()
    groups = bad.groupby(["candidate", "status", "error"], sort=False)["seed"].apply(lambda x: sorted(x.tolist()))
    rows = [[code(c), ", ".join(map(str, seeds)), html.escape(st), html.escape(str(err))]
            for (c, st, err), seeds in groups.items()]
    return Section(tables=[("Runs that did not finish", html_table(["candidate", "seeds", "status", "error"], rows))])
