"""Coverage of the interval rule for quantities over seeds (issue 44, item 1).

A quantity a seed yields one value of (a map's paired gap to the baseline at a horizon, the
slope of that gap per doubling of the horizon, a gap at a FLOP budget) gets its 95 % interval
from :func:`searchmaps.stats.gaps.t_interval`: a t interval over the per-seed values. Here,
over synthetic ladder studies, its coverage against the percentile bootstrap over seeds it
replaced, at 3-10 seeds. A study: one map's per-seed gap to the baseline at three horizons
(log2 spacing 0, 1, 2), ``gap[s, k] = 0.1 - 0.02 k + u_s + v_s k + e_{s,k}``, where ``u`` (a
seed's level), ``v`` (a seed's own slope) and ``e`` (the noise of one evaluation) are normal
or Student t with 3 degrees of freedom (heavy tails), sd 0.01 each. Covered: the true slope
(-0.02) and the true gap at the last horizon (0.06) inside the interval.

    .venv/bin/python experiments/calibration/intervals.py [--studies 4000] [--boot 1000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

X = np.array([0.0, 1.0, 2.0])
SLOPE, LAST = -0.02, 0.1 - 0.02 * 2


def draw(rng, shape, noise: str) -> np.ndarray:
    if noise == "normal":
        return rng.normal(0, 0.01, shape)
    return rng.standard_t(3, shape) * 0.01 / np.sqrt(3.0)  # t(3) scaled to sd 0.01


def studies(rng, count: int, n: int, noise: str) -> np.ndarray:
    u = draw(rng, (count, n, 1), noise)
    v = draw(rng, (count, n, 1), noise)
    e = draw(rng, (count, n, len(X)), noise)
    return 0.1 + SLOPE * X + u + v * X + e  # (study, seed, horizon)


def per_seed(gaps: np.ndarray) -> dict[str, np.ndarray]:
    xc = X - X.mean()
    return {"slope": (gaps - gaps.mean(axis=-1, keepdims=True)) @ xc / (xc @ xc), "last gap": gaps[..., -1]}


def covered_t(v: np.ndarray, truth: float) -> np.ndarray:
    n = v.shape[1]
    half = stats.t.ppf(0.975, n - 1) * v.std(axis=1, ddof=1) / np.sqrt(n)
    return np.abs(v.mean(axis=1) - truth) <= half


def covered_boot(rng, v: np.ndarray, truth: float, n_boot: int) -> np.ndarray:
    count, n = v.shape
    idx = rng.integers(0, n, size=(n_boot, n))
    means = v[:, idx].mean(axis=2)  # (study, draw)
    lo, hi = np.percentile(means, [2.5, 97.5], axis=1)
    return (lo <= truth) & (truth <= hi)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--studies", type=int, default=4000)
    p.add_argument("--boot", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.time()
    se = np.sqrt(0.95 * 0.05 / args.studies)
    print(f"coverage of a nominal 95 % interval, {args.studies} studies a cell (Monte Carlo SE {se:.3f}); "
          f"t: t interval over the per-seed values; boot: percentile bootstrap over seeds ({args.boot} draws)")
    print(f"{'noise':8} {'quantity':9} " + " ".join(f"{f'n={n} t/boot':>14}" for n in range(3, 11)))
    for noise in ("normal", "t3"):
        cells = {q: [] for q in ("slope", "last gap")}
        for n in range(3, 11):
            values = per_seed(studies(rng, args.studies, n, noise))
            for q, truth in (("slope", SLOPE), ("last gap", LAST)):
                t = covered_t(values[q], truth).mean()
                b = covered_boot(rng, values[q], truth, args.boot).mean()
                cells[q].append(f"{t:.3f}/{b:.3f}")
        for q, row in cells.items():
            print(f"{noise:8} {q:9} " + " ".join(f"{c:>14}" for c in row))
    print(f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
