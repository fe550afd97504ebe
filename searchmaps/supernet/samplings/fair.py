"""Strictly fair sampling (``--sampling fair``, after FairNAS, Chu et al. 2021): every
layer's repeat count is trained equally often.

Each layer ``i`` may repeat any value ``C_i`` that some feasible per-layer map gives it.
Steps come in blocks of ``B = lcm(|C_1|, ..., |C_n|)``: layer ``i``'s column of the block
is ``B / |C_i|`` random permutations of ``C_i`` end to end, and the block's ``k``-th step
runs the map made of every column's ``k``-th value, so over a block each layer runs each
of its values exactly ``B / |C_i|`` times (FairNAS: one permutation per layer, every
layer having the same number of choices).

Drawn that way a combined map may be infeasible (over the FLOP budget, or not in a listed
space), so the block is drawn step by step instead, with the same guarantee where every
combination is feasible: each step runs a map drawn **uniformly among the feasible maps
whose every value still has quota left in the block** (layer ``i``: ``B / |C_i|`` runs of
each value). In a product space (every combination feasible, as ``ilr4`` within 1.2e7
FLOPs/token) such a map always exists, so every block is exactly balanced. In a budgeted
or listed space a block can get stuck (no feasible map fits the quota left); it is drawn
again, up to 20 times, and then completed with the feasible maps that exceed the fewest
layers' quotas (ties at random): every step runs a feasible map, and the counts are as
even as the space lets this greedy rule make them.

``block:k`` maps (the whole stack repeated) have no per-layer values: a step runs one of
them (uniformly) with their share of the feasible maps, as under uniform sampling, the
fair blocks filling the other steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...config import ReuseMap
from .base import Sampling


def layer_choices(maps: Sequence[ReuseMap]) -> list[list[int]]:
    """Each layer's repeat values among the per-layer (non-block) maps, ascending."""
    ilr = [m.repeats for m in maps if not m.is_block]
    if not ilr:
        return []
    return [sorted({r[i] for r in ilr}) for i in range(len(ilr[0]))]


def block_length(choices: list[list[int]]) -> int:
    return math.lcm(*(len(c) for c in choices)) if choices else 0


def fair_block(choices: list[list[int]], feasible: np.ndarray, rng: np.random.Generator,
               restarts: int = 20) -> list[tuple]:
    """One block of ``B`` feasible steps (repeat tuples; ``feasible``: the feasible per-layer
    maps as rows). Each step draws uniformly among the feasible maps whose every value still
    has quota left in the block (layer ``i``'s quota: ``B / |C_i|`` per value). A block that
    gets stuck is drawn again (``restarts`` times); then its stuck steps take the feasible
    maps that exceed the fewest layers' quotas (ties at random)."""
    b, n = block_length(choices), len(choices)
    index = [{v: j for j, v in enumerate(c)} for c in choices]
    cols = np.stack([np.array([index[i][v] for v in feasible[:, i]]) for i in range(n)], axis=1)  # value indices
    full = np.array([[b // len(c)] * max(len(c) for c in choices) for c in choices])

    def draw(relax: bool):
        quota, rows = full.copy(), []
        for _ in range(b):
            over = (quota[np.arange(n), cols] <= 0).sum(axis=1)  # layers whose value is used up, per map
            best = over.min()
            if best and not relax:
                return None
            pool = np.flatnonzero(over == best)
            k = int(pool[rng.integers(len(pool))])
            quota[np.arange(n), cols[k]] -= 1
            rows.append(tuple(int(v) for v in feasible[k]))
        return rows

    for _ in range(restarts):
        rows = draw(relax=False)
        if rows is not None:
            return rows
    return draw(relax=True)


def fair_sequence(maps: Sequence[ReuseMap], steps: int, rng: np.random.Generator) -> list[ReuseMap]:
    """The map of each of ``steps`` training steps: fair blocks of the per-layer maps, with
    the ``block:k`` maps interleaved at their share of ``maps``."""
    maps = list(maps)
    blocks = [m for m in maps if m.is_block]
    choices = layer_choices(maps)
    if not choices:  # block maps only: nothing per layer to balance
        return [blocks[i] for i in rng.integers(0, len(blocks), size=steps)]
    feasible = np.array(sorted({m.repeats for m in maps if not m.is_block}))
    share = len(blocks) / len(maps)
    out: list[ReuseMap] = []
    while len(out) < steps:
        for r in fair_block(choices, feasible, rng):
            while blocks and rng.random() < share:
                out.append(blocks[int(rng.integers(len(blocks)))])
            out.append(ReuseMap(r))
    return out[:steps]


class Fair(Sampling):
    """``--sampling fair``: the module's rule; its expected cost is the mean over a long fair
    sequence (the record counts the maps that ran)."""

    name = "fair"

    def sequence(self, maps, steps, seed, cost=None):
        return fair_sequence(maps, steps, np.random.default_rng([seed, 0xFA]))

    def expected_cost(self, maps, cost):
        return float(np.mean([cost[m] for m in self.sequence(maps, 2000, 0)]))
