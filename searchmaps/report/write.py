"""One call from a study folder to its report: statistics, ``summary.csv``, ``planned.csv``
and ``report.html``, each written atomically (a reader, or a crash, sees the old file or
the new one, never half of one). Attaching the figure to the Optuna study is the
caller's business (:func:`searchmaps.study.attach_figure`): this package knows no Optuna.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import stats, topgroup
from ..results import atomic_write_text, last_horizon, records_frame, successful
from . import horizons, supernet, tuning
from .figures import curves_figure, pareto_figure, separated_front, significance_figure
from .page import failures_table, planned_table, ranking_table, render_page
from .sentences import (
    cannot_reject_sentence,
    family_label,
    family_sentences,
    noise_sentence,
    protocol_sentences,
    readmitted_sentence,
    result_sentences,
)
from .summary import (
    METRIC,
    ReportError,
    build_summary,
    candidates,
    curve_table,
    first_errors,
    load_info,
    load_runs,
    resolve_planned,
    resolve_reference,
    with_all_pairs,
)


@dataclass(frozen=True, eq=False)
class Report:
    """What :func:`write_report` wrote and what a caller may still want from it."""

    path: Path  # report.html
    summary: pd.DataFrame  # the rows of summary.csv
    planned: pd.DataFrame | None  # the rows of planned.csv; None without planned comparisons
    pareto_figure: object  # plotly Figure, for optuna-dashboard
    info: dict  # study.json ({} without one)
    warnings: tuple[str, ...]  # one line each, also at the top of the page
    planning: dict | None = None  # --target-effect: the seeds the top-group rule needs


def _check_settings(alpha: float, method: str, correction: str) -> None:
    if not 0 < alpha < 1:
        raise ReportError(f"--alpha must be between 0 and 1, got {alpha}")
    if method not in stats.METHODS:
        raise ReportError(f"--test must be one of {', '.join(stats.METHODS)}, got {method!r}")
    if correction == "fdr_bh":
        raise ReportError("--correction fdr_bh is refused: the top group needs family-wise control, and "
                          "Benjamini-Hochberg drops a map as good as the best from it in about 1 study in 6 "
                          "(5 equal and 6 worse maps); use holm (the default) or bonferroni")
    if correction not in stats.FAMILY_WISE:
        raise ReportError(f"--correction must be one of {', '.join(stats.FAMILY_WISE)}, got {correction!r}")


def write_report(study_dir, alpha: float = 0.05, method: str = "ttest", correction: str = "holm",
                 reference: str | None = None, planned=None, target: float | None = None, rule: str | None = None,
                 target_effect: str | None = None, published_sd: float | None = None) -> Report:
    """Write ``summary.csv``, ``report.html`` and (with planned comparisons, given here
    as ``--planned`` specs or registered in study.json) ``planned.csv`` into
    ``study_dir``; the report describes the study's last horizon (see
    :mod:`searchmaps.report.summary`). ``correction`` must be family-wise: holm or
    bonferroni (why: :mod:`searchmaps.stats`). A study trained on a ladder of horizons
    also gets ``stability.csv``, ``scaling.csv``, ``gap_trend.csv`` (with a baseline; and
    ``agreement.csv`` when the space has published numbers) and the horizon section
    (:mod:`searchmaps.report.horizons`), extrapolated to ``target`` (default: study.json's
    ``target``, else the published numbers' horizon, else 10x the longest horizon);
    ``published_sd`` is the seed noise assumed in the published numbers (default:
    study.json's ``published.sd``, else :data:`searchmaps.stability.PUBLISHED_SD`).
    Raises :class:`ReportError` (one line) on unusable input or settings."""
    _check_settings(alpha, method, correction)
    if published_sd is not None and not published_sd >= 0:
        raise ReportError(f"--published-sd must be 0 or more (perplexity, the published numbers' unit), got "
                          f"{published_sd}")
    study_dir = Path(study_dir)
    records = load_runs(study_dir)
    info = load_info(study_dir)
    rule = rule or info.get("top_group_rule") or topgroup.DEFAULT_RULE
    if rule not in topgroup.RULES:
        raise ReportError(f"--top-group must be one of {', '.join(topgroup.RULES)}, got {rule!r}")
    runs = last_horizon(records_frame(records))
    ok = successful(runs)
    if ok.empty:
        errs = first_errors(runs)
        first = f"; first error: {next(iter(errs.values()))[:150]}" if errs else ""
        raise ReportError(f"{study_dir / 'runs.csv'} has no successful runs ({len(runs)} rows{first}); "
                          f"fix the cause and run the search again")
    cands = candidates(records)
    ref = resolve_reference(reference, ok, cands)
    res = topgroup.analyze(ok, metric=METRIC, reference=ref, alpha=alpha, method=method, correction=correction,
                           rule=rule)
    second_name = "signflip" if method == "ttest" else "ttest"
    several = ok["candidate"].nunique() > 1
    second = stats.pairwise_pvalues(ok, METRIC, method=second_name, correction=correction) if several else None
    summary = build_summary(runs, ok, res, second, second_name)
    detail = res["rule_detail"]
    summary["rule_gap"] = summary["candidate"].map(detail.gap)
    summary["rule_allowance"] = summary["candidate"].map(detail.allowance)
    summary["pareto_separated"] = separated_front(summary, res["pairwise"] if several else None, alpha)
    planning = _planning(ok, rule, alpha, target_effect) if target_effect else None
    tuned = tuning.tuning_table(records_frame(records))
    if tuned is not None:
        summary["lr"] = summary["candidate"].map(tuned[tuned["chosen"]].set_index("candidate")["lr"])
    atomic_write_text(study_dir / "summary.csv", summary.to_csv(index=False))

    pairs = resolve_planned(planned if planned is not None else info.get("planned"), ok, cands)
    planned_df = _planned(ok, pairs, res, second_name) if pairs else None
    if planned_df is not None:
        atomic_write_text(study_dir / "planned.csv", planned_df.to_csv(index=False))

    families = [(f"over all {res['family_size']} pairs", res["resolution"])]
    if planned_df is not None:
        families.append((f"over the {len(planned_df)} planned comparisons",
                         stats.resolution(method, int(planned_df["n_pairs"].max()), alpha, len(planned_df))))
    warning = cannot_reject_sentence(method, correction, families, rule)
    warnings = (warning,) if warning else ()

    name = info.get("study") or study_dir.name
    result = result_sentences(summary, res["best"], res["reference"], alpha, first_errors(runs), res["family_size"],
                              detail)
    noise = noise_sentence(topgroup.noise_check(stats.to_matrix(ok, METRIC), rule, alpha)) if several else None
    readmitted = readmitted_sentence(summary, bool(info.get("racing")))
    result += [s for s in (noise, readmitted) if s]
    if planned_df is not None and res["family_size"]:
        result += family_sentences(planned_df, res["family_size"], res)
    pareto = pareto_figure(summary, info.get("budget_flops"), res["reference"],
                           f"{name}: validation perplexity vs forward FLOPs per token", alpha)
    figures = [("Pareto front", pareto,
                "Lower and further left is better. Maps with equal FLOPs share a shaded band headed by their "
                "FLOPs/token, best first; bands run from cheapest to dearest (evenly spaced, not to scale). Red "
                "stars: the top group (not significantly worse than the best). Blue rings on the dotted step line: "
                "the Pareto front as far as the seeds can tell: it starts at the best map of the cheapest FLOPs and "
                "steps to the cheapest map significantly better than the last step (corrected p ≤ "
                f"{alpha:g} in {family_label(res)}), so a dearer map with a lower mean the tests cannot tell apart is "
                "not called optimal (the front on means alone is the pareto_optimal column of summary.csv). Dashed "
                "line: the FLOP budget. Error bars are each "
                "candidate's own CI; the tests are paired on seed, so differences can be significant where bars "
                "overlap. Hover for exact FLOPs, seeds and p-values.")]
    order = [c for c in summary["candidate"] if c in set(ok["candidate"])]
    if several:
        figures.append(("Significance matrix", significance_figure(res["pairwise"], order, alpha),
                        f"p-value of every pair in {family_label(res)} (the {second_name} test's, for the best and "
                        f"the baseline, are in summary.csv); dark cells differ at α = {alpha:g}. Rows and columns are "
                        f"ordered best first."))
    curves = curve_table(ok)
    if not curves.empty:
        figures.append(("Learning curves", curves_figure(curves, summary, res["reference"]),
                        "Validation loss during training, one panel per map in ranking order (★: the top group), "
                        "its mean over seeds with a ± 1 sd band; in every panel the best map's mean (dashed) and the "
                        "baseline's (dotted grey) to read the gap against. Axes are shared."))
    planned_html = ""
    if planned_df is not None:
        planned_html = (f"<h2>Planned comparisons</h2><p class=caption>Hypotheses named before the results "
                        f"(--planned), each a paired test, corrected over these {len(planned_df)} only; "
                        f"Δ is the first minus the second (negative: the first has lower perplexity). The ranking, "
                        f"the significance matrix and the top group use {family_label(res)} instead, so a pair can be "
                        f"significant here and not there, or the reverse: the last column gives each pair's verdict "
                        f"in that family.</p>"
                        + planned_table(planned_df, method, second_name, correction, alpha, res["family_size"],
                                        f"{family_label(res, short=True)}: p" if res.get("family") == "rule"
                                        else None))
    sections = []
    ladder = horizons.analyse(records_frame(records), info, target if target is not None else info.get("target"),
                              alpha, rule=rule, reference=res["reference"], published_sd=published_sd)
    if ladder is not None:
        horizons.write_tables(ladder, study_dir)
        shown = set(res["top_group"]) | {res["reference"]}
        figures += [("Rank vs horizon", horizons.rank_figure(ladder, shown),
                     "Each candidate's rank among those that reached a horizon (1 = best), with a 95 % bootstrap "
                     "interval over seeds; all pairs of horizons, with Kendall's τ and Spearman's ρ, are in "
                     "stability.csv."),
                    ("Loss vs horizon", horizons.scaling_figure(ladder, shown),
                     "Mean validation loss at each horizon with its 95 % CI; dotted: the fitted L(D) = E + A·D^-α, "
                     "drawn on to the target; diamond and bar: its prediction there with a 95 % interval from refits "
                     "on resampled seeds (scaling.csv).")]
        result += horizons.sentences(ladder)
        sections.append(("Ranks by horizon", horizons.table(ladder)))
    if tuned is not None:
        result += tuning.sentences(tuned, records_frame(records))
        sections.append(("Learning rates fitted per map", tuning.section(tuned)))
        atomic_write_text(study_dir / "tuning.csv", tuned.to_csv(index=False))
    scores = supernet.load(study_dir)
    if scores is not None:
        m = supernet.means(scores)
        agreement = supernet.validate(scores, ok, rule, alpha)
        figures.append(("Supernet over the whole space", supernet.pareto_figure(m, supernet.budget_of(info)),
                        "Every feasible map scored with the supernet's shared weights (mean over its seeds; "
                        "supernet.csv); the blue step line is the front of perplexity against FLOPs."))
        if agreement is not None:
            supernet.write_validation(agreement, study_dir, str(scores["sampling"].iloc[0]))
            figures.append(("Supernet vs stand-alone training", supernet.scatter_figure(m, ok),
                            "Each map the study also trained stand-alone: its supernet score against its "
                            "stand-alone validation loss (supernet_validation.csv has τ, ρ, top-group agreement "
                            "and regret)."))
            result.append(supernet.trust_sentence(agreement))
        sections.append(("Supernet", supernet.section(m, agreement, info)))
    if planning is not None:
        result.append(planning["sentence"])
    page = render_page(f"Reuse-map search: {name}", result, figures, ranking_table(summary, second_name),
                       planned_html, protocol_sentences(info, runs, ok, res, second_name, correction,
                                          _configs(records, ok)),
                       failures_table(runs), list(warnings), sections)
    out = study_dir / "report.html"
    atomic_write_text(out, page)
    return Report(path=out, summary=summary, planned=planned_df, pareto_figure=pareto, info=info,
                  warnings=warnings, planning=planning)


def _configs(records, ok: pd.DataFrame) -> list[dict]:
    """The configs of the rows ``ok`` describes, in its order (with ``device`` from the record)."""
    by_id = {r.run_id: r for r in records}
    return [{**by_id[i].config, "device": by_id[i].device or by_id[i].config.get("device")} for i in ok["run_id"]]


def parse_effect(text: str, best_mean: float) -> float:
    """``--target-effect``: ``1%`` of the best mean validation loss, or a loss difference in nats."""
    t = str(text).strip()
    try:
        value = float(t[:-1]) * best_mean / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ReportError(f"--target-effect takes a validation-loss difference in nats like 0.02 or a share of the best "
                          f"mean loss like 1%, got {text!r}") from None
    if not value > 0:
        raise ReportError(f"--target-effect must be positive, got {text!r}")
    return value


def _planning(ok: pd.DataFrame, rule: str, alpha: float, target_effect: str) -> dict:
    """How many seeds ``rule`` needs to rule out a map ``target_effect`` worse than the
    best with 80 % power, at the study's own residual noise."""
    mat = stats.to_matrix(ok, METRIC)
    effect = parse_effect(target_effect, float(mat.mean().min()))
    most = topgroup.get_rule(rule).max_seeds
    n = topgroup.seeds_needed(mat, effect, rule, alpha, max_seeds=most)
    now = topgroup.detectable_effect(mat, rule, alpha)
    if n is None:
        text = (f"To rule out a map {effect:.3g} nats worse than the best ({target_effect}) with 80 % power, "
                f"the {rule} rule would need more than {most} seeds at this noise.")
    else:
        text = (f"To rule out a map {effect:.3g} nats worse than the best ({target_effect}) with 80 % power, "
                f"the {rule} rule needs {n} seeds at this study's noise (residual sd {now['sd']:.3g}); it has "
                f"{now['n_seeds']}, which resolve {now['mde']:.3g}.")
    return {"effect": effect, "seeds": n, "rule": rule, "sentence": text, "now": now}


def _planned(ok: pd.DataFrame, pairs: list[tuple[str, str]], res: dict, second_name: str) -> pd.DataFrame:
    """The planned comparisons with the second opinion's raw p and each pair's verdict in
    the all-pairs family."""
    kw = dict(metric=METRIC, correction=res["correction"], alpha=res["alpha"])
    out = stats.planned_comparisons(ok, pairs, method=res["method"], **kw)
    out.insert(out.columns.get_loc("p_value") + 1, f"p_{second_name}",
               stats.planned_comparisons(ok, pairs, method=second_name, **kw)["p_value"])
    return with_all_pairs(out, res["pairwise"], res["alpha"])
