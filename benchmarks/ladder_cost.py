"""What a horizon ladder costs: one training serving 3 rungs vs 3 separate trainings.

    .venv/bin/python benchmarks/ladder_cost.py [--map 1,1,1,1] [--tokens 1e5,2e5,4e5]

Runs both, one after the other in this process (1 thread), checks that every rung equals its
separate training bit for bit, and prints the wall time of each and their ratio. The ratio is
what matters: it is measured in one run, on one machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import time



def main() -> None:
    from searchmaps.device import resolve_compile, resolve_precision
    from searchmaps.config import TrialSpec
    from searchmaps.data import load_corpus
    from searchmaps.schedule import make_ladder
    from searchmaps.spaces import load_space
    from searchmaps.train import train, train_ladder

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--map", default="1,1,1,1")
    p.add_argument("--tokens", default="1e5,2e5,4e5")
    args = p.parse_args()
    horizons = [int(float(x)) for x in args.tokens.split(",")]
    space = load_space("ilr4")
    cfg = dataclasses.replace(space.train, tokens=horizons[0], schedule="wsd",
                              precision=resolve_precision("auto", "cpu"), compile=resolve_compile("auto", "cpu"))
    spec = TrialSpec(model=space.model.with_map(args.map), train=cfg, seed=0)
    corpus = load_corpus("stdlib")
    train(dataclasses.replace(spec, train=dataclasses.replace(cfg, tokens=4096)), corpus)  # compile once, untimed

    t0 = time.perf_counter()
    rungs = train_ladder(spec, horizons, corpus)
    ladder_s = time.perf_counter() - t0
    separate, separate_s = [], 0.0
    for rung_spec in make_ladder(spec, horizons).specs:
        t0 = time.perf_counter()
        separate.append(train(rung_spec, corpus))
        separate_s += time.perf_counter() - t0
    same = all((a.val_loss, a.curve, a.train_loss) == (b.val_loss, b.curve, b.train_loss)
               for a, b in zip(rungs, separate))
    steps = [r.steps for r in rungs]
    print(f"map {args.map}, horizons {', '.join(f'{h:,}' for h in horizons)} tokens ({steps} steps), "
          f"{cfg.precision}, compile {cfg.compile}")
    print(f"  one ladder training:    {ladder_s:7.1f} s  ({sum(steps[:-1]) // 5 + steps[-1]} steps "
          f"expected: the longest run plus the shorter rungs' 20 % cooldowns)")
    print(f"  {len(horizons)} separate trainings: {separate_s:7.1f} s  ({sum(steps)} steps)")
    print(f"  ladder / separate: {ladder_s / separate_s:.2f}   rungs equal to separate trainings bit for bit: {same}")


if __name__ == "__main__":
    main()
