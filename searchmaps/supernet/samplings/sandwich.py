"""``--sampling sandwich`` (BigNAS, Yu et al. 2020): the cheapest, the most expensive and a
uniformly drawn map in turn, so the extremes are trained throughout; with in-place
distillation (on by default) the cheapest map other than the teacher is a student of every
step and one more is drawn from the rest."""

from __future__ import annotations

import numpy as np

from .base import Sampling
from .uniform import uniform_draws


class Sandwich(Sampling):
    name = "sandwich"
    distills_by_default = True
    groups_refusal = ("--sampling sandwich trains the cheapest and the dearest map in turn, and inside a --split "
                      "depth group every map costs the same: use --sampling uniform or fair with --split depth")

    def sequence(self, maps, steps, seed, cost=None):
        maps = list(maps)
        draws = uniform_draws(maps, steps, seed)
        cost = cost or (lambda m: m.applied_layers)
        low, high = min(maps, key=cost), max(maps, key=cost)
        return [low if t % 3 == 0 else high if t % 3 == 1 else draws[t] for t in range(steps)]

    def expected_cost(self, maps, cost):
        low, high = min(cost.values()), max(cost.values())
        return (low + high + float(np.mean(list(cost.values())))) / 3

    def students(self, others, cost):
        if not others:
            return None, []
        low = min(others, key=lambda m: (cost(m), str(m)))
        return low, [m for m in others if m != low]
