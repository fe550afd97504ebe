"""A study's statistics in one call: :func:`analyze` returns one frozen :class:`Analysis`
(the paired tests over every pair, their correction, the summary, and the top group chosen by
a rule); :func:`pairwise_analysis` is its paired-tests half alone."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from .detectable import detectable_difference
from .paired import (all_pairs, best_candidate, check_reference, comparison_table, friedman, pvalue_matrix,
                     require_family_wise, resolution, summarize, to_matrix, top_group_of_pairs)
from .topgroup import DEFAULT_RULE, TopGroup, detectable_effect, get_rule, variance_spread


def pairwise_analysis(df: pd.DataFrame, metric: str = "val_ppl", reference: str | None = None,
                      alpha: float = 0.05, method: str = "ttest", correction: str = "holm", random_state=0,
                      simultaneous: dict | None = None) -> dict:
    """The paired tests' side of :func:`analyze`, as a dict: ``summary``, ``comparisons``,
    ``friedman``, ``best``, ``reference``, ``top_group``, ``pairwise`` and
    ``mde`` (see the functions of the same names; ``mde`` is
    :func:`detectable_difference`), ``resolution`` (:func:`resolution` of ``method``
    over the all-pairs family, at the most seeds any tested pair shares), plus the
    settings used and ``family_size``. ``correction`` must be family-wise. ``simultaneous``
    (``{(a, b): p}``, a top-group rule's own p for every pair:
    :func:`searchmaps.stats.topgroup.simultaneous_pvalues`) replaces the corrected p-values, so
    that the ranking, the matrix and the top group are one family; ``family`` says which."""
    require_family_wise(correction)
    mat = to_matrix(df, metric)
    ref = check_reference(df, mat, reference)
    pairs = all_pairs(mat, method, correction, 0.95, random_state)
    if simultaneous is not None:
        for key, p in simultaneous.items():
            if key in pairs and pairs[key]["n_pairs"] >= 2:
                pairs[key]["p_adjusted"] = float(p)
    shared = [int(r["n_pairs"]) for k, r in pairs.items() if k != "family_size" and r["n_pairs"] >= 2]
    return {
        "metric": metric, "alpha": alpha, "method": method, "correction": correction,
        "family": "rule" if simultaneous is not None else "tests",
        "family_size": pairs["family_size"],
        "summary": summarize(df, metric),
        "comparisons": comparison_table(mat, pairs, ref, alpha),
        "friedman": friedman(df, metric),
        "best": best_candidate(mat),
        "reference": ref,
        "top_group": top_group_of_pairs(mat, pairs, alpha),
        "pairwise": pvalue_matrix(mat, pairs),
        "mde": detectable_difference(df, metric, alpha),
        "resolution": resolution(method, max(shared, default=0), alpha, pairs["family_size"]),
    }


@dataclass(frozen=True, eq=False)
class Analysis:
    """What :func:`analyze` found, the record every report section reads. ``summary``,
    ``comparisons``, ``pairwise`` (the corrected p-value matrix), ``friedman``, ``mde``
    (:func:`~searchmaps.stats.detectable.detectable_difference`) and ``resolution`` are
    :func:`pairwise_analysis`'s; ``top_group`` is the rule's members, ``rule_detail`` its
    :class:`~searchmaps.stats.topgroup.TopGroup`, ``detectable`` its minimum detectable gap
    and ``spread`` the maps' noise spread (:func:`~searchmaps.stats.topgroup.variance_spread`)."""

    metric: str
    alpha: float
    method: str
    correction: str
    family: str  # "rule": the p-values are the rule's simultaneous family; "tests": the corrected tests'
    family_size: int
    summary: pd.DataFrame
    comparisons: pd.DataFrame
    friedman: dict | None
    best: str
    reference: str | None
    top_group: list[str]
    pairwise: pd.DataFrame
    mde: dict
    resolution: dict
    rule: str
    rule_detail: TopGroup
    detectable: dict
    spread: float


def analyze(df: pd.DataFrame, metric: str = "val_ppl", reference: str | None = None, alpha: float = 0.05,
            method: str = "ttest", correction: str = "holm", rule: str = DEFAULT_RULE, random_state=0) -> Analysis:
    """:func:`pairwise_analysis` (pairwise tests, corrections, summary) with the top group
    chosen by ``rule``, as one :class:`Analysis`: ``rule_detail`` (the rule's
    :class:`~searchmaps.stats.topgroup.TopGroup`; for a rule that decides by the study's own
    test, its members are that family's), ``detectable``
    (:func:`~searchmaps.stats.topgroup.detectable_effect` of the rule at the study's seeds) and
    ``spread`` (:func:`~searchmaps.stats.topgroup.variance_spread`)."""
    r = get_rule(rule)
    mat = to_matrix(df, metric)
    family = r.simultaneous_pvalues(mat)
    res = pairwise_analysis(df, metric, reference, alpha, method, correction, random_state, simultaneous=family)
    detail = r.top_group(mat, alpha)
    if r.study_test:  # the all-pairs family of the study's own test (the rule's own is the t-test's)
        detail = dataclasses.replace(detail, members=tuple(res["top_group"]))
    res.update(rule=rule, rule_detail=detail, top_group=list(detail.members),
               detectable=detectable_effect(mat, rule, alpha), spread=variance_spread(mat))
    return Analysis(**res)
