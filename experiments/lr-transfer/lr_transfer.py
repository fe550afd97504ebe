"""Which parametrisation lets one learning rate serve shallow and deep maps?

    .venv/bin/python experiments/lr-transfer/lr_transfer.py [--tokens 3e5] [--lrs 3e-4,1e-3,3e-3,1e-2] [--seeds 1] [--workers 1]

For each residual parametrisation (prenorm, deeploop, depth-mup) and a shallow and a deep
map of ILR's small model (1,1,1,1: 4 applied layers; 4,2,1,1: 8), trains every rate of the
grid and prints the validation loss at each and the best rate. A flat optimum (the same
best rate for both maps, and little loss when the other map's best is used) is what lets a
single rate compare maps fairly. One run, this machine, compare within it only.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import multiprocessing as mp
import time


MAPS = ("1,1,1,1", "4,2,1,1")
RESIDUALS = ("prenorm", "deeploop", "depth-mup")


def one(job):
    from searchmaps.device import resolve_compile, resolve_precision
    from searchmaps.config import TrialSpec
    from searchmaps.spaces import load_space
    from searchmaps.train import train

    residual, reuse, lr, seed, tokens = job
    space = load_space("ilr4")
    model = dataclasses.replace(space.model, residual=residual).with_map(reuse)
    cfg = dataclasses.replace(space.train, tokens=tokens, lr=lr, precision=resolve_precision("auto", "cpu"),
                              compile=resolve_compile("auto", "cpu"))
    rec = train(TrialSpec(model=model, train=cfg, seed=seed))
    return job, rec.val_loss if rec.ok else float("inf")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=float, default=3e5)
    p.add_argument("--lrs", default="3e-4,1e-3,3e-3,1e-2")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args()
    lrs = [float(x) for x in args.lrs.split(",")]
    jobs = list(itertools.product(RESIDUALS, MAPS, lrs, range(args.seeds), [int(args.tokens)]))
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        got = {}
        for job, loss in pool.imap_unordered(one, jobs):
            got.setdefault(job[:3], []).append(loss)
    print(f"{len(jobs)} trainings of {int(args.tokens):,} tokens, {args.seeds} seed(s), wsd schedule, "
          f"{time.perf_counter() - t0:.0f} s\n")
    print(f"{'residual':<10} {'map':<8} " + " ".join(f"{lr:>9g}" for lr in lrs) + f" {'best lr':>9}")
    best = {}
    for residual, reuse in itertools.product(RESIDUALS, MAPS):
        losses = [sum(got[(residual, reuse, lr)]) / args.seeds for lr in lrs]
        best[(residual, reuse)] = lrs[min(range(len(lrs)), key=losses.__getitem__)]
        print(f"{residual:<10} {reuse:<8} " + " ".join(f"{x:>9.4f}" for x in losses)
              + f" {best[(residual, reuse)]:>9g}")
    print("\nloss of the deep map at the shallow map's best rate, minus its own best (0: one rate fits both):")
    for residual in RESIDUALS:
        deep = {lr: sum(got[(residual, MAPS[1], lr)]) / args.seeds for lr in lrs}
        print(f"  {residual:<10} {deep[best[(residual, MAPS[0])]] - min(deep.values()):+.4f}")


if __name__ == "__main__":
    main()
