"""A learning rate fitted for the supernet (``searchmaps.supernet --lr-grid A,B,C``).

For each rate of the grid, one supernet per tuning seed (``--tuning-seeds``; seeds 10000,
10001, ... as for stand-alone tuning, never a scoring seed) is trained with the study's
sampling and methods and scores every map, in ``supernet_tuning/lr<rate>/`` of the study
folder (resumable as the study itself). The rate picked has the lowest mean score over the
space's maps (each map's mean over the tuning seeds, then the mean over maps: the shared
weights as the ranking uses them, every map counting once); a rate whose supernet failed on
any tuning seed counts as infinitely bad, ties go to the lower rate — the rule the
stand-alone tuning applies to one map. The scoring seeds then train at the pick.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence

from ..config import ConfigError
from ..plan import SearchPlan
from ..scheduler import TUNING_SEED_BASE
from . import ensure_scores
from .method import SupernetMethod
from .prescreen import supernet_specs


def tuning_dir(plan: SearchPlan, lr: float):
    return plan.study_dir / "supernet_tuning" / f"lr{lr:g}"


def fit_lr(plan: SearchPlan, grid: Sequence[float], tuning_seeds: int, method: SupernetMethod = SupernetMethod(),
           progress: bool = True, log: Callable[[str], None] = lambda text: print(text, file=sys.stderr)) -> dict:
    """Train (or read back) the tuning supernets of every rate of ``grid`` and pick one.
    Returns what ``supernet.json`` records: the grid, each rate's mean score (nats; inf:
    failed), the pick, the tuning seeds and the tuning's cost (training and fine-tune FLOPs,
    summed over rates and seeds). ConfigError when every rate failed."""
    losses, spent = {}, 0.0
    seeds = list(range(TUNING_SEED_BASE, TUNING_SEED_BASE + tuning_seeds))
    for lr in grid:
        specs = supernet_specs(plan, tuning_seeds, lr, first=TUNING_SEED_BASE)
        rows = ensure_scores(tuning_dir(plan, lr), plan.space, plan.budget_flops, specs, method,
                             workers=plan.resources.workers, progress=progress, log=log, tolerate_failures=True)
        if len(rows):
            per_seed = rows.groupby("seed")
            spent += float(per_seed["supernet_train_flops"].first().sum())
            if "finetune_flops" in rows:
                spent += float(rows["finetune_flops"].sum())
        complete = set(rows["seed"]) == set(seeds) and rows["val_loss"].notna().all()
        losses[lr] = float(rows.groupby("map")["val_loss"].mean().mean()) if complete else math.inf
        if log:
            log(f"supernet lr {lr:g}: mean score {losses[lr]:.4f} over {rows['map'].nunique()} maps"
                if complete else f"supernet lr {lr:g}: failed on a tuning seed")
    pick = min(losses, key=lambda lr: (losses[lr], lr))
    if not math.isfinite(losses[pick]):
        raise ConfigError(f"--lr-grid: the supernet failed at every rate ({','.join(f'{x:g}' for x in grid)}) "
                          f"on the tuning seeds; see {plan.study_dir / 'supernet_tuning'}")
    return {"lr_grid": [float(x) for x in grid], "lr_losses": {f"{lr:g}": losses[lr] for lr in grid},
            "lr": float(pick), "tuning_seeds": seeds, "tuning_flops": spent}
