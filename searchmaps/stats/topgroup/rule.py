"""The contract every top-group rule keeps, the one result shape every caller reads, and the
registry that maps a rule's name (``--top-group``) to the rule.

A rule is a :class:`Rule` subclass in its own module under :mod:`searchmaps.stats.topgroup.rules`
that calls :func:`register` on an instance; the registry is filled by importing that
folder, so a new rule is one new file there, and racing, promotion, the CLI choices and
the report find it through :data:`RULES`."""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

DEFAULT_RULE = "moderated"
_REGISTRY: dict[str, Rule] = {}
RULES = types.MappingProxyType(_REGISTRY)  # name -> rule, live and read-only; iterates the names


@dataclass(frozen=True)
class TopGroup:
    """One rule's answer on one ``seeds x candidates`` matrix (lower is better).

    ``members``: the top group, best first. ``gap`` and ``allowance``: candidate -> its gap
    to the best and the gap above which the rule leaves it out (in ``unit``: the metric's,
    or mean rank; NaN allowances for a rule that decides by p-values). ``bound``: the
    allowance when one serves every candidate (a pooled rule's, friedman's critical
    difference), else the largest. ``per_pair``: each candidate is compared with the best
    over the seeds the two share, with its own allowance (else over the seeds every
    candidate has). ``p``: candidate -> its p-value against the best where the rule decides
    by them, else None. ``description``: how the rule decided, one sentence with its
    numbers (in nats: the report's scale), and ``caveat`` a second one where the rule's
    guarantee needs it. ``extra``: the rule's own numbers (constants, dof, ...)."""

    rule: str
    alpha: float
    members: tuple[str, ...]
    best: str
    gap: dict
    allowance: dict
    bound: float
    unit: str
    n_seeds: int
    per_pair: bool
    p: dict | None
    description: str
    caveat: str | None = None
    extra: dict = field(default_factory=dict)


