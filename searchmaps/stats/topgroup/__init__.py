"""Rules that answer "which maps could be the best?" with a set, and what they can resolve.

Every rule takes the ``seeds x candidates`` matrix of one metric (lower is better; paired
on seed) and returns the **top group**: the candidates it cannot rule out as the best, as
one :class:`TopGroup` whatever the rule. The family-wise error the project holds them to:
the chance that the group drops ANY map truly as good as the best (all maps equal, or
some tied with the best and the rest worse), at most alpha. ``experiments/calibration/calibration.py``
measures every rule against it.

The rules (:data:`RULES`, name -> :class:`Rule`; one module each in
:mod:`searchmaps.stats.topgroup.rules`, where a new one is one new file):

- ``moderated`` (default, :data:`DEFAULT_RULE`): every candidate against the best on
  their own paired differences, over the seeds the two share (so a raced study's extra
  seeds on the survivors count), each pair's variance moderated towards the others'
  (empirical Bayes) but never below the two maps' own noise, and Tukey's studentized
  range at the pair's degrees of freedom; a pair sharing at most 4 seeds is judged by
  Dunnett's T3 instead (Welch's dof, Šidák's t), because with so few seeds unequal noise
  cannot be told from chance and Tukey's value alone erred in up to 7 % of studies. It
  holds alpha when the maps' seed noise differs, where pooling does not, with nearly hsd's
  power when it does not (from 5 seeds).
- ``hsd``: Tukey's studentized range against the best in the two-way layout (candidate x
  seed), the residual error pooled over every map; calibrated with equally noisy maps
  only.
- ``mcb``: Hsu's multiple comparisons with the best in the same layout; the true best is
  in the group with probability >= 1 - alpha, but it drops SOME map tied with the best far
  more often than alpha.
- ``holm``: paired t-tests of every pair, Holm over all k(k-1)/2.
- ``friedman``: mean ranks within Nemenyi's critical difference of the lowest.

:func:`rule_detail` gives a rule's :class:`TopGroup`, :func:`top_group` its members,
:func:`top_groups` the same decisions for a batch of simulated studies.
:func:`detectable_effect` gives a rule's minimum detectable gap (80 % power) by simulation
and :func:`seeds_needed` how many seeds a rule needs for a given gap, both from the
study's own residual noise; :func:`noise_check` whether the maps' seed noise differs enough to
matter. The whole bundle a report reads is :func:`searchmaps.stats.analyze`.
"""

from __future__ import annotations

import pandas as pd

from . import rules  # noqa: F401  (registers every rule)
from .noise import NOISE_SPREAD, POOLED_RULE, noise_check, spread_by_chance, variance_spread
from .critical import (complete_block, dunnett_critical, fit_f_dist, residual_sd, sidak_t_critical,
                       srange_critical, studentized_range_critical)
from .power import detectable_effect, seeds_needed
from .rule import (DEFAULT_RULE, RULES, Rule, TopGroup, check_rule, get_rule, mde_in_sd, register, rule_detail,
                   top_group, top_groups, unregister)
from .rules.friedman import nemenyi_cd
from .rules.moderated import moderated_pairs, pair_tests


def simultaneous_pvalues(mat: pd.DataFrame, rule: str = DEFAULT_RULE) -> dict | None:
    """Every pair's p-value in ``rule``'s own simultaneous family, keyed ``(a, b)`` as
    :func:`searchmaps.stats.all_pairs` keys them (:meth:`Rule.simultaneous_pvalues`); None
    for a rule that is not a comparison of every pair. A candidate is out of the rule's top
    group exactly when its p against the best is at most alpha, so the ranking, the
    significance matrix and the top group speak with one voice."""
    return get_rule(rule).simultaneous_pvalues(mat)


__all__ = ["DEFAULT_RULE", "NOISE_SPREAD", "POOLED_RULE", "RULES", "Rule", "TopGroup", "check_rule",
           "complete_block", "detectable_effect", "dunnett_critical", "fit_f_dist", "get_rule", "mde_in_sd",
           "moderated_pairs", "nemenyi_cd", "noise_check", "pair_tests", "register", "residual_sd", "rule_detail",
           "seeds_needed", "sidak_t_critical", "simultaneous_pvalues", "spread_by_chance", "srange_critical",
           "studentized_range_critical", "top_group", "top_groups", "unregister", "variance_spread"]
