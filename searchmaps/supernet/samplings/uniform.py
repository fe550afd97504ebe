"""``--sampling uniform``: every step runs a map drawn uniformly from the feasible maps."""

from __future__ import annotations

import numpy as np

from .base import Sampling


def uniform_draws(maps, steps: int, seed: int) -> list:
    """``steps`` maps drawn uniformly, the stream uniform and sandwich sampling share."""
    rng = np.random.default_rng([seed, 0x5E])
    return [maps[i] for i in rng.integers(0, len(maps), size=steps)]


class Uniform(Sampling):
    name = "uniform"

    def sequence(self, maps, steps, seed, cost=None):
        return uniform_draws(list(maps), steps, seed)
