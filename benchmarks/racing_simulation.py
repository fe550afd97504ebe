"""Racing on simulated outcomes with known truth: does it find the full factorial's top
group, and with how many of its trainings?

    .venv/bin/python benchmarks/racing_simulation.py [--races 300] [--rules hsd,holm]

Each race: k maps (11, 13 or 15), one or two of them truly better by ``--effect`` noise sd
than the rest (all equal), a per-seed offset every map shares (sd 2) and independent noise
(sd 1); every map starts with 3 seeds, each round the top-group rule (alpha split over the
looks) drops maps, survivors get one more seed, up to 10, and the race ends when one map is
left. The full factorial trains every map on 10 seeds (the same draws) and takes the same
rule's top group. Prints, per setting: how often racing's final set equals the full
factorial's top group, the share of its trainings racing used, and how often it lost the
true best. The simulation is tests/helpers.py's ``simulate_race`` (the tests check the
same properties on fewer races).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import simulate_race  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--races", type=int, default=300)
    p.add_argument("--rules", default="hsd,holm")
    p.add_argument("--effect", type=float, default=2.0, help="how much better the better maps are, in noise sd")
    args = p.parse_args()
    print(f"{'rule':<5} {'maps':>4} {'better':>6} {'same top group':>15} {'trainings used':>15} {'lost best':>10}")
    t0 = time.perf_counter()
    for rule, k, better in itertools.product(args.rules.split(","), (11, 13, 15), (1, 2)):
        means = np.zeros(k)
        means[:better] = -args.effect
        rng = np.random.default_rng(k * 10 + better)
        runs = [simulate_race(means, 1.0, 10, start_seeds=3, rng=rng, seed_sd=2.0, rule=rule)
                for _ in range(args.races)]
        same = np.mean([r["same_top_group"] for r in runs])
        share = np.mean([r["share"] for r in runs])
        lost = np.mean([not r["true_best_kept"] for r in runs])
        print(f"{rule:<5} {k:>4} {better:>6} {same:>15.3f} {share:>15.3f} {lost:>10.3f}", flush=True)
    print(f"({args.races} races per row, effect {args.effect:g} noise sd, {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
