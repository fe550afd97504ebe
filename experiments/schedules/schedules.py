"""Cosine vs warmup-stable-decay at the same horizon: which schedule should be the default?

    .venv/bin/python experiments/schedules/schedules.py [--tokens 3e5] [--seeds 3] [--lrs 1e-3,3e-3] [--workers 2]

Trains ILR's small model (the ilr4 space's proxy) for maps ``1,1,1,1`` and ``4,2,1,1`` with
both schedules (WSD: 1-sqrt cooldown over the last 20 %), paired on seed, and prints the
validation loss of each and the paired difference WSD - cosine (mean and its 95 % t-interval
over seeds). Numbers are from one run on this machine; compare within the run only.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import multiprocessing as mp
import time


import numpy as np
from scipy import stats

MAPS = ("1,1,1,1", "4,2,1,1")


def one(job):
    from searchmaps.device import resolve_compile, resolve_precision
    from searchmaps.config import TrialSpec
    from searchmaps.spaces import load_space
    from searchmaps.train import train

    reuse, schedule, lr, seed, tokens = job
    space = load_space("ilr4")
    train_cfg = dataclasses.replace(space.train, tokens=tokens, lr=lr, schedule=schedule,
                                    precision=resolve_precision("auto", "cpu"), compile=resolve_compile("auto", "cpu"))
    spec = TrialSpec(model=space.model.with_map(reuse), train=train_cfg, seed=seed)
    rec = train(spec)
    return job, rec.val_loss, rec.status.value, rec.wall_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=float, default=3e5)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--lrs", default="1e-3,3e-3")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    lrs = [float(x) for x in args.lrs.split(",")]
    jobs = list(itertools.product(MAPS, ("cosine", "wsd"), lrs, range(args.seeds), [int(args.tokens)]))
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        got = {job[:4]: (loss, status) for job, loss, status, _ in pool.imap_unordered(one, jobs)}
    print(f"{len(jobs)} trainings of {int(args.tokens):,} tokens in {time.perf_counter() - t0:.0f} s "
          f"({args.workers} processes)\n")
    print(f"{'map':<9} {'lr':>6} {'cosine val loss':>16} {'wsd val loss':>14} {'wsd - cosine (95 % CI)':>26}")
    for reuse, lr in itertools.product(MAPS, lrs):
        cos = np.array([got[(reuse, "cosine", lr, s)][0] for s in range(args.seeds)])
        wsd = np.array([got[(reuse, "wsd", lr, s)][0] for s in range(args.seeds)])
        d = wsd - cos
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        print(f"{reuse:<9} {lr:>6g} {cos.mean():>9.4f} ± {cos.std(ddof=1):.3f} {wsd.mean():>7.4f} ± "
              f"{wsd.std(ddof=1):.3f} {d.mean():>+10.4f} ({d.mean() - half:+.4f} to {d.mean() + half:+.4f})")


if __name__ == "__main__":
    main()
