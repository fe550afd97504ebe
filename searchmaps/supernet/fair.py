"""Strictly fair sampling (``--sampling fair``, after FairNAS, Chu et al. 2021): every
layer's repeat count is trained equally often.

Each layer ``i`` may repeat any value ``C_i`` that some feasible per-layer map gives it.
Steps come in blocks of ``B = lcm(|C_1|, ..., |C_n|)``: layer ``i``'s column of the block
is ``B / |C_i|`` random permutations of ``C_i`` end to end, and the block's ``k``-th step
runs the map made of every column's ``k``-th value, so over a block each layer runs each
of its values exactly ``B / |C_i|`` times (FairNAS: one permutation per layer, every
layer having the same number of choices).

A combined map may be infeasible (over the FLOP budget, or not in a listed space). Then
the block is **repaired by swaps inside a column**, which keep every layer's counts: a
random infeasible step swaps one layer's value with another step of the block, kept when
the two steps hold no more infeasible maps than before (up to ``50 x B x n`` tries). In a
product space (every combination feasible, as ``ilr4`` within 1.2e7 FLOPs/token) nothing
is repaired; in a budgeted space the swaps find an exactly balanced block whenever one
exists in practice. A step still infeasible after the tries runs the feasible map whose
values this block has trained least (sum over layers of how often each of its values ran
so far in the block; ties at random), so every step runs a feasible map and the counts
are as even as the space allows.

``block:k`` maps (the whole stack repeated) have no per-layer values: a step runs one of
them (uniformly) with their share of the feasible maps, as under uniform sampling, the
fair blocks filling the other steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..config import ReuseMap


def layer_choices(maps: Sequence[ReuseMap]) -> list[list[int]]:
    """Each layer's repeat values among the per-layer (non-block) maps, ascending."""
    ilr = [m.repeats for m in maps if not m.is_block]
    if not ilr:
        return []
    return [sorted({r[i] for r in ilr}) for i in range(len(ilr[0]))]


def block_length(choices: list[list[int]]) -> int:
    return math.lcm(*(len(c) for c in choices)) if choices else 0


def fair_block(choices: list[list[int]], feasible: set, rng: np.random.Generator) -> list[tuple]:
    """One block of steps (repeat tuples), every one feasible, each layer's values equally
    often where the swaps find such a block."""
    b, n = block_length(choices), len(choices)
    grid = np.stack([np.concatenate([rng.permutation(c) for _ in range(b // len(c))]) for c in choices], axis=1)

    def bad(k: int) -> bool:
        return tuple(int(v) for v in grid[k]) not in feasible

    wrong = [k for k in range(b) if bad(k)]
    for _ in range(50 * b * n):
        if not wrong:
            break
        k, i, j = wrong[rng.integers(len(wrong))], int(rng.integers(n)), int(rng.integers(b))
        before = bad(k) + bad(j)
        grid[k, i], grid[j, i] = grid[j, i], grid[k, i]
        if bad(k) + bad(j) > before:
            grid[k, i], grid[j, i] = grid[j, i], grid[k, i]  # undo
        else:
            wrong = [s for s in range(b) if bad(s)]
    rows = [tuple(int(v) for v in grid[k]) for k in range(b)]
    if wrong:  # the least-trained feasible map for each step the swaps could not mend
        options = sorted(feasible)
        counts = [dict.fromkeys(c, 0) for c in choices]
        for k, r in enumerate(rows):
            if k not in wrong:
                for i, v in enumerate(r):
                    counts[i][v] += 1
        for k in wrong:
            order = rng.permutation(len(options))
            pick = min((options[o] for o in order), key=lambda r: sum(counts[i][v] for i, v in enumerate(r)))
            rows[k] = pick
            for i, v in enumerate(pick):
                counts[i][v] += 1
    return rows


def fair_sequence(maps: Sequence[ReuseMap], steps: int, rng: np.random.Generator) -> list[ReuseMap]:
    """The map of each of ``steps`` training steps: fair blocks of the per-layer maps, with
    the ``block:k`` maps interleaved at their share of ``maps``."""
    maps = list(maps)
    blocks = [m for m in maps if m.is_block]
    choices = layer_choices(maps)
    if not choices:  # block maps only: nothing per layer to balance
        return [blocks[i] for i in rng.integers(0, len(blocks), size=steps)]
    feasible = {m.repeats for m in maps if not m.is_block}
    share = len(blocks) / len(maps)
    out: list[ReuseMap] = []
    while len(out) < steps:
        for r in fair_block(choices, feasible, rng):
            while blocks and rng.random() < share:
                out.append(blocks[int(rng.integers(len(blocks)))])
            out.append(ReuseMap(r))
    return out[:steps]
