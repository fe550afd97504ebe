"""What ranking a whole space costs: one supernet (train + score every map) against
training every map stand-alone.

    .venv/bin/python benchmarks/supernet_cost.py [--space ilr4] [--budget-flops 1.2e7] [--tokens 3e5] [--sample 4]

Trains one supernet seed over the space's feasible maps and scores all of them (timed
apart), then trains ``--sample`` maps stand-alone (the cheapest, the dearest and random
ones between) and extrapolates their seconds per applied layer to every feasible map.
Prints both and their ratio, from one run on this machine (1 thread each). A second run
on deep8 times the scoring of its 6,561 maps alone (``--score-only deep8``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np



def main() -> None:
    from searchmaps.device import resolve_compile, resolve_precision
    from searchmaps.config import TrialSpec
    from searchmaps.data import load_corpus
    from searchmaps.spaces import feasible_maps, load_space
    from searchmaps.supernet import score_maps, train_supernet
    from searchmaps.train import train

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--space", default="ilr4")
    p.add_argument("--budget-flops", type=float, default=1.2e7)
    p.add_argument("--tokens", type=float, default=3e5)
    p.add_argument("--sample", type=int, default=4)
    p.add_argument("--score-only", default="deep8", help="also time scoring every map of this space ('' to skip)")
    args = p.parse_args()
    corpus = load_corpus("stdlib")
    space = load_space(args.space)
    cfg = dataclasses.replace(space.train, tokens=int(args.tokens), precision=resolve_precision("auto", "cpu"),
                              compile=resolve_compile("auto", "cpu"))
    maps = feasible_maps(space, args.budget_flops)
    cheap = min(maps, key=lambda m: m.applied_layers)
    spec = TrialSpec(model=space.model.with_map(cheap), train=cfg, seed=0)
    train(dataclasses.replace(spec, train=dataclasses.replace(cfg, tokens=4096)), corpus)  # compile once, untimed

    t0 = time.perf_counter()
    result = train_supernet(space, args.budget_flops, spec, corpus=corpus)
    total = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    dear = max(maps, key=lambda m: m.applied_layers)
    pick = [cheap, dear] + [maps[i] for i in rng.choice(len(maps), size=max(0, args.sample - 2), replace=False)]
    per_layer = []
    for m in pick:
        t0 = time.perf_counter()
        train(TrialSpec(model=space.model.with_map(m), train=cfg, seed=0), corpus)
        per_layer.append((time.perf_counter() - t0) / m.applied_layers)
    standalone = float(np.mean(per_layer)) * sum(m.applied_layers for m in maps)
    print(f"{args.space}: {len(maps)} feasible maps, {int(args.tokens):,} tokens per training, {cfg.precision}, "
          f"compile {cfg.compile}, 1 thread")
    print(f"  supernet: {result.record.wall_s:.0f} s training + {result.score_s:.0f} s scoring all maps = {total:.0f} s")
    print(f"  stand-alone, one seed of every map (from {len(pick)} timed, {np.mean(per_layer):.1f} s per applied "
          f"layer): {standalone:.0f} s")
    print(f"  supernet / stand-alone: {total / standalone:.4f}  ({standalone / total:.0f}x cheaper per seed)")
    if args.score_only:
        big = load_space(args.score_only)
        every = list(big.enumerate())
        bspec = TrialSpec(model=big.model.with_map(min(every, key=lambda m: m.applied_layers)),
                          train=dataclasses.replace(big.train, tokens=4096, precision=cfg.precision,
                                                    compile=cfg.compile), seed=0)
        kept = {}
        from searchmaps.train import train_ladder

        train_ladder(bspec, None, corpus, on_model=lambda m: kept.update(model=m))
        t0 = time.perf_counter()
        scores = score_maps(kept["model"], every, corpus, bspec)
        print(f"  scoring all {len(scores):,} maps of {args.score_only} ({bspec.train.eval_tokens:,} validation "
              f"tokens each): {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
