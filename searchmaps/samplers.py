"""How a search chooses its candidates: one :class:`Sampler` per ``--sampler`` name, in
:data:`SAMPLERS`. The plan, the study and the command line read this registry; none of
them lists the names again, so a new sampler is one entry here (and the function that
makes it), and ``tests/test_samplers.py`` runs it through a search.

A sampler either walks a fixed candidate list (grid, random: racing and promotion need
one) or is an optimiser that proposes one candidate at a time through Optuna (tpe, nsga2).
Its Optuna sampler is made from the module ``optuna.samplers`` that the study hands over,
so this room never imports Optuna: the plan and the report read the registry without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .config import Candidate
from .objectives import COUNTS
from .spaces import sample_feasible

AUTO = "auto"  # --sampler auto: grid when at most GRID_AUTO_LIMIT candidates fit the budget, else random
GRID_AUTO_LIMIT = 32  # auto: every feasible candidate up to this many, a uniform sample beyond
DEFAULT_TRIALS = 32  # candidates a random or optimiser search trains unless --trials says otherwise


@dataclass(frozen=True)
class Sampler:
    """``optuna(samplers, seed)``: the study's Optuna sampler, given ``optuna.samplers``
    and ``--search-seed``. ``objective_counts``: how many ``--objectives`` it takes (a fixed
    list tells Optuna them too, for the dashboard's front). ``candidates(plan)``: the fixed list the search walks, in order
    (a tuple of :class:`~searchmaps.config.Candidate`); None for an optimiser, whose
    candidates the study asks its Optuna sampler for one by one."""

    name: str
    description: str
    optuna: Callable
    candidates: Callable | None = None
    objective_counts: tuple[int, ...] = COUNTS  # how many --objectives it takes

    @property
    def fixed(self) -> bool:
        """Whether it walks a fixed candidate list (what racing and promotion need)."""
        return self.candidates is not None


def grid_candidates(plan) -> tuple[Candidate, ...]:
    """Every feasible map (or the plan's ``maps``) under every PE and memory-sharing setting,
    cut at ``--trials``."""
    maps = list(plan.maps) or list(plan.feasible_maps)
    cands = [Candidate(m, pe, kv) for pe in plan.pes for kv in plan.kv_shares for m in maps]
    return tuple(cands[: plan.trials] if plan.trials else cands)


def random_candidates(plan) -> tuple[Candidate, ...]:
    """A uniform sample of the feasible maps, seeded by ``--search-seed``; the same sampled
    maps under every PE and memory-sharing setting, so those are compared on equal maps."""
    n = plan.trials or DEFAULT_TRIALS
    rng = np.random.default_rng(plan.search_seed)
    factors = [(pe, kv) for pe in plan.pes for kv in plan.kv_shares]
    maps = sample_feasible(plan.space, plan.budget_flops, math.ceil(n / len(factors)), rng)
    return tuple([Candidate(m, pe, kv) for m in maps for pe, kv in factors][:n])


def _proposes_nothing(samplers, seed: int):
    """A fixed list opens its own trials: the study's sampler is never asked to propose."""
    return samplers.RandomSampler(seed=seed)


def _tpe(samplers, seed: int):
    # constant_liar and multivariate (flagged experimental by Optuna; the study silences the
    # warning) are what lets parallel workers propose different maps
    return samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True)


def _nsga2(samplers, seed: int):
    return samplers.NSGAIISampler(seed=seed)


SAMPLERS: dict[str, Sampler] = {s.name: s for s in (
    Sampler("grid", "every feasible candidate, in order", _proposes_nothing, grid_candidates),
    Sampler("random", "a uniform sample of the feasible maps", _proposes_nothing, random_candidates),
    Sampler("tpe", "Optuna's multivariate TPE on the study's objectives", _tpe),
    Sampler("nsga2", "Optuna's NSGA-II on the study's objectives", _nsga2),
)}
SAMPLER_CHOICES: tuple[str, ...] = (AUTO, *SAMPLERS)  # what --sampler takes


def resolve_auto(n_candidates: int) -> str:
    """The sampler ``auto`` stands for when ``n_candidates`` fit the budget."""
    return "grid" if n_candidates <= GRID_AUTO_LIMIT else "random"


def fixed_names() -> str:
    """The samplers that walk a fixed list, for error messages: ``grid or random``."""
    return " or ".join(name for name, s in SAMPLERS.items() if s.fixed)
