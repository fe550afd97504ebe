"""Racing on simulated outcomes with known truth: does it find the full factorial's top
group, and with how many of its trainings?

    .venv/bin/python experiments/racing/racing_simulation.py [--races 300] [--rules hsd,holm]

Each race: k maps (11, 13 or 15), one or two of them truly better by ``--effect`` noise sd
than the rest (all equal), a per-seed offset every map shares (sd 2) and independent noise
(sd 1); every map starts with 3 seeds, each round the top-group rule (alpha split over the
looks) drops maps, survivors get one more seed, up to 10, and the race ends when one map is
left. The full factorial trains every map on 10 seeds (the same draws) and takes the same
rule's top group. Prints, per setting: how often racing's final set equals the full
factorial's top group, the share of its trainings racing used, and how often it lost the
true best. The simulation is a copy of tests/helpers.py's ``simulate_race`` (the tests check the
same properties on fewer races), so this script needs only the installed package.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pandas as pd

from searchmaps.stats.racing import race_step
from searchmaps.stats.topgroup import top_group


# the same simulation as tests/helpers.py's (the tests check its properties on fewer races)
def long_rows(values, names, metric: str = "val_ppl") -> pd.DataFrame:
    """Long result rows (candidate, seed, metric) from a ``seeds x candidates`` array;
    NaN cells (missing runs) are left out."""
    values = np.asarray(values, dtype=float)
    n, k = values.shape
    df = pd.DataFrame({"candidate": np.tile(np.asarray(names, dtype=object), n),
                       "seed": np.repeat(np.arange(n), k), metric: values.ravel()})
    return df.dropna().reset_index(drop=True)


def simulate_race(true_means, noise_sd: float, max_seeds: int, start_seeds: int = 3, alpha: float = 0.05,
                  rng=None, seed_sd: float | None = None, method: str = "ttest",
                  correction: str = "holm", min_seeds: int = 3, rule: str = "moderated") -> dict:
    """Race on simulated data with known truth, next to the full factorial.

    Run ``s`` of candidate ``c`` scores ``true_means[c] + seed_sd * z_s +
    noise_sd * e_sc`` (z, e standard normal; ``z_s`` is shared by every candidate
    on seed s, so pairing removes it; ``seed_sd`` defaults to ``noise_sd``). Every
    candidate starts with ``start_seeds`` seeds; each round
    :func:`searchmaps.stats.racing.race_step` drops candidates and every survivor gets one
    more seed, until ``max_seeds`` or a single survivor (the search's own rule). The full
    factorial trains every candidate on ``max_seeds`` seeds (the same draws) and takes the
    top group of the same ``rule`` (:func:`searchmaps.stats.topgroup.top_group`).

    Returns ``top_group`` (racing's final survivors), ``trainings``, ``seeds_used``,
    ``dropped_at`` ({candidate: seeds it had when dropped}), ``full_top_group``,
    ``full_trainings`` (n_candidates * max_seeds), ``share`` (trainings /
    full_trainings), ``true_best`` (``"c0"``-style name of the lowest true mean),
    ``true_best_kept`` and ``same_top_group`` (racing's set == the full one).
    """
    rng = np.random.default_rng(rng)
    mu = np.asarray(true_means, dtype=float)
    k = mu.size
    seed_sd = noise_sd if seed_sd is None else seed_sd
    names = [f"c{i}" for i in range(k)]
    values = mu + seed_sd * rng.normal(size=(max_seeds, 1)) + noise_sd * rng.normal(size=(max_seeds, k))
    col = {c: i for i, c in enumerate(names)}

    survivors, n, dropped_at = list(names), min(start_seeds, max_seeds), {}
    first_look = min(max(start_seeds, min_seeds), max_seeds)  # alpha is split over looks first_look..max_seeds
    trainings = k * n
    while True:
        idx = [col[c] for c in survivors]
        step = race_step(long_rows(values[:n, idx], survivors), "val_ppl", alpha, method, correction,
                         first_look, max_seeds, rule=rule)
        dropped_at.update({c: n for c in step["dropped"]})
        survivors = step["survivors"]
        if len(survivors) == 1 or n >= max_seeds:
            break
        n += 1
        trainings += len(survivors)

    full = top_group(pd.DataFrame(values, columns=names), rule, alpha)
    true_best = names[int(np.argmin(mu))]
    return {"top_group": survivors, "trainings": int(trainings), "seeds_used": n, "dropped_at": dropped_at,
            "full_top_group": full, "full_trainings": k * max_seeds,
            "share": trainings / (k * max_seeds), "true_best": true_best,
            "true_best_kept": true_best in survivors, "same_top_group": set(survivors) == set(full)}


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
