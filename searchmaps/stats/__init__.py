"""Statistics, in one room (pure: rows in, numbers and tables out; no files, no plotting).

- :mod:`~searchmaps.stats.procedures`: the paired tests and corrections, one record each
  (:data:`PAIRED_TESTS`, :data:`CORRECTIONS`); :mod:`~searchmaps.stats.paired`: paired tests
  over seeds, corrections, all pairs, planned comparisons; :mod:`~searchmaps.stats.detectable`: the difference the seeds can resolve.
- :mod:`~searchmaps.stats.topgroup`: the rules that pick the top group (one file each in
  ``topgroup/rules/``), their power and the noise check.
- :mod:`~searchmaps.stats.analysis`: :func:`analyze`, a study's statistics as one frozen
  :class:`Analysis` (what the report reads).
- :mod:`~searchmaps.stats.racing`: racing decisions.
- Over a horizon ladder: :mod:`~searchmaps.stats.bootstrap` (the seed bootstrap, intervals,
  :func:`few_seeds`), :mod:`~searchmaps.stats.ranks` (rank agreement across rungs and with a
  published ranking), :mod:`~searchmaps.stats.scaling` (power-law fits, extrapolation, a
  shared floor), :mod:`~searchmaps.stats.gaps` (gap trends, crossings, the gap at the target).
- :mod:`~searchmaps.stats.proxy`: a proxy's (a supernet's) agreement with stand-alone
  training and its split-half ceiling.
- :mod:`~searchmaps.stats.compute`: a ladder's maps read at equal training FLOPs.
- :mod:`~searchmaps.stats.evalnoise`: the evaluation's own noise (a bootstrap over its windows).

Every public name is re-exported here: ``from searchmaps.stats import analyze, race_step``.
"""

from __future__ import annotations

from . import topgroup
from .analysis import Analysis, analyze, pairwise_analysis
from .bootstrap import (COVERAGE_SOURCE, MEASURED_COVERAGE, MIN_COVERAGE, N_BOOT, boot_indices, bootstrap_coverage, cube, few_seeds, interval,
                        measured_coverage,
                        interval_inf, once_per_input, shared_seeds, fit_slope, tau_rho, tau_rho_small)
from .compute import budgets_of, equal_flops, largest_common_budget, loss_at_flops, read_equal_flops
from .evalnoise import eval_noise
from .detectable import detectable_difference, min_detectable_effect
from .gaps import crossings, gap_trend, paired_gap_at_target
from .paired import (FAMILY_WISE, METHODS, adjust_pvalues, all_pairs, best_candidate, check_reference,
                     comparison_table, compare, friedman, min_pvalue, order_by_mean, oriented, paired_test,
                     pairwise_pvalues, planned_comparisons, pvalue_matrix, reference_candidate, require_family_wise,
                     resolution, signflip_pvalues, summarize, to_matrix, top_group_of_pairs, wilcoxon_pvalues)
from .fidelity import proxy_fidelity
from .procedures import CORRECTIONS, PAIRED_TESTS, Correction, PairedTest, correction_of, paired_test_of
from .proxy import full_study_ceiling, proxy_agreement, seed_splits, split_half_agreement
from .racing import race_step
from .ranks import PUBLISHED_SD, agreement_shift, agreement_with, rank_by_rung, rank_stability
from .scaling import (ALPHA_MAX, ALPHA_MIN, bounds_hit, extrapolate, fit_power_law, fit_shared_floor, power_law,
                      predict, shared_floor)
from .topgroup import (DEFAULT_RULE, NOISE_SPREAD, POOLED_RULE, RULES, Rule, TopGroup, check_rule, detectable_effect,
                       get_rule, noise_check, rule_detail, seeds_needed, simultaneous_pvalues, top_group, top_groups,
                       variance_spread)

__all__ = [
    "ALPHA_MAX", "ALPHA_MIN", "Analysis", "CORRECTIONS", "Correction", "DEFAULT_RULE", "FAMILY_WISE", "METHODS", "MEASURED_COVERAGE", "COVERAGE_SOURCE", "MIN_COVERAGE", "NOISE_SPREAD",
    "N_BOOT", "PAIRED_TESTS", "POOLED_RULE", "PairedTest", "PUBLISHED_SD", "RULES", "Rule", "TopGroup", "adjust_pvalues", "agreement_shift",
    "agreement_with", "all_pairs", "analyze", "best_candidate", "boot_indices", "budgets_of", "bootstrap_coverage", "bounds_hit",
    "check_reference", "check_rule", "compare", "correction_of", "comparison_table", "crossings", "cube", "detectable_difference",
    "detectable_effect", "equal_flops", "eval_noise", "extrapolate", "few_seeds", "measured_coverage", "fit_power_law", "fit_shared_floor", "friedman",
    "full_study_ceiling", "gap_trend", "get_rule", "interval", "interval_inf", "largest_common_budget", "loss_at_flops", "read_equal_flops", "min_detectable_effect", "min_pvalue",
    "noise_check", "once_per_input", "order_by_mean", "oriented", "paired_gap_at_target", "paired_test", "paired_test_of", "pairwise_analysis",
    "pairwise_pvalues", "planned_comparisons", "power_law", "predict", "proxy_agreement", "proxy_fidelity", "pvalue_matrix",
    "race_step", "rank_by_rung", "rank_stability", "reference_candidate", "require_family_wise", "resolution",
    "rule_detail", "seed_splits", "seeds_needed", "shared_floor", "shared_seeds", "signflip_pvalues", "simultaneous_pvalues",
    "fit_slope", "split_half_agreement", "summarize", "tau_rho", "tau_rho_small", "to_matrix", "top_group",
    "top_group_of_pairs", "top_groups", "topgroup", "variance_spread", "wilcoxon_pvalues",
]
