"""One call from a study folder to its report: the statistics, then each section of the
page in order (:mod:`~searchmaps.report.ranking`, :mod:`~searchmaps.report.planned`,
:mod:`~searchmaps.report.horizons`, :mod:`~searchmaps.report.tuning`,
:mod:`~searchmaps.report.supernet`), then every section's files, ``report.md`` and ``report.html``, each
written atomically (a reader, or a crash, sees the old file or the new one, never half of
one) here and nowhere else. Attaching the figure to the Optuna study is the
caller's business (:func:`searchmaps.study.attach_figure`): this package knows no Optuna.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import objectives as objs
from .. import stats
from ..config import ConfigError
from ..results import atomic_write_text, last_horizon, records_frame, successful
from . import compute as equal_compute
from . import exit as exit_section
from . import evaluation, horizons, lead, ranking, supernet, tuning
from . import planned as planned_section
from .figures import separable, separated_front
from .markdown import render_markdown
from .page import render_page
from .section import Section
from .protocol import protocol_sentences
from .sentences import cannot_reject_sentence
from .summary import (
    METRIC,
    ReportError,
    build_summary,
    candidates,
    first_errors,
    load_info,
    load_runs,
    resolve_planned,
    resolve_reference,
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
    if method not in stats.PAIRED_TESTS:
        raise ReportError(f"--test must be one of {', '.join(stats.PAIRED_TESTS)}, got {method!r}")
    rec = stats.CORRECTIONS.get(correction) if isinstance(correction, str) else None
    if rec is not None and rec.refusal:
        raise ReportError(f"--correction {correction} is refused: {rec.refusal}")
    if rec is None or not rec.family_wise:
        family_wise = [k for k, c in stats.CORRECTIONS.items() if c.family_wise]
        raise ReportError(f"--correction must be one of {', '.join(family_wise)}, got {correction!r}")


def write_report(study_dir, alpha: float = 0.05, method: str = "ttest", correction: str = "holm",
                 reference: str | None = None, planned=None, target: float | None = None, rule: str | None = None,
                 target_effect: str | None = None, published_sd: float | None = None) -> Report:
    """Write ``summary.csv``, ``report.md``, ``report.html`` and (with planned comparisons, given here
    as ``--planned`` specs or registered in study.json) ``planned.csv`` into
    ``study_dir``; the report describes the study's last horizon (see
    :mod:`searchmaps.report.summary`). ``correction`` must be family-wise: holm or
    bonferroni (why: :mod:`searchmaps.stats`). A study trained on a ladder of horizons
    also gets ``stability.csv``, ``scaling.csv``, ``gap_trend.csv`` (with a baseline; and
    ``agreement.csv`` when the space has published numbers) and the horizon section
    (:mod:`searchmaps.report.horizons`), extrapolated to ``target`` (default: study.json's
    ``target``, else the published numbers' horizon, else 10x the longest horizon);
    ``published_sd`` is the seed noise assumed in the published numbers (default:
    study.json's ``published.sd``, else :data:`searchmaps.stats.PUBLISHED_SD`). A study
    that fitted learning rates also gets ``tuning.csv``, and one with ``supernet.csv`` and
    stand-alone rows of two of its maps or more ``supernet_validation.csv``. ``rule`` is the
    top-group rule (default: study.json's, else :data:`searchmaps.stats.topgroup.DEFAULT_RULE`);
    ``target_effect`` adds how many seeds that rule needs to rule out a map that much worse
    than the best (:attr:`Report.planning`). Raises :class:`ReportError` (one line) on
    unusable input or settings."""
    _check_settings(alpha, method, correction)
    if published_sd is not None and not published_sd >= 0:
        raise ReportError(f"--published-sd must be 0 or more (perplexity, the published numbers' unit), got "
                          f"{published_sd}")
    study_dir = Path(study_dir)
    records = load_runs(study_dir)
    info = load_info(study_dir)
    rule = rule or info.get("top_group_rule") or stats.DEFAULT_RULE
    if rule not in stats.RULES:
        raise ReportError(f"--top-group must be one of {', '.join(stats.RULES)}, got {rule!r}")
    runs = last_horizon(records_frame(records))
    ok = successful(runs)
    if ok.empty:
        errs = first_errors(runs)
        first = f"; first error: {next(iter(errs.values()))[:150]}" if errs else ""
        raise ReportError(f"{study_dir / 'runs.csv'} has no successful runs ({len(runs)} rows{first}); "
                          f"fix the cause and run the search again")
    cands = candidates(records)
    ref = resolve_reference(reference, ok, cands)
    res = stats.analyze(ok, metric=METRIC, reference=ref, alpha=alpha, method=method, correction=correction,
                        rule=rule)
    second_name = stats.PAIRED_TESTS[method].companion
    several = ok["candidate"].nunique() > 1
    second = stats.pairwise_pvalues(ok, METRIC, method=second_name, correction=correction) if several else None
    try:
        objectives = objs.of_study(info)
    except ConfigError as exc:
        raise ReportError(str(exc)) from None
    summary = build_summary(runs, ok, res, second, second_name, objectives)
    detail = res.rule_detail
    summary["rule_gap"] = summary["candidate"].map(detail.gap)
    summary["rule_allowance"] = summary["candidate"].map(detail.allowance)
    axes = separable(objectives)
    if axes is not None:  # a front of a tested quality against a cost: the seeds decide its steps
        summary["pareto_separated"] = separated_front(summary, res.pairwise if several else None, alpha,
                                                      axes[1].column)
    frame = records_frame(records)
    tuned = tuning.tuning_table(frame)
    if tuned is not None:
        summary["lr"] = summary["candidate"].map(tuned[tuned["chosen"]].set_index("candidate")["lr"])

    pairs = resolve_planned(planned if planned is not None else info.get("planned"), ok, cands)
    planned_df = planned_section.comparisons(ok, pairs, res, second_name) if pairs else None
    families = [(f"over all {res.family_size} pairs", res.resolution)]
    if planned_df is not None:
        families.append((f"over the {len(planned_df)} planned comparisons",
                         stats.resolution(method, int(planned_df["n_pairs"].max()), alpha, len(planned_df))))
    warning = cannot_reject_sentence(method, correction, families, rule)
    warnings = (warning,) if warning else ()

    name = info.get("study") or study_dir.name
    ladder = horizons.horizon_analysis(frame, info, target if target is not None else info.get("target"), alpha,
                                       rule=rule, reference=res.reference, published_sd=published_sd)
    unranked, last = ((lead.unreached(ladder.means), f"{lead.h(ladder.horizons[-1])} {ladder.unit}")
                      if ladder is not None else ({}, ""))
    compute = equal_compute.section(frame, res.reference, alpha, rule, set(res.top_group) | {res.reference})
    said = [lead.ranking_lead(summary, res.best, res.reference, ok, alpha, unranked, last)]
    if compute is None:  # one horizon: the other reading is the same, or out of its reach
        said.append(lead.one_horizon_lead(ok))
    main = ranking.section(summary, runs, ok, res, second_name, alpha, rule, info,
                           f"{name}: {objectives[0].label} vs {objectives[1].label}", unranked, last, said)
    sections = [main]
    if compute is not None:  # a ladder: the maps at equal training FLOPs too, answered next to the ranking
        sections.append(compute)
    if planned_df is not None:
        sections.append(planned_section.section(planned_df, res, second_name))
    if ladder is not None:
        sections.append(horizons.section(ladder, set(res.top_group) | {res.reference}))
    else:
        against = _one_horizon_agreement(ok, info, published_sd)
        if against is not None:
            sections.append(against)
    if tuned is not None:
        sections.append(tuning.section(tuned, frame))
    scores = supernet.load(study_dir)
    if scores is not None:
        sections.append(supernet.section(scores, ok, rule, alpha, info))
    exits = exit_section.section(ok, next((r.config.get("train.exit_tolerance") for r in records
                                           if r.config.get("train.exit_eps")), None))
    if exits is not None:
        sections.append(exits)
    planning = _planning(ok, rule, alpha, target_effect) if target_effect else None
    if planning is not None:
        sections.append(Section(sentences=[planning["sentence"]], heading="Seeds needed"))
    sections.append(evaluation.section(study_dir, records, ok))
    sections.append(ranking.failures(runs))

    for sec in sections:  # every file but the pages, each from the one section that makes it
        for file_name, text in sec.files.items():
            atomic_write_text(study_dir / file_name, text)
    title = f"Reuse-map search: {name}"
    protocol = protocol_sentences(info, runs, ok, res, second_name, correction, _configs(records, ok))
    atomic_write_text(study_dir / "report.md", render_markdown(title, sections, protocol, list(warnings)))
    page = render_page(title, sections, protocol, list(warnings))
    out = study_dir / "report.html"
    atomic_write_text(out, page)
    return Report(path=out, summary=summary, planned=planned_df, pareto_figure=main.figures[0][1], info=info,
                  warnings=warnings, planning=planning)


def _one_horizon_agreement(ok: pd.DataFrame, info: dict, published_sd: float | None) -> Section | None:
    """A study of one horizon whose space carries published numbers: Kendall's τ of its ranked
    maps' means against them, with the interval a ladder's rungs get (``agreement.csv``, one row);
    None without published values or with fewer than three maps in both."""
    published = info.get("published") or {}
    if not published.get("values") or ok.empty:
        return None
    sd = float(published_sd if published_sd is not None else published.get("sd", stats.PUBLISHED_SD))
    table = stats.agreement_with(ok, published["values"], reference_sd=sd)
    if not table["kendall_tau"].notna().any():
        return None
    source = str(published.get("source", ""))
    name = source.split(" (")[0] or "the published ranking"
    return Section(sentences=[horizons.published_sentence(table, source)], heading=f"Against {name}",
                   files={"agreement.csv": table.assign(source=source).to_csv(index=False)})


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
    most = stats.get_rule(rule).max_seeds
    n = stats.seeds_needed(mat, effect, rule, alpha, max_seeds=most)
    now = stats.detectable_effect(mat, rule, alpha)
    if n is None:
        text = (f"To rule out a map {effect:.3g} nats worse than the best ({target_effect}) with 80 % power, "
                f"the {rule} rule would need more than {most} seeds at this noise.")
    else:
        text = (f"To rule out a map {effect:.3g} nats worse than the best ({target_effect}) with 80 % power, "
                f"the {rule} rule needs {n} seeds at this study's noise (residual sd {now['sd']:.3g}); it has "
                f"{now['n_seeds']}, which resolve {now['mde']:.3g}.")
    return {"effect": effect, "seeds": n, "rule": rule, "sentence": text, "now": now}
