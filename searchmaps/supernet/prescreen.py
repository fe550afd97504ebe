"""The supernet as a prescreen of a search (``searchmaps.run --prescreen supernet``): score
every feasible map with a supernet's weights, then keep only the best for the seeded
stand-alone study. Functions over a :class:`~searchmaps.plan.SearchPlan`; the commands call
them, they never read flags."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable

from ..config import Candidate, ConfigError, ReuseMap, TrialSpec
from ..plan import SearchPlan
from . import ensure_scores
from .method import SupernetMethod


def supernet_specs(plan: SearchPlan, seeds: int, lr: float | None = None, first: int = 0) -> list[TrialSpec]:
    """One training spec per supernet seed (``first``, ``first + 1``, ...): the plan's
    protocol (at ``lr``; None: the plan's rate), validated on its cheapest map."""
    return [plan.spec(Candidate(plan.cheapest_map, plan.pes[0], plan.kv_shares[0]), seed, lr) for seed in range(first, first + seeds)]


def supernet_scores(plan: SearchPlan, seeds: int, method: SupernetMethod = SupernetMethod(), progress: bool = True,
                    log: Callable[[str], None] = lambda text: print(text, file=sys.stderr), lr: float | None = None,
                    info: dict | None = None, columns: dict | None = None):
    """Train (or read back) the plan's supernet, one per seed, trained by ``method``, and score
    every feasible map: :func:`searchmaps.supernet.ensure_scores` in the plan's study folder
    (``info``, ``columns``: its own)."""
    return ensure_scores(plan.study_dir, plan.space, plan.budget_flops, supernet_specs(plan, seeds, lr), method,
                         workers=plan.resources.workers, progress=progress, log=log, info=info, columns=columns)


def check_prescreen(plan: SearchPlan) -> None:
    """A prescreen picks the maps itself, for one PE and one memory-sharing setting."""
    if plan.maps or len(plan.pes) > 1:
        raise ConfigError("--prescreen chooses the maps itself for one PE: drop --maps, give one --pe")
    if len(plan.kv_shares) > 1:
        raise ConfigError("--prescreen chooses the maps itself for one memory-sharing setting: give one --kv-share")


def prescreen(plan: SearchPlan, keep: int, seeds: int, method: SupernetMethod = SupernetMethod(), progress: bool = True,
              log: Callable[[str], None] = lambda text: print(text, file=sys.stderr)) -> SearchPlan:
    """Train (or read back) the supernet over every feasible map and narrow the plan to the
    ``keep`` maps it scores best, plus the baseline when it is feasible; writes
    ``prescreen.json`` in the study folder (which must exist)."""
    check_prescreen(plan)
    scores = supernet_scores(plan, seeds, method, progress=progress, log=log)
    ranked = scores.groupby("map")["val_loss"].mean().sort_values(kind="stable")
    kept = [ReuseMap.parse(m, plan.space.model.n_layers) for m in ranked.index[:keep]]
    # the all-ones map when the space admits it -- not plan.baseline(), which asks whether
    # the (perhaps randomly sampled) candidates of the un-narrowed plan hold it
    base = ReuseMap.baseline(plan.space.model.n_layers)
    with_base = plan.feasible(Candidate(base, plan.pes[0], plan.kv_shares[0])) and base not in kept
    if with_base:
        kept.append(base)
    info = {"kind": "supernet", "keep": keep, "seeds": seeds, "sampling": method.sampling,
            "distill": method.distill, "baseline": with_base, "maps_scored": int(ranked.size)}
    if method.split != "none":
        info.update(split=method.split, split_budget=method.split_budget)
    (plan.study_dir / "prescreen.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"prescreen: the supernet scored {ranked.size} maps; keeping {', '.join(map(str, kept))}")
    return dataclasses.replace(plan, maps=tuple(kept), sampler="grid", trials=None)  # every kept map
