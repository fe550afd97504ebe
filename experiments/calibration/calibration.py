"""Calibration of every top-group rule through one synthetic generator: family-wise error
under complete and partial nulls, power, and what a race concludes against the full design.

    .venv/bin/python experiments/calibration/calibration.py [--studies 2000] [--races 300]

A study: k maps x n seeds; run s of map j scores mu_j + 2 z_s + sd_j e_sj (z_s shared by
every map on seed s, so pairing removes it; e standard normal, or Student t with 3 dof
scaled to unit variance). Per-map noise is "equal" (sd 1) or "1:4" (the first ceil(k/3)
maps sd 4, the rest sd 1). Complete null: every mu_j = 0. Partial null: the first
ceil(k/3) maps (the noisy ones under 1:4) tied at 0, the rest 3 worse. FWER = the share of
studies whose top group drops ANY map tied with the best (alpha 0.05); ± is one Monte
Carlo standard error. Power: one map 2 or 3 noise sd worse than ten tied ones (k 11, n 3, 4
and 5), the share of studies that leave it out. Every rule decides through
``searchmaps.stats.topgroup.top_groups`` (the same decisions as the report's, vectorised);
``gameshowell`` is the moderated rule without moderation, ``tukeyonly`` the moderated rule
without its switch to Dunnett's T3 at <= 4 shared seeds (as it was until 2026-12-04);
both measured, not offered.

Race vs full design: k 11 maps, one better by 2 or 4 noise sd, equal noise; a race starts
every map on 3 seeds, drops by the rule (alpha split over looks 3..10), gives survivors
one more seed up to 10. Its analysis (the rule at alpha on the raced, unbalanced matrix:
each pair on the seeds it shares) is compared with the full 10-seed factorial's top group,
and with the old analysis on only the seeds every map has.

With ``arch`` installed (not a dependency of searchmaps), Hansen's Model Confidence Set
(``arch.bootstrap.MCS``) is measured as a rule too, on fewer studies (300 a row, a bootstrap
each).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd


from searchmaps.stats import topgroup
from searchmaps.stats.racing import race_step

RULES = ("moderated", "hsd", "holm", "friedman", "mcb", "gameshowell", "tukeyonly")
ALPHA = 0.05


def decide(x: np.ndarray, rule: str) -> np.ndarray:
    if rule == "gameshowell":
        return topgroup.pair_tests(x, ALPHA, moderate=False)["keep"]
    if rule == "tukeyonly":
        return topgroup.pair_tests(x, ALPHA, t3_seeds=0)["keep"]
    return topgroup.top_groups(x, rule, ALPHA)


def noise_sds(k: int, ratio: float) -> np.ndarray:
    sds = np.ones(k)
    sds[:math.ceil(k / 3)] = ratio
    return sds


def studies(rng, count: int, n: int, mu: np.ndarray, sds: np.ndarray, noise: str) -> np.ndarray:
    k = mu.size
    e = rng.standard_t(3, size=(count, n, k)) / math.sqrt(3) if noise == "t3" else rng.normal(size=(count, n, k))
    return mu + 2.0 * rng.normal(size=(count, n, 1)) + e * sds


def fmt(p: float, count: int) -> str:
    return f"{p:.3f}±{math.sqrt(max(p * (1 - p), 1e-12) / count):.3f}"


def fwer_table(count: int, rules) -> None:
    print(f"FWER (alpha {ALPHA}), {count} studies a cell")
    print(f"{'k':>3} {'noise':>6} {'sd':>5} {'null':>8} {'n':>3} " + " ".join(f"{r:>12}" for r in rules))
    for k in (5, 11):
        for noise in ("normal", "t3"):
            for ratio in (1, 4):
                for null in ("complete", "partial"):
                    for n in (3, 4, 5, 10):
                        rng = np.random.default_rng([k, n, ratio, noise == "t3", null == "partial"])
                        mu = np.zeros(k)
                        if null == "partial":
                            mu[math.ceil(k / 3):] = 3.0
                        x = studies(rng, count, n, mu, noise_sds(k, ratio), noise)
                        tied = mu == 0
                        cells = [fmt(float(np.mean(~decide(x, r)[:, tied].all(axis=1))), count) for r in rules]
                        label = "equal" if ratio == 1 else f"1:{ratio}"
                        print(f"{k:>3} {noise:>6} {label:>5} {null:>8} {n:>3} " + " ".join(f"{c:>12}" for c in cells),
                              flush=True)


def power_table(count: int, rules) -> None:
    print(f"\nPower: one map delta noise sd worse than 10 tied maps (k 11, equal noise), {count} studies")
    print(f"{'n':>3} {'noise':>6} {'delta':>5} " + " ".join(f"{r:>12}" for r in rules))
    for n in (5, 4, 3):
        for noise in ("normal", "t3"):
            for delta in (2.0, 3.0):
                rng = np.random.default_rng([11, n, int(delta), noise == "t3"])
                mu = np.zeros(11)
                mu[-1] = delta
                x = studies(rng, count, n, mu, np.ones(11), noise)
                cells = [fmt(float(np.mean(~decide(x, r)[:, -1])), count) for r in rules]
                print(f"{n:>3} {noise:>6} {delta:>5g} " + " ".join(f"{c:>12}" for c in cells), flush=True)


def mde_table(count: int) -> None:
    """The report's minimum detectable difference (topgroup.mde_in_sd, simulated once with a
    fixed seed) against the power it gives on fresh studies."""
    print(f"\nMinimum detectable difference (80 % power, one map worse than k-1 tied ones, equal normal noise), "
          f"checked on {count} fresh studies")
    print(f"{'rule':>10} {'k':>3} {'n':>3} {'MDE (sd)':>9} {'power there':>12}")
    for rule in ("moderated", "hsd", "holm", "friedman"):
        for k, n in ((11, 5), (5, 3), (11, 10)):
            mde = topgroup.mde_in_sd(rule, k, n, ALPHA)
            if not np.isfinite(mde):
                print(f"{rule:>10} {k:>3} {n:>3} {'none':>9} {'-':>12}")
                continue
            rng = np.random.default_rng([k, n, len(rule), 3])
            mu = np.zeros(k)
            mu[-1] = mde
            x = studies(rng, count, n, mu, np.ones(k), "normal")
            hit = float(np.mean(~decide(x, rule)[:, -1]))
            print(f"{rule:>10} {k:>3} {n:>3} {mde:>9.3f} {fmt(hit, count):>12}", flush=True)


def spread_table(count: int) -> None:
    """Where pooling starts to fail, and what the observed spread of per-map sd looks like."""
    print(f"\nUnequal noise, k 11, n 5, complete null: FWER against the true ratio of the largest to the smallest "
          f"per-map sd (a third of the maps noisy), and the observed spread (searchmaps.stats.topgroup.variance_spread) "
          f"median / 95th percentile, {count} studies")
    print(f"{'ratio':>5} {'hsd':>12} {'moderated':>12} {'spread med':>10} {'spread p95':>10}")
    for ratio in (1.0, 1.5, 2.0, 3.0, 4.0):
        rng = np.random.default_rng([int(ratio * 10), 5])
        x = studies(rng, count, 5, np.zeros(11), noise_sds(11, ratio), "normal")
        hsd = float(np.mean(~decide(x, "hsd").all(axis=1)))
        mod = float(np.mean(~decide(x, "moderated").all(axis=1)))
        spread = np.array([topgroup.variance_spread(pd.DataFrame(s)) for s in x[:500]])
        print(f"{ratio:>5g} {fmt(hsd, count):>12} {fmt(mod, count):>12} {np.median(spread):>10.2f} "
              f"{np.quantile(spread, 0.95):>10.2f}", flush=True)


def mcs_table(count: int) -> None:
    """Hansen's Model Confidence Set (``arch.bootstrap.MCS``, range statistic, i.i.d. seed
    resampling) as a top-group rule, on a few cells: bootstrapping 5-10 seeds."""
    try:
        from arch.bootstrap import MCS
    except ImportError:
        print("\narch is not installed: no MCS rows (pip install arch==8.0.0)")
        return
    print(f"\narch.bootstrap.MCS (size 0.05, 300 bootstrap reps, i.i.d. resampling of seeds), {count} studies a row, "
          f"k 11, normal noise")
    print(f"{'sd':>5} {'null':>8} {'n':>3} {'FWER':>12}")

    def keep(x: np.ndarray) -> np.ndarray:
        out = np.zeros((len(x), x.shape[2]), dtype=bool)
        for s in range(len(x)):
            m = MCS(x[s], size=ALPHA, reps=300, method="R", bootstrap="stationary", block_size=1, seed=s)
            m.compute()
            out[s, list(m.included)] = True
        return out

    for ratio, null, n in ((1, "complete", 5), (1, "complete", 10), (4, "complete", 10), (4, "partial", 10)):
        rng = np.random.default_rng([11, n, ratio, null == "partial", 7])
        mu = np.zeros(11)
        if null == "partial":
            mu[math.ceil(11 / 3):] = 3.0
        x = studies(rng, count, n, mu, noise_sds(11, ratio), "normal")
        p = float(np.mean(~keep(x)[:, mu == 0].all(axis=1)))
        print(f"{'equal' if ratio == 1 else '1:4':>5} {null:>8} {n:>3} {fmt(p, count):>12}", flush=True)


def race(rng, mu: np.ndarray, rule: str, max_seeds: int = 10, start: int = 3) -> tuple[set, set, set]:
    """(the raced study's top group on every seed it has, on the seeds all maps have, the
    full factorial's)."""
    k = mu.size
    names = [f"c{i:02d}" for i in range(k)]
    values = mu + 2.0 * rng.normal(size=(max_seeds, 1)) + rng.normal(size=(max_seeds, k))
    full = pd.DataFrame(values, columns=names)
    have = {c: start for c in names}
    racing = list(names)
    n = start
    while True:
        rows = [{"candidate": c, "seed": s, "val_ppl": full.at[s, c]} for c in racing for s in range(n)]
        step = race_step(pd.DataFrame(rows), alpha=ALPHA, min_seeds=start, max_seeds=max_seeds, rule=rule)
        racing = step["survivors"]
        if len(racing) == 1 or n >= max_seeds:
            break
        n += 1
        for c in racing:
            have[c] = n
    raced = full.copy()
    for c in names:
        raced.loc[have[c]:, c] = np.nan
    return (set(topgroup.top_group(raced, rule, ALPHA)), set(topgroup.top_group(raced.dropna(), rule, ALPHA)),
            set(topgroup.top_group(full, rule, ALPHA)))


def race_table(races: int) -> None:
    print(f"\nRace vs full design (k 11, one map better, equal noise), {races} races a row: share of races whose "
          f"analysis equals the full factorial's top group")
    print(f"{'rule':>10} {'better by':>9} {'all seeds':>12} {'common seeds':>12}")
    for rule in ("moderated", "hsd"):
        for effect in (2.0, 4.0):
            rng = np.random.default_rng([int(effect), len(rule)])
            mu = np.zeros(11)
            mu[0] = -effect
            got = [race(rng, mu, rule) for _ in range(races)]
            every = float(np.mean([a == f for a, _, f in got]))
            common = float(np.mean([c == f for _, c, f in got]))
            print(f"{rule:>10} {effect:>9g} {fmt(every, races):>12} {fmt(common, races):>12}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--studies", type=int, default=2000)
    p.add_argument("--races", type=int, default=300)
    p.add_argument("--mcs-studies", type=int, default=300, help="studies a row for arch's MCS (slow: a bootstrap each)")
    p.add_argument("--rules", default=",".join(RULES))
    args = p.parse_args()
    rules = args.rules.split(",")
    t0 = time.perf_counter()
    fwer_table(args.studies, rules)
    power_table(args.studies, rules)
    mde_table(args.studies)
    spread_table(args.studies)
    mcs_table(args.mcs_studies)
    race_table(args.races)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
