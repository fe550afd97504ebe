"""What a supernet sampling is: :class:`Sampling`, the rule for the map each training step
runs, its expected cost, and the students it gives in-place distillation. One class per file
beside this one, registered in :data:`searchmaps.supernet.samplings.REGISTRY`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...config import ReuseMap

Cost = Callable[[ReuseMap], float]


class Sampling:
    """A sampling rule. ``name`` is its ``--sampling`` value; ``distills_by_default``: in-place
    distillation is on unless ``--no-distill``; ``groups_refusal``: why it cannot run inside a
    ``--split depth`` group (every map of a group costs the same), "" when it can. The
    defaults are uniform's where a sampling has nothing of its own to say."""

    name = ""
    distills_by_default = False
    groups_refusal = ""

    def sequence(self, maps: Sequence[ReuseMap], steps: int, seed: int, cost: Cost | None = None) -> list[ReuseMap]:
        """The map each of ``steps`` training steps runs, a function of ``seed`` alone (its own
        random stream, apart from the data order); ``cost``: a map's cost (default its
        applied layers), for rules that pick by cost."""
        raise NotImplementedError

    def expected_cost(self, maps: Sequence[ReuseMap], cost: dict) -> float:
        """Training FLOPs per token of an average step (``cost``: each map's), what a FLOP
        budget is spent at: the mean over the maps."""
        return float(np.mean([cost[m] for m in maps]))

    def students(self, others: Sequence[ReuseMap], cost: Cost) -> tuple[ReuseMap | None, list[ReuseMap]]:
        """Distillation's students among ``others`` (the maps but the teacher): the one every
        step runs (None: none) and those one is drawn from uniformly: no fixed one."""
        return None, list(others)
