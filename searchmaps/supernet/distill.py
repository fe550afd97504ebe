"""In-place distillation for the supernet (``--distill``; BigNAS, Yu et al. 2020): every
step trains the deepest map (the teacher) on the true labels and the step's other maps
(students) on the teacher's predicted distribution, on the same batch, in one update
(:class:`searchmaps.train.step.Distill`).

Which students a step runs: ``sandwich`` the cheapest map and one drawn uniformly from the
rest (BigNAS's sandwich rule with one random child), ``uniform`` one map drawn uniformly
from the maps other than the teacher. A space of one map has steps of the teacher alone:
its ordinary training, bit for bit. Functions of the maps, the seed and the costs only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..config import ReuseMap
from ..train.step import Distill
from .samplings import sampling as get_sampling


def teacher_of(maps: Sequence[ReuseMap], cost: Callable[[ReuseMap], float]) -> ReuseMap:
    """The deepest map: the most applied layers, ties broken by cost, then by name (so the
    teacher does not depend on the order of ``maps``)."""
    return max(maps, key=lambda m: (m.applied_layers, cost(m), str(m)))


def students_of(maps: Sequence[ReuseMap], teacher: ReuseMap, sampling: str,
                cost: Callable[[ReuseMap], float]) -> tuple[ReuseMap | None, list[ReuseMap]]:
    """(the fixed student, the maps the random student is drawn from), the sampling's rule
    over the maps other than the teacher (:meth:`~searchmaps.supernet.samplings.base.Sampling.students`)."""
    return get_sampling(sampling).students([m for m in maps if m != teacher], cost)


def distill_plan(maps: Sequence[ReuseMap], steps: int, seed: int, sampling: str, teacher: ReuseMap,
                 cost: Callable[[ReuseMap], float]) -> list[Distill]:
    """What each training step runs, a function of ``seed`` alone (its own random stream,
    apart from the data order and from :func:`searchmaps.supernet.map_sequence`'s)."""
    fixed, pool = students_of(maps, teacher, sampling, cost)
    rng = np.random.default_rng([seed, 0x5E, 0xD1])
    draws = [pool[i] for i in rng.integers(0, len(pool), size=steps)] if pool else [None] * steps
    return [Distill(teacher, tuple(m for m in (fixed, d) if m is not None)) for d in draws]


def expected_cost(maps: Sequence[ReuseMap], sampling: str, teacher: ReuseMap, cost: dict) -> float:
    """Training FLOPs per token of an average step: the teacher's, plus the students'."""
    fixed, pool = students_of(maps, teacher, sampling, cost.get)
    return cost[teacher] + (cost[fixed] if fixed is not None else 0.0) + \
        (float(np.mean([cost[m] for m in pool])) if pool else 0.0)