class Rule:
    """A top-group rule. Subclasses set the class attributes and implement
    :meth:`top_group` and :meth:`keep`; :meth:`simultaneous_pvalues` where the rule is a
    simultaneous comparison of every pair.

    ``name``: the ``--top-group`` choice. ``label``: what the report calls it. ``help``:
    the CLI's few words. ``unit``: what its gaps are in (``"metric"`` or ``"mean rank"``).
    ``per_pair``: see :class:`TopGroup`. ``pools_noise``: assumes every map equally noisy.
    ``study_test``: decides by the study's own paired test and correction over every pair
    (racing and the report then use that family). ``max_seeds``: how far
    :func:`~searchmaps.stats.topgroup.power.seeds_needed` searches by default. ``few_seeds``:
    ``(n, text)`` where the calibration benchmark measured the rule erring beyond alpha
    with at most n shared seeds when noise differs by map; the report then says ``text``
    (``moderated`` had one at 3 seeds, "up to 7 %", until it judged pairs sharing at most 4
    seeds by Dunnett's T3 on 2026-12-04; no registered rule has one now)."""

    name: str = ""
    label: str = ""
    help: str = ""
    unit: str = "metric"
    per_pair: bool = False
    pools_noise: bool = False
    study_test: bool = False
    max_seeds: int = 200
    few_seeds: tuple[int, str] | None = None

    def top_group(self, mat: pd.DataFrame, alpha: float = 0.05) -> TopGroup:
        """The rule's answer on a ``seeds x candidates`` matrix."""
        raise NotImplementedError

    def keep(self, x: np.ndarray, alpha: float = 0.05) -> np.ndarray:
        """Which candidates stay in, for a batch of studies ``x`` (studies, seeds, k), as a
        boolean (studies, k): the same decisions as :meth:`top_group` on each study,
        vectorised for calibration and the detectable-effect simulation."""
        raise NotImplementedError

    def simultaneous_pvalues(self, mat: pd.DataFrame) -> dict | None:
        """Every pair's p-value in the rule's own simultaneous family, keyed ``(a, b)`` as
        :func:`searchmaps.stats.all_pairs` keys them, such that a candidate is out of the
        top group exactly when its p against the best is at most alpha; None for a rule
        that is not a comparison of every pair."""
        return None

    def mde_in_sd(self, k: int, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
        """The smallest true gap, in units of the per-map seed noise sd, at which the rule
        leaves a map out with probability ``power`` when the other k - 1 maps are tied with
        the best (:func:`simulated_mde`)."""
        return simulated_mde(self, k, n, alpha, power)

    def __repr__(self) -> str:
        return f"<top-group rule {self.name}>"


def register(rule: Rule) -> Rule:
    """Add ``rule`` to :data:`RULES` under its name; ValueError when the name is taken."""
    if not rule.name or rule.name in _REGISTRY:
        raise ValueError(f"a top-group rule needs a new name, got {rule.name!r}")
    _REGISTRY[rule.name] = rule
    return rule


def unregister(name: str) -> None:
    """Remove a rule from :data:`RULES` (tests that register one of their own)."""
    _REGISTRY.pop(name, None)


def get_rule(rule: str | Rule) -> Rule:
    """The registered rule of that name (a rule passes through); ValueError naming the
    choices otherwise."""
    if isinstance(rule, Rule):
        return rule
    if rule not in _REGISTRY:
        raise ValueError(f"the top-group rule must be one of {', '.join(_REGISTRY)}, got {rule!r}")
    return _REGISTRY[rule]


def check_rule(rule: str) -> str:
    get_rule(rule)
    return rule


def rule_detail(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> TopGroup:
    """``rule``'s :class:`TopGroup` on a ``seeds x candidates`` matrix."""
    return get_rule(rule).top_group(mat, alpha)


def top_group(mat: pd.DataFrame, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> list[str]:
    """The top group of a ``seeds x candidates`` matrix under ``rule``, best first."""
    return list(rule_detail(mat, rule, alpha).members)


def top_groups(x, rule: str = DEFAULT_RULE, alpha: float = 0.05) -> np.ndarray:
    """Which candidates ``rule`` keeps, for a batch of studies ``x`` (studies, seeds, k), as
    a boolean (studies, k) (:meth:`Rule.keep`; the tests check it decides as
    :func:`top_group`). The pooled rules and holm need complete studies here."""
    return get_rule(rule).keep(x, alpha)


# --------------------------------------------------------------------------- power


MDE_SIMS = 1000


@functools.lru_cache(maxsize=1024)
def simulated_mde(rule: Rule, k: int, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true gap, in units of the per-map seed noise sd, at which ``rule``
    leaves a map out of the top group with probability ``power``, when the other k - 1 maps
    are tied with the best (k maps, n seeds each, normal noise, common random numbers from
    a fixed seed, so the same call gives the same number). By simulation through
    :meth:`Rule.keep`, because the textbook formulas (one comparison's noncentral t
    against the rule's constant) ignore that the best is the lowest of k noisy means and
    overstated the gap by 15-57 %. Above 40 seeds it scales the 40-seed value by
    sqrt(40 / n). inf when no gap is detectable (friedman with too few seeds)."""
    if k < 2 or n < 2:
        return float("nan")
    if n > 40:
        return simulated_mde(rule, k, 40, alpha, power) * math.sqrt(40 / n)
    sims = int(max(200, min(MDE_SIMS, 2e7 // (n * k * k))))
    e = np.random.default_rng(20261203).normal(size=(sims, n, k))

    def rate(delta: float) -> float:
        y = e.copy()
        y[:, :, 0] += delta
        return float(np.mean(~rule.keep(y, alpha)[:, 0]))

    hi = 1.0
    while rate(hi) < power:
        hi *= 2
        if hi > 1e3:
            return float("inf")
    lo = 0.0
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(mid) < power else (lo, mid)
    return (lo + hi) / 2


def mde_in_sd(rule: str, k: int, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """``rule``'s :meth:`Rule.mde_in_sd` (:func:`simulated_mde` unless the rule knows
    better)."""
    return get_rule(rule).mde_in_sd(k, n, alpha, power)


# --------------------------------------------------------------------------- words


def sentence(rule: Rule, alpha: float, how: str) -> str:
    """The report's sentence on how ``rule`` chose the top group, ``how`` its own clause."""
    return (f"Top group: the best candidate and every candidate the rule cannot rule out ({rule.label}, "
            f"α = {alpha:g}): {how}")


def span(values) -> str:
    """``0.15 to 0.19``, or one number when they print alike."""
    lo, hi = f"{min(values):.3g}", f"{max(values):.3g}"
    return lo if lo == hi else f"{lo} to {hi}"
